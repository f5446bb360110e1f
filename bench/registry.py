"""Micro-benchmark of the registry (catalog.store) in one process: CPU and wall time per
registry transaction, on SQLite and on PostgreSQL.

    python -m bench.registry                      # both stores, default loop sizes
    python -m bench.registry --store sqlite --n 2000

Measured (each a bounded loop of `--n` transactions, after a warm-up of `--n // 10`):
- commit-registry: a write transaction as a table commit makes it: read the pointer, swap it;
- commit-registry x8: the same by 8 concurrent writers on 8 tables (per transaction);
- create-namespace: a write transaction inserting a namespace;
- get-object: a read transaction reading one pointer (the read cache off);
- catalog-commit: the whole in-process commit of a property change (`TableService.commit`,
  sealing metadata files, local KEK), `--n // 4` of them;
- create-namespace-service: `NamespaceService.create` (namespace row, its roots), `--n // 4`.

CPU is the process's CPU time (every thread: the driver's threads, and the kernel's work for
fsync, count) divided by the count; "loop" is the event loop thread's share, what the serving
capacity of a gateway process is spent on. PostgreSQL's own CPU is not included (another
process); the server is the test suite's (tests/support/postgres.py: fsync off), so its numbers
show the gateway's cost, not the disk's.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import bench  # noqa: F401  (puts the repository on sys.path for `tests.support`)
from cedarberg.catalog import requests as req
from cedarberg.catalog.context import CatalogContext, Limits, Warehouse
from cedarberg.catalog.idempotency import Idempotency
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.sealing import Sealer
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.connect import open_store
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.tables import TableService
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.settings import KmsSettings

WAREHOUSE = "w"
WRITERS = 8  # concurrent writers, one table each
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


async def _allow(_effects: object) -> None:
    """The commit gate: everything is allowed (authorization is not measured here)."""


async def _measure(name: str, n: int, step: Callable[[int], Awaitable[None]], per_step: int = 1) -> None:
    for i in range(max(1, n // 10)):  # warm-up: connections opened, statements prepared
        await step(-1 - i)
    cpu, loop_cpu, wall = time.process_time(), time.thread_time(), time.perf_counter()
    for i in range(n):
        await step(i)
    cpu, loop_cpu, wall = time.process_time() - cpu, time.thread_time() - loop_cpu, time.perf_counter() - wall
    n *= per_step
    print(
        f" {name:25s} n={n:5d}  cpu {cpu / n * 1e6:7.1f} µs/tx (loop {loop_cpu / n * 1e6:7.1f})"
        f"  wall {wall / n * 1e6:7.1f} µs/tx  {n / wall:6.0f} tx/s"
    )


async def _store_benchmarks(store: Store, n: int) -> None:
    async with store.write() as tx:
        await namespace_rows.insert_namespace(tx, WAREHOUSE, "bench", None, {})
        await object_rows.insert_object(
            tx,
            ObjectRow(
                WAREHOUSE,
                "bench",
                "t",
                "table",
                str(uuid.uuid4()),
                "loc-0",
                b"m" * 200,
                1,
                "local:k",
                "1",
                b"k" * 60,
            ),
        )
    counter = [0]

    async def commit_registry(_i: int) -> None:
        async with store.write() as tx:
            row = await object_rows.get_object(tx, WAREHOUSE, "bench", "t")
            assert row is not None
            counter[0] += 1
            assert await object_rows.swap_object(tx, row, f"loc-{counter[0]}", b"n" * 200)

    async def create_namespace(i: int) -> None:
        async with store.write() as tx:
            await namespace_rows.insert_namespace(
                tx, WAREHOUSE, f"ns{i}_{uuid.uuid4().hex[:6]}", None, {"owner": "bench"}
            )

    async def get_object(_i: int) -> None:
        async with store.read() as tx:
            assert await object_rows.get_object(tx, WAREHOUSE, "bench", "t") is not None

    for i in range(WRITERS):
        async with store.write() as tx:
            await object_rows.insert_object(
                tx,
                ObjectRow(
                    WAREHOUSE,
                    "bench",
                    f"t{i}",
                    "table",
                    str(uuid.uuid4()),
                    "loc-0",
                    b"m" * 200,
                    1,
                    "local:k",
                    "1",
                    b"k" * 60,
                ),
            )

    async def commit_concurrently(i: int) -> None:
        """WRITERS commits at once, one per table (a step counts WRITERS transactions)."""

        async def one(table: str) -> None:
            async with store.write() as tx:
                row = await object_rows.get_object(tx, WAREHOUSE, "bench", table)
                assert row is not None
                assert await object_rows.swap_object(tx, row, f"loc-{i}-{uuid.uuid4().hex[:6]}", b"n" * 200)

        await asyncio.gather(*(one(f"t{w}") for w in range(WRITERS)))

    await _measure("commit-registry", n, commit_registry)
    await _measure(f"commit-registry x{WRITERS}", max(1, n // WRITERS), commit_concurrently, per_step=WRITERS)
    await _measure("create-namespace", n, create_namespace)
    await _measure("get-object", n, get_object)


async def _catalog_benchmarks(store: Store, work: Path, n: int) -> None:
    keyring = KeyRing.open(KmsSettings(), work / "kms")
    sealer = Sealer(keyring)
    ctx = CatalogContext(
        store=store,
        sealer=sealer,
        warehouses={WAREHOUSE: Warehouse(WAREHOUSE, (work / "warehouse").as_uri(), True, 0)},
        default_warehouse=WAREHOUSE,
        idempotency=Idempotency(store, sealer, 1800),
        limits=Limits(),
    )
    try:
        namespace = Namespace.of(["svc"])
        await NamespaceService(ctx).create(None, namespace, {}, None)
        tables = TableService(ctx)
        create = req.parse(req.CreateTableRequest, {"name": "t", "schema": SCHEMA})
        await tables.create(None, namespace, create, None, _allow)
        identifier = Identifier.of(namespace, "t")

        async def catalog_commit(i: int) -> None:
            change = req.parse(
                req.CommitTableRequest,
                {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": str(i)}}]},
            )
            await tables.commit(None, identifier, change, None, _allow)

        async def create_namespace(i: int) -> None:
            await NamespaceService(ctx).create(
                None, Namespace.of(["svc", f"c{i}_{uuid.uuid4().hex[:6]}"]), {}, None
            )

        await _measure("catalog-commit", max(1, n // 4), catalog_commit)
        await _measure("create-namespace-service", max(1, n // 4), create_namespace)
    finally:
        await keyring.aclose()


async def _run(label: str, url: str, work: Path, n: int) -> None:
    print(f"{label}:")
    store = await open_store(url)
    try:
        await _store_benchmarks(store, n)
        await _catalog_benchmarks(store, work, n)
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--n", type=int, default=1000, help="transactions per measurement (bounded)")
    args = parser.parse_args()
    n = max(1, min(args.n, 100_000))
    with tempfile.TemporaryDirectory(prefix="cedarberg-bench-registry-") as tmp:
        work = Path(tmp)
        if args.store in ("sqlite", "both"):
            (work / "sqlite").mkdir()
            asyncio.run(_run("sqlite", f"sqlite:///{work / 'sqlite' / 'registry.db'}", work / "sqlite", n))
        if args.store in ("postgres", "both"):
            from tests.support import postgres

            (work / "postgres").mkdir()
            try:
                url = postgres.create_database("bench_registry")
                asyncio.run(_run("postgres", url, work / "postgres", n))
            finally:
                postgres.stop_server()


if __name__ == "__main__":
    main()
