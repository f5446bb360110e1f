"""A SQLite registry's writer process served in the test's own event loop (catalog.store.sqlite_writer
over a real file and a real Unix socket), the stores of workers that hand it their writes, and raw
sessions that speak its wire protocol directly (catalog.store.writer_wire)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store.connect import open_store
from cedarberg.catalog.store.engine import migrate_registry
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.sqlite_driver import SqliteDriver
from cedarberg.catalog.store.sqlite_handoff import HandedOffSqliteDriver
from cedarberg.catalog.store.sqlite_writer import SqliteWriter
from cedarberg.catalog.store.writer_wire import frame, read_message


@dataclass
class Writer:
    """A writer serving on a socket, and the file it writes."""

    driver: SqliteDriver
    socket_path: str
    database: Path

    def worker_store(self) -> Store:
        """What one gateway worker opens: reads here, writes handed to the writer."""
        return Store(HandedOffSqliteDriver(str(self.database), self.socket_path, busy_timeout=2.0))


@asynccontextmanager
async def serving_writer(tmp_path: Path) -> AsyncIterator[Writer]:
    """A writer on a fresh registry in `tmp_path` with namespace `ns` of warehouse `w`."""
    database = tmp_path / "registry.db"
    url = f"sqlite:///{database}"
    await migrate_registry(url)
    setup = await open_store(url, migrate=False)
    try:
        async with setup.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
    finally:
        await setup.close()
    socket_path = str(tmp_path / "writer.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(16)
    driver = SqliteDriver(str(database), readers=0)
    stop = asyncio.Event()
    serving = asyncio.create_task(SqliteWriter(driver, patience=1.0).serve(listener, stop))
    try:
        yield Writer(driver, socket_path, database)
    finally:
        stop.set()
        await serving


async def raw_session(
    writer: Writer, *messages: list[object]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, stream = await asyncio.open_unix_connection(writer.socket_path)
    for message in messages:
        stream.write(frame(message))
    await stream.drain()
    return reader, stream


async def reply(reader: asyncio.StreamReader) -> list[object]:
    """The writer's next message (it must not have closed the session)."""
    message = await read_message(reader)
    assert message is not None
    return message


_INSERT_NAMESPACE = (
    "INSERT INTO namespaces (warehouse, name, parent, properties, created_at_ms) VALUES (?, ?, ?, ?, 0)"
)


def inserting(namespace: str) -> list[object]:
    """The statement message that inserts `namespace` (of warehouse `w`)."""
    return ["exec", _INSERT_NAMESPACE, ["w", namespace, None, "{}"]]


async def open_transaction_inserting(
    writer: Writer, namespace: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw session holding the writer lock: its transaction has inserted `namespace` (of `w`)."""
    reader, stream = await raw_session(writer, ["begin"], inserting(namespace))
    assert await reply(reader) == ["ok"]
    assert (await reply(reader))[0] == "rows"
    return reader, stream


async def until_one_waits(writer: Writer) -> None:
    """Until one transaction waits for the writer lock (30 s at most): it will join the group of
    the transaction holding it."""
    for _ in range(3000):
        if writer.driver._waiting:
            break
        await asyncio.sleep(0.01)
    assert writer.driver._waiting == 1


async def send_commit(stream: asyncio.StreamWriter) -> None:
    stream.write(frame(["commit"]))
    await stream.drain()


async def die_after_commit(writer: Writer, dying: asyncio.StreamWriter, dead: asyncio.Event) -> None:
    """Once another transaction waits to join the group, the `dying` worker sends "commit" and
    dies before the group's COMMIT; `dead` tells the waiting transaction's body it may go on."""
    await until_one_waits(writer)
    await send_commit(dying)
    dying.close()
    await asyncio.sleep(0.2)
    dead.set()
