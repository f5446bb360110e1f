"""Write transactions handed to the SQLite registry's writer (catalog.store.sqlite_writer) by the
drivers of several workers (catalog.store.sqlite_handoff), on a real file over a real Unix
socket: they share the writer's group commits without any busy wait, a transaction that fails
takes back only its own changes, and a worker that dies or speaks out of turn mid-transaction
leaves nothing behind. (Two real workers of `cedarberg serve`: tests/gateway/test_sqlite_writer.py.)"""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path

import pytest

from cedarberg.catalog.errors import AlreadyExistsError, StorageUnavailableError
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.connect import open_driver
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.sqlite_driver import SqliteDriver
from cedarberg.catalog.store.sqlite_handoff import HandedOffSqliteDriver, hand_writes_to
from cedarberg.catalog.store.writer_wire import frame
from tests.support.writer_sessions import (
    Writer,
    die_after_commit,
    inserting,
    open_transaction_inserting,
    raw_session,
    reply,
    send_commit,
    until_one_waits,
)

WRITERS = 8
COMMITS_EACH = 6


def _row(name: str) -> ObjectRow:
    return ObjectRow(
        "w", "ns", name, "table", str(uuid.uuid4()), f"s3://b/{name}/metadata/0.json", b"\x00sealed\xff", 1,
        "local:k", "1", b"k",
    )  # fmt: skip


async def _names(store: Store) -> list[str]:
    async with store.read() as tx:
        return sorted(await object_rows.list_objects(tx, "w", "ns", "table", None, 1000))


async def test_two_workers_share_the_writers_commits_without_busy_waits(writer: Writer) -> None:
    workers = [writer.worker_store(), writer.worker_store()]
    try:

        async def create(worker: Store, n: int) -> None:
            for i in range(COMMITS_EACH):
                async with worker.write() as tx:
                    await object_rows.insert_object(tx, _row(f"t{n}-{i}"))

        await asyncio.gather(*(create(workers[n % 2], n) for n in range(WRITERS)))
        names = await _names(workers[1])  # read on a worker's own connection
        stored = await _object(workers[0], "t0-0")
    finally:
        for worker in workers:
            await worker.close()
    assert names == sorted(f"t{n}-{i}" for n in range(WRITERS) for i in range(COMMITS_EACH))
    assert stored.metadata == b"\x00sealed\xff"  # bytes survive the socket both ways
    counts = writer.driver.counts
    assert counts.busy_waits == 0
    assert counts.transactions == WRITERS * COMMITS_EACH
    assert counts.commits < counts.transactions  # concurrent writers shared COMMITs (group commit)


async def _object(store: Store, name: str) -> ObjectRow:
    async with store.read() as tx:
        row = await object_rows.get_object(tx, "w", "ns", name)
    assert row is not None
    return row


async def test_a_failing_transaction_takes_back_only_its_own_changes(writer: Writer) -> None:
    worker = writer.worker_store()
    try:
        async with worker.write() as tx:
            await object_rows.insert_object(tx, _row("taken"))

        async def create(name: str, fail: bool) -> None:
            async with worker.write() as tx:
                await object_rows.insert_object(tx, _row(name))
                await asyncio.sleep(0)  # the others queue up behind this one: one group
                if fail:
                    await object_rows.insert_object(
                        tx, _row("taken")
                    )  # a constraint refuses it in the writer

        outcomes = await asyncio.gather(
            *(create(f"n{i}", fail=i == 2) for i in range(6)), return_exceptions=True
        )
        names = await _names(worker)
    finally:
        await worker.close()
    assert [type(outcome).__name__ for outcome in outcomes] == ["NoneType"] * 2 + ["AlreadyExistsError"] + [
        "NoneType"
    ] * 3
    assert isinstance(outcomes[2], AlreadyExistsError)
    assert names == sorted(["taken", "n0", "n1", "n3", "n4", "n5"])


async def test_a_worker_that_dies_or_speaks_out_of_turn_mid_transaction_leaves_nothing(
    writer: Writer,
) -> None:
    """An ordinary local process of the gateway's user talking to the writer directly: a session
    that closes before "commit", stalls past the writer's patience, or sends something that is
    not a message is rolled back, and the writer keeps serving the others."""
    worker = writer.worker_store()
    try:
        # Dies after its statement: the connection closes before "commit".
        reader, stream = await raw_session(writer, ["begin"], inserting("died"))
        assert (await reader.readexactly(4 + len(b'["ok"]')))[4:] == b'["ok"]'
        await reader.readexactly(4)  # the statement's answer: the transaction is open in the writer
        stream.close()
        # Stalls past the writer's patience (1 s) with its transaction open.
        _, stalled = await raw_session(writer, ["begin"], inserting("stalled"))
        # Sends garbage mid-transaction.
        _, garbage = await raw_session(writer, ["begin"], inserting("garbage"))
        garbage.write(struct.pack(">I", 5) + b"{nope")
        # The others keep writing through it all.
        for i in range(3):
            async with worker.write() as tx:
                await namespace_rows.insert_namespace(tx, "w", f"alive{i}", None, {})
        await asyncio.sleep(1.5)
        async with worker.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "after", None, {})
        stalled.close()
        garbage.close()
        async with worker.read() as tx:
            found = {
                name: await namespace_rows.get_namespace(tx, "w", name)
                for name in ("died", "stalled", "garbage", "after")
            }
    finally:
        await worker.close()
    assert found == {"died": None, "stalled": None, "garbage": None, "after": {}}


