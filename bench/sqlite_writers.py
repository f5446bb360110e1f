"""Counts, not times: what several processes writing one SQLite registry cost in COMMITs (each a
sync of the WAL) and busy waits (a refused lock, a sleep of 1-25 ms and a retry).

    python -m bench.sqlite_writers                 # both layouts, 2 processes x 4 writers x 50
    python -m bench.sqlite_writers --layout handed-off --processes 2 --writers 4 --n 50

- own-writer: every process writes on its own connection (how `serve --workers N` wrote before
  the registry writer): its group commits stay inside the process, and the processes queue on
  the file's lock;
- handed-off: the processes hand their write transactions to one writer process
  (catalog.store.sqlite_writer, as `gateway.serve.registry_writer` runs it), which groups them all.

Each writer commits `--n` transactions inserting one table pointer (2 KB of sealed metadata).
The figures do not depend on the machine's load, only the times they would cost do.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import tempfile
import uuid
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path

from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.driver import Driver
from cedarberg.catalog.store.engine import migrate_registry
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.sqlite_driver import SqliteCounts, SqliteDriver
from cedarberg.catalog.store.sqlite_handoff import HandedOffSqliteDriver
from cedarberg.catalog.store.sqlite_writer import SqliteWriter

Figures = tuple[int, int, int]  # commits, transactions, busy waits


def _row(name: str) -> ObjectRow:
    return ObjectRow(
        "w", "ns", name, "table", str(uuid.uuid4()), f"s3://b/{name}/metadata/0.json", b"x" * 2048, 1,
        "local:k", "1", b"k",
    )  # fmt: skip


def _figures(counts: SqliteCounts) -> Figures:
    return counts.commits, counts.transactions, counts.busy_waits


async def _write(database: str, socket_path: str | None, tag: str, writers: int, n: int) -> Figures:
    driver: SqliteDriver | HandedOffSqliteDriver = (
        HandedOffSqliteDriver(database, socket_path) if socket_path else SqliteDriver(database)
    )
    plain: Driver = driver
    store = Store(plain)

    async def one(writer: int) -> None:
        for i in range(n):
            async with store.write() as tx:
                await object_rows.insert_object(tx, _row(f"{tag}-{writer}-{i}"))

    try:
        await asyncio.gather(*(one(writer) for writer in range(writers)))
    finally:
        await store.close()
    return _figures(driver.counts)


def _worker(database: str, socket_path: str | None, job: tuple[str, int, int], out: Queue[Figures]) -> None:
    """One writing process: `job` is its tag, its concurrent writers and their transactions each."""
    tag, writers, n = job
    out.put(asyncio.run(_write(database, socket_path, tag, writers, n)))


def _writer(database: str, listener: socket.socket, ready: Event, stop_fd: int, out: Queue[Figures]) -> None:
    async def serve() -> Figures:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_reader(stop_fd, stop.set)
        driver = SqliteDriver(database, readers=0)
        serving = asyncio.create_task(SqliteWriter(driver, patience=10.0).serve(listener, stop))
        ready.set()
        await serving
        return _figures(driver.counts)

    out.put(asyncio.run(serve()))


async def _prepare(database: str) -> None:
    await migrate_registry(f"sqlite:///{database}")
    store = Store(SqliteDriver(database))
    try:
        async with store.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
    finally:
        await store.close()


def run(layout: str, processes: int, writers: int, n: int) -> Figures:
    """The summed figures of every process that wrote (the writer's, when handed off)."""
    context = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-writers-") as directory:
        database = str(Path(directory) / "registry.db")
        asyncio.run(_prepare(database))
        out: Queue[Figures] = context.Queue()
        socket_path = None
        writer = None
        stop_read, stop_write = os.pipe()
        if layout == "handed-off":
            socket_path = str(Path(directory) / "writer.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(socket_path)
            listener.listen(64)
            ready = context.Event()
            writer = context.Process(target=_writer, args=(database, listener, ready, stop_read, out))
            writer.start()
            ready.wait()
        workers = [
            context.Process(target=_worker, args=(database, socket_path, (f"p{i}", writers, n), out))
            for i in range(processes)
        ]
        for process in workers:
            process.start()
        for process in workers:
            process.join()
        figures = [out.get() for _ in workers]
        if writer is not None:
            os.write(stop_write, b"x")
            writer.join()
            figures.append(out.get())
        os.close(stop_read)
        os.close(stop_write)
    # A worker that hands its writes off counts none of its own: the writer counts them.
    commits, transactions, busy = (sum(column) for column in zip(*figures, strict=True))
    return commits, transactions, busy


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layout", choices=["own-writer", "handed-off", "both"], default="both")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--writers", type=int, default=4, help="concurrent writers per process")
    parser.add_argument("--n", type=int, default=50, help="transactions per writer")
    args = parser.parse_args()
    layouts = ["own-writer", "handed-off"] if args.layout == "both" else [args.layout]
    print("| layout | write transactions | COMMITs (syncs) | busy waits |")
    print("|---|---|---|---|")
    for layout in layouts:
        commits, transactions, busy = run(layout, args.processes, args.writers, args.n)
        print(f"| {layout} | {transactions} | {commits} | {busy} |")


if __name__ == "__main__":
    main()
