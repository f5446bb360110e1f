"""The common writes as one message each to the SQLite registry's writer process
(catalog.store.writer_calls, through `catalog.store.server_writes` on a worker's handed-off store),
on a real file over a real Unix socket: a commit's swap and a namespace creation each cost the
worker one round trip, land whole and durable, and every answer other than DONE leaves nothing
written, exactly as the general transactions and PostgreSQL's functions answer."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store import idempotency as idempotency_rows
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import roots as root_rows
from cedarberg.catalog.store import server_writes, writer_calls
from cedarberg.catalog.store.idempotency import IdempotencyRecord
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.server_writes import NewNamespace, NewVersion, Outcome, PendingRecord
from cedarberg.catalog.store.sqlite_handoff import _Session
from cedarberg.catalog.store.tx import StoreTx
from tests.support.writer_sessions import Writer, die_after_commit, open_transaction_inserting

ROOT = "s3://b/ns/t"


def _row(name: str, location: str) -> ObjectRow:
    return ObjectRow(
        "w", "ns", name, "table", str(uuid.uuid4()), location, b"\x00sealed\xff", 1, "local:k", "1", b"k"
    )  # fmt: skip


def _pending(key: str) -> PendingRecord:
    return PendingRecord(key, IdempotencyRecord("createNamespace", "h", "ok", b"\x01body", time.time()), 0.0)


@pytest.fixture
async def worker(writer: Writer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Store, list[str]]]:
    """A worker's store, and the first element of every message it sends the writer."""
    sent: list[str] = []
    ask = _Session.ask

    async def counted(session: _Session, message: list[Any]) -> list[Any]:
        sent.append(str(message[0]))
        return await ask(session, message)

    monkeypatch.setattr(_Session, "ask", counted)
    store = writer.worker_store()
    assert store.writes_alone
    try:
        yield store, sent
    finally:
        await store.close()


async def _table(store: Store, name: str, location: str, roots: list[str]) -> ObjectRow:
    row = _row(name, location)
    async with store.write() as tx:
        await object_rows.insert_object(tx, row)
        await root_rows.add_new(tx, "w", "table", row.uuid, roots)
    return row


async def _read(store: Store, read: Callable[[Any], Any]) -> Any:
    async with store.read() as tx:
        return await read(tx)


async def _namespace(store: Store, name: str) -> dict[str, str] | None:
    async with store.read() as tx:
        return await namespace_rows.get_namespace(tx, "w", name)


async def _directories(store: Store, name: str) -> list[str]:
    async with store.read() as tx:
        return await root_rows.held(tx, root_rows.NAMESPACE, root_rows.namespace_owner("w", name))


async def test_a_commit_is_one_message_and_moves_only_the_version_read(
    worker: tuple[Store, list[str]],
) -> None:
    store, sent = worker
    base = await _table(store, "t", f"{ROOT}/metadata/0.json", [ROOT])
    sent.clear()
    new = NewVersion(f"{ROOT}/metadata/1.json", b"\x00v1", [ROOT])
    assert await server_writes.swap_object(store, base, new, None) is Outcome.DONE
    assert sent == ["call"]  # no "begin", no statements, no "commit": one round trip
    landed = await _read(store, lambda tx: object_rows.get_object(tx, "w", "ns", "t"))
    assert (landed.metadata_location, landed.metadata, landed.version) == (
        new.metadata_location,
        b"\x00v1",
        2,
    )
    # The attack: a commit planned on the version before loses the race and writes nothing.
    stale = NewVersion(f"{ROOT}/metadata/1b.json", b"\x00v1b", [ROOT])
    assert await server_writes.swap_object(store, base, stale, None) is Outcome.LOST_RACE
    # A dropped and re-registered table at the same file has another data key: not the version read.
    assert await server_writes.swap_object(store, replace(landed, wrapped_key=b"other"), stale, None) is (
        Outcome.LOST_RACE
    )
    after = await _read(store, lambda tx: object_rows.get_object(tx, "w", "ns", "t"))
    assert (after.metadata_location, after.version) == (new.metadata_location, 2)