async def test_a_process_routed_to_a_writer_opens_handed_off_drivers(writer: Writer, tmp_path: Path) -> None:
    """`hand_writes_to` routes every driver `open_driver` opens for that file (the catalog's and
    the key store's) and no other file's."""
    other = tmp_path / "other.db"
    hand_writes_to(str(writer.database), writer.socket_path)
    routed = open_driver(f"sqlite:///{writer.database}", 4)
    unrouted = open_driver(f"sqlite:///{other}", 4)
    try:
        assert isinstance(routed, HandedOffSqliteDriver)
        assert isinstance(unrouted, SqliteDriver)
    finally:
        hand_writes_to(str(writer.database), None)
        await routed.close()
        await unrouted.close()
    again = open_driver(f"sqlite:///{writer.database}", 4)
    await again.close()
    assert isinstance(again, SqliteDriver)  # unrouted again


async def test_a_worker_that_dies_after_commit_fails_its_group_instead_of_landing_later(
    writer: Writer,
) -> None:
    """A worker killed between sending "commit" and reading the answer cannot tell its client,
    who may read the change as absent at once (another worker reads the file): the writer rolls
    back that group, and every member of it is told it failed, rather than commit it afterwards.
    A group whose members all stay is committed (the control, last)."""
    _, dying = await open_transaction_inserting(writer, "orphan")
    # Another worker's transaction waits for the writer lock: it joins the dying one's group.
    other_reader, other = await raw_session(writer, ["begin"])
    await until_one_waits(writer)
    await send_commit(dying)
    assert await reply(other_reader) == ["ok"]  # the group passed to the other transaction
    dying.close()  # the worker dies before the group's COMMIT
    await asyncio.sleep(0.2)
    other.write(frame(inserting("bystander")))
    assert (await reply(other_reader))[0] == "rows"
    await send_commit(other)
    assert await reply(other_reader) == ["database", "TransactionAbandoned"]  # told: not committed
    other.close()
    worker = writer.worker_store()
    try:
        async with worker.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "after", None, {})
        async with worker.read() as tx:
            found = {
                name: await namespace_rows.get_namespace(tx, "w", name)
                for name in ("orphan", "bystander", "after")
            }
    finally:
        await worker.close()
    assert found == {"orphan": None, "bystander": None, "after": {}}


async def test_a_worker_failing_on_a_dead_workers_change_fails_as_unavailable_not_with_its_error(
    writer: Writer,
) -> None:
    """The attack the crash run found (a retried rename answered 404 for a rename that never
    landed): a worker's transaction joins the group of a worker that then dies after "commit",
    finds that worker's change (here a name taken) and fails on it. The writer rolls the group
    back, so the change never existed: the worker must fail as unavailable (503, retryable),
    not answer the failure it read. The control: with nobody dying, that failure is answered
    once the change is durable (test_registry_drivers' slow-COMMIT test, and below, after)."""
    _, dying = await open_transaction_inserting(writer, "orphan")
    dead = asyncio.Event()
    worker = writer.worker_store()

    async def create_unless_taken(name: str) -> None:
        async with worker.write() as tx:
            if await namespace_rows.get_namespace(tx, "w", name) is not None:
                await dead.wait()  # the dying worker is gone before this group's COMMIT
                raise AlreadyExistsError(f"Namespace already exists: {name}")
            await namespace_rows.insert_namespace(tx, "w", name, None, {})

    try:
        attempt = asyncio.create_task(create_unless_taken("orphan"))
        await die_after_commit(writer, dying, dead)
        with pytest.raises(StorageUnavailableError, match="TransactionNotCommitted"):
            await attempt
        await create_unless_taken("orphan")  # the name was never taken: the retry creates it
        with pytest.raises(AlreadyExistsError):  # the control: now it is taken, and durably so
            await create_unless_taken("orphan")
        async with worker.read() as tx:
            created = await namespace_rows.get_namespace(tx, "w", "orphan")
    finally:
        await worker.close()
    assert created == {}
