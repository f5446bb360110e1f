"""CPU per catalog commit, in process: the catalog service (`catalog.tables`, `catalog.namespaces`)
over a real SQLite registry, the local KEK and a local warehouse, with no HTTP in front.

    PYTHONPATH=src .venv/bin/python -m bench.commit_path [--commits 300] [--namespaces 300]

Three loops, each bounded:

- sequential `set-properties` commits on one table whose metadata is about 25 KB (a 24-column
  schema, 8 snapshots, a full metadata log), in a sealing warehouse and in a plain one;
- namespace creations.

Each loop is run once plain (the CPU milliseconds per operation it prints are those: user + system
of the whole process, `time.process_time`, so the registry's and the file writes' threads count)
and, for the commits, once more with every phase wrapped to split that CPU by phase (the wrapping
adds a little; "other" is what no phase covers: the registry reads, the event loop, the commit
lock, building the request). Phases nest (the swap seals the registry copy): each phase is counted
without the phases inside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import inspect
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cedarberg.catalog import commits, documents, effects, fileio, table_changes, table_metadata
from cedarberg.catalog import requests as req
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.effects import Effect
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.sealing import Sealer
from cedarberg.catalog.tables import TableService
from tests.support.catalogs import catalog_context

NAMESPACE = Namespace.of(["bench"])
TABLE = Identifier.of(NAMESPACE, "c")
COLUMNS = 24
SNAPSHOTS = 8
# Commits before measuring: the metadata log (100 entries by default) is full, so the metadata
# stops growing and every measured commit handles the same size.
WARMUP_COMMITS = 110


async def allow(_effects: Sequence[Effect]) -> None:
    """The gate: allows everything (authorization is the gateway's, not measured here)."""


def _schema() -> dict[str, Any]:
    types = ("long", "string", "double", "timestamp", "boolean")
    fields = [
        {"id": i + 1, "name": f"column_{i:03d}", "type": types[i % len(types)], "required": False}
        for i in range(COLUMNS)
    ]
    return {"type": "struct", "schema-id": 0, "fields": fields}


def _snapshot_updates(location: str, first_id: int, count: int) -> list[dict[str, Any]]:
    updates: list[dict[str, Any]] = []
    parent: int | None = None
    for i in range(count):
        snapshot_id = first_id + i
        snapshot: dict[str, Any] = {
            "snapshot-id": snapshot_id,
            "sequence-number": i + 1,
            "timestamp-ms": 1_700_000_000_000 + i,
            "manifest-list": f"{location}/metadata/snap-{snapshot_id}-1-{i:08x}.avro",
            "summary": {
                "operation": "append",
                "added-data-files": "1",
                "added-records": "1000",
                "added-files-size": "4096",
                "total-records": str(1000 * (i + 1)),
                "total-data-files": str(i + 1),
            },
            "schema-id": 0,
        }
        if parent is not None:
            snapshot["parent-snapshot-id"] = parent
        updates.append({"action": "add-snapshot", "snapshot": snapshot})
        updates.append(
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id}
        )
        parent = snapshot_id
    return updates


def _commit_request(table_uuid: str, value: str) -> req.CommitTableRequest:
    return req.parse(
        req.CommitTableRequest,
        {
            "requirements": [{"type": "assert-table-uuid", "uuid": table_uuid}],
            "updates": [{"action": "set-properties", "updates": {"bench.counter": value}}],
        },
    )


async def _prepare_table(ctx: CatalogContext) -> tuple[str, int]:
    """Create the namespace and the table, add the snapshots, fill the metadata log; the table's
    UUID and the size of its metadata JSON."""
    tables = TableService(ctx)
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    create = req.parse(req.CreateTableRequest, {"name": TABLE.name, "schema": _schema()})
    created = documents_load(await tables.create(None, NAMESPACE, create, None, allow))
    table_uuid, location = created["metadata"]["table-uuid"], created["metadata"]["location"]
    add = req.parse(
        req.CommitTableRequest,
        {"requirements": [], "updates": _snapshot_updates(location, 1000, SNAPSHOTS)},
    )
    await tables.commit(None, TABLE, add, None, allow)
    body = b""
    for i in range(WARMUP_COMMITS):
        body = await tables.commit(None, TABLE, _commit_request(table_uuid, f"w{i}"), None, allow) or b""
    return table_uuid, len(documents.dumps(documents_load(body)["metadata"]))


def documents_load(body: bytes | None) -> Any:
    assert body is not None
    return orjson.loads(body)


async def _commits(ctx: CatalogContext, table_uuid: str, count: int, tag: str) -> float:
    """CPU seconds of `count` sequential commits."""
    tables = TableService(ctx)
    started = time.process_time()
    for i in range(count):
        await tables.commit(None, TABLE, _commit_request(table_uuid, f"{tag}{i}"), None, allow)
    return time.process_time() - started