async def test_a_commit_gaining_a_root_goes_to_the_general_transaction_untouched(
    worker: tuple[Store, list[str]],
) -> None:
    store, _ = worker
    base = await _table(store, "t", f"{ROOT}/metadata/0.json", [ROOT])
    moved = NewVersion(f"{ROOT}/metadata/1.json", b"\x00v1", [ROOT, "s3://b/elsewhere"])
    assert await server_writes.swap_object(store, base, moved, None) is Outcome.GENERAL
    after = await _read(store, lambda tx: object_rows.get_object(tx, "w", "ns", "t"))
    assert after.metadata_location == base.metadata_location


async def test_a_namespace_creation_is_one_message_with_its_directory_and_record(
    worker: tuple[Store, list[str]],
) -> None:
    store, sent = worker
    new = NewNamespace("w", "ns\x1fa", "ns", {"owner": "x"}, "s3://b/ns/a")
    assert await server_writes.insert_namespace(store, new, _pending("k1")) is Outcome.DONE
    assert sent == ["call"]
    assert await _namespace(store, "ns\x1fa") == {"owner": "x"}
    assert await _directories(store, "ns\x1fa") == ["s3://b/ns/a"]
    record = await _read(store, lambda tx: idempotency_rows.get_idempotency(tx, "k1", 0.0))
    assert (record.operation, record.payload) == ("createNamespace", b"\x01body")
    # A taken name: GENERAL, and the general transaction words the refusal.
    assert await server_writes.insert_namespace(store, new, None) is Outcome.GENERAL


async def test_what_the_general_transaction_must_decide_is_left_unwritten(
    worker: tuple[Store, list[str]],
) -> None:
    """The attack on atomicity: a creation whose record key is taken, whose parent is missing, or
    whose directory lies inside a table's roots answers GENERAL with nothing of it written (no
    namespace without its directory or record)."""
    store, _ = worker
    await _table(store, "t", f"{ROOT}/metadata/0.json", [ROOT])
    assert (
        await server_writes.insert_namespace(
            store, NewNamespace("w", "first", None, {}, "s3://b/first"), _pending("taken")
        )
        is Outcome.DONE
    )
    refused = {
        "record taken": (NewNamespace("w", "second", None, {}, "s3://b/second"), _pending("taken")),
        "no parent": (NewNamespace("w", "gone\x1fchild", "gone", {}, "s3://b/gone/child"), None),
        "inside a table": (NewNamespace("w", "inside", None, {}, f"{ROOT}/inside"), None),
    }
    for reason, (new, pending) in refused.items():
        assert await server_writes.insert_namespace(store, new, pending) is Outcome.GENERAL, reason
        assert await _namespace(store, new.name) is None, reason
        assert await _directories(store, new.name) == [], reason


async def test_a_call_in_a_dead_workers_group_fails_as_unavailable_and_lands_nothing(
    writer: Writer, worker: tuple[Store, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call joining the group of a worker that dies after "commit" is rolled back with that
    group and told so (503, retryable), never answered DONE for a change that is not there."""
    store, _ = worker
    dead = asyncio.Event()
    create = writer_calls.PROCEDURES["create_namespace"]

    async def once_the_other_is_dead(tx: StoreTx, args: writer_calls.Arguments) -> Outcome:
        await dead.wait()  # the group's COMMIT comes after this member, and after the death
        return await create(tx, args)

    monkeypatch.setitem(writer_calls.PROCEDURES, "create_namespace", once_the_other_is_dead)
    _, dying = await open_transaction_inserting(writer, "orphan")
    new = NewNamespace("w", "bystander", None, {}, "s3://b/bystander")
    call = asyncio.create_task(server_writes.insert_namespace(store, new, None))
    await die_after_commit(writer, dying, dead)
    with pytest.raises(StorageUnavailableError, match="TransactionAbandoned"):
        await call
    for name in ("orphan", "bystander"):
        assert await _namespace(store, name) is None
    # The control: the same call afterwards lands.
    monkeypatch.setitem(writer_calls.PROCEDURES, "create_namespace", create)
    assert await server_writes.insert_namespace(store, new, None) is Outcome.DONE