async def _namespaces(ctx: CatalogContext, count: int) -> float:
    service = NamespaceService(ctx)
    started = time.process_time()
    for i in range(count):
        await service.create(None, Namespace.of(["created", f"n{i}"]), {"owner": "bench"}, None)
    return time.process_time() - started


class Phases:
    """CPU per phase, each counted without the phases nested inside it (see the module)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._stack: list[list[float]] = []  # [start, CPU of nested phases]

    def _enter(self) -> None:
        self._stack.append([time.process_time(), 0.0])

    def _leave(self, phase: str) -> None:
        start, nested = self._stack.pop()
        spent = time.process_time() - start
        self.totals[phase] = self.totals.get(phase, 0.0) + spent - nested
        if self._stack:
            self._stack[-1][1] += spent

    def wrap(self, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                self._enter()
                try:
                    return await function(*args, **kwargs)
                finally:
                    self._leave(phase)

            return timed_async

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._enter()
            try:
                return function(*args, **kwargs)
            finally:
                self._leave(phase)

        return timed

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap the phases where the commit path looks them up; unwrap on exit."""
        targets: list[tuple[Any, str, str]] = [
            (Sealer, "object_key", "unwrap data key"),
            (Sealer, "open_record", "open registry copy"),
            (table_changes, "parse_metadata", "parse metadata"),
            (table_metadata, "apply_updates", "apply updates"),
            (documents, "model_json", "serialise metadata"),
            (effects, "of_table_change", "effects"),
            (Sealer, "seal_file", "seal file"),
            (Sealer, "seal_record", "seal registry copy"),
            (fileio, "write_new_file", "write file (thread)"),
            (commits, "_swap_all", "swap transaction"),
        ]
        saved = [(owner, name, getattr(owner, name)) for owner, name, _phase in targets]
        for owner, name, phase in targets:
            setattr(owner, name, self.wrap(phase, getattr(owner, name)))
        try:
            yield
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)


async def _table_run(seal_files: bool, count: int, rounds: int) -> None:
    label = "sealed" if seal_files else "plain"
    with tempfile.TemporaryDirectory(prefix="cedarberg-commit-bench-") as tmp:
        async with catalog_context(Path(tmp), seal_files=seal_files) as ctx:
            table_uuid, size = await _prepare_table(ctx)
            per_commit = [await _commits(ctx, table_uuid, count, f"r{r}-") / count for r in range(rounds)]
            phases = Phases()
            with phases.installed():
                spent = await _commits(ctx, table_uuid, count, "p-")
    median = statistics.median(per_commit) * 1000
    print(
        f"commit ({label} warehouse, metadata {size / 1024:.1f} KB): {median:.3f} ms CPU per commit "
        f"(median of {rounds} runs of {count}: {', '.join(f'{p * 1000:.3f}' for p in per_commit)})"
    )
    print(f"  phases (instrumented run: {spent / count * 1000:.3f} ms per commit):")
    covered = 0.0
    for phase, total in sorted(phases.totals.items(), key=lambda item: -item[1]):
        covered += total
        print(f"    {phase:<22} {total / count * 1000:7.3f} ms")
    print(f"    {'other':<22} {(spent - covered) / count * 1000:7.3f} ms")


async def _namespace_run(count: int, rounds: int) -> None:
    per_create: list[float] = []
    for _round in range(rounds):
        with tempfile.TemporaryDirectory(prefix="cedarberg-commit-bench-") as tmp:
            async with catalog_context(Path(tmp)) as ctx:
                await NamespaceService(ctx).create(None, Namespace.of(["created"]), {}, None)
                per_create.append(await _namespaces(ctx, count) / count)
    print(
        f"create namespace: {statistics.median(per_create) * 1000:.3f} ms CPU per namespace "
        f"(median of {rounds} runs of {count}: {', '.join(f'{p * 1000:.3f}' for p in per_create)})"
    )


async def main(commits_per_run: int, namespaces: int, rounds: int) -> None:
    await _table_run(True, commits_per_run, rounds)
    await _table_run(False, commits_per_run, rounds)
    await _namespace_run(namespaces, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=300, help="commits per measured run (at most 5000)")
    parser.add_argument("--namespaces", type=int, default=300, help="namespaces per run (at most 5000)")
    parser.add_argument("--rounds", type=int, default=3, help="measured runs per loop (at most 10)")
    args = parser.parse_args()
    asyncio.run(main(min(args.commits, 5000), min(args.namespaces, 5000), min(args.rounds, 10)))
