"""Purge failures per object: the backoff arithmetic, the safe messages, the due query and the
claim that makes one sweeper (of any instance) attempt an object at a time.

The store tests run on SQLite and PostgreSQL (`store_url`); migration 0005 runs on SQLite as the
store opens, on PostgreSQL in the migrated template each test's database is cloned from.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy import create_engine, text

from cedarberg.catalog.context import CatalogContext, Limits, Warehouse
from cedarberg.catalog.dropped import list_dropped, purge_due
from cedarberg.catalog.errors import KeyServiceUnavailableError
from cedarberg.catalog.idempotency import Idempotency
from cedarberg.catalog.pagination import PageRequest
from cedarberg.catalog.purge_failures import MAX_ERROR_CHARS, PurgeBackoff, describe_failure
from cedarberg.catalog.sealing import Sealer
from cedarberg.catalog.store import dropped as dropped_rows
from cedarberg.catalog.store.connect import open_store
from cedarberg.catalog.store.dropped import DroppedRow
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.settings import KmsSettings
from tests.support.migrations import upgrade

WAREHOUSE = "w"


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- backoff -----------------------------------------------------------------------------------


def test_backoff_doubles_from_the_initial_delay_up_to_the_bound() -> None:
    backoff = PurgeBackoff(initial_seconds=60, max_seconds=3600)
    assert [backoff.delay_ms(n) for n in range(1, 8)] == [
        60_000,
        120_000,
        240_000,
        480_000,
        960_000,
        1_920_000,
        3_600_000,
    ]
    assert backoff.delay_ms(10_000) == 3_600_000  # however many attempts a row recorded
    assert backoff.delay_ms(0) == backoff.delay_ms(1) == 60_000


def test_backoff_refuses_bounds_out_of_order() -> None:
    with pytest.raises(ValueError, match="initial_seconds <= max_seconds"):
        PurgeBackoff(initial_seconds=10, max_seconds=5)
    with pytest.raises(ValueError, match="0 < initial_seconds"):
        PurgeBackoff(initial_seconds=0, max_seconds=5)


# -- messages ----------------------------------------------------------------------------------


def test_failure_messages_name_the_failure_without_quoting_what_it_carried() -> None:
    assert describe_failure(KeyServiceUnavailableError("the KMS did not answer")) == (
        "KeyServiceUnavailableError: the KMS did not answer"
    )
    denied = PermissionError(13, "Permission denied", "/srv/other-tenant/secret.parquet")
    assert describe_failure(denied) == "PermissionError: Permission denied"
    parser = SystemError("Negative size passed to PyBytes_FromStringAndSize: b'\\x00secret'")
    message = describe_failure(parser)
    assert message.startswith("SystemError while reading or deleting")
    assert "secret" not in message
    long_and_raw = KeyServiceUnavailableError("refused\n\x1b[31m" + "x" * 1000)
    message = describe_failure(long_and_raw)
    assert len(message) == MAX_ERROR_CHARS
    assert message.isprintable()


# -- store -------------------------------------------------------------------------------------


@pytest.fixture
async def store(store_url: str | None, tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(store_url or f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}")
    yield opened
    await opened.close()


def _dropped(
    name: str, purge_after_ms: int, *, warehouse: str = WAREHOUSE, next_attempt_ms: int | None = None
) -> DroppedRow:
    row = ObjectRow(
        warehouse=warehouse,
        namespace="ns",
        name=name,
        kind="table",
        uuid=str(uuid.uuid4()),
        metadata_location=f"file:///w/ns/{name}/metadata/00000.metadata.json",
        metadata=b"sealed",
        version=0,
        kek_uri="local://default",
        kek_version="1",
        wrapped_key=b"wrapped",
    )
    return DroppedRow(
        drop_id=str(uuid.uuid4()),
        row=row,
        moved_files=[],
        dropped_at_ms=0,
        purge_after_ms=purge_after_ms,
        next_purge_attempt_ms=next_attempt_ms,
    )


async def _insert(store: Store, *rows: DroppedRow) -> None:
    async with store.write() as tx:
        for row in rows:
            await dropped_rows.insert_dropped(tx, row)


async def _due(
    store: Store, now_ms: int, limit: int = 10, warehouses: tuple[str, ...] = (WAREHOUSE,)
) -> list[str]:
    async with store.read() as tx:
        return [found.row.name for found in await dropped_rows.due_for_purge(tx, now_ms, warehouses, limit)]


async def test_due_objects_come_by_next_attempt_and_a_waiting_one_is_skipped(store: Store) -> None:
    await _insert(
        store,
        _dropped("first", 1_000),
        _dropped("backing-off", 500, next_attempt_ms=3_000),  # failed before; waits until 3000
        _dropped("second", 2_000),
        _dropped("retained", 5_000),  # its retention has not passed
        _dropped("retention-holds", 9_000, next_attempt_ms=100),  # no recorded value cuts it short
        _dropped("unserved", 100, warehouse="gone"),  # a warehouse this gateway does not serve
    )
    assert await _due(store, 2_500) == ["first", "second"]
    assert await _due(store, 3_500) == ["first", "second", "backing-off"]
    assert await _due(store, 3_500, limit=2) == ["first", "second"]
    assert await _due(store, 3_500, warehouses=(WAREHOUSE, "gone")) == [
        "unserved",
        "first",
        "second",
        "backing-off",
    ]
    assert await _due(store, 3_500, warehouses=()) == []


async def test_a_claimed_object_waits_its_backoff_and_others_come_first(store: Store) -> None:
    poisoned, healthy = _dropped("poisoned", 1_000), _dropped("healthy", 2_000)
    await _insert(store, poisoned, healthy)
    async with store.write() as tx:
        assert await dropped_rows.claim_purge(tx, poisoned, next_attempt_ms=60_000)
    async with store.write() as tx:  # a second sweeper read the row before the claim: it loses
        assert not await dropped_rows.claim_purge(tx, poisoned, next_attempt_ms=60_000)
    assert await _due(store, 10_000) == ["healthy"]
    async with store.write() as tx:
        assert await dropped_rows.record_purge_failure(tx, poisoned.drop_id, 1, "SystemError: ...", 70_000)
        assert not await dropped_rows.record_purge_failure(tx, poisoned.drop_id, 0, "stale attempt", 1)
    async with store.read() as tx:
        recorded = await dropped_rows.get_dropped(tx, poisoned.drop_id)
    assert recorded is not None
    assert (recorded.purge_attempts, recorded.last_purge_error, recorded.next_attempt_ms) == (
        1,
        "SystemError: ...",
        70_000,
    )
    assert await _due(store, 69_999) == ["healthy"]
    assert await _due(store, 70_000) == ["healthy", "poisoned"]
    async with store.write() as tx:
        assert await dropped_rows.claim_purge(tx, recorded, next_attempt_ms=200_000)
        assert await dropped_rows.delete_dropped(tx, poisoned.drop_id)
    async with store.write() as tx:  # purged (or undropped): nothing left to claim
        assert not await dropped_rows.claim_purge(tx, recorded, next_attempt_ms=1)


# -- migration ---------------------------------------------------------------------------------


def test_migration_starts_existing_drops_with_no_attempts_at_their_purge_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0004")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO dropped_objects (drop_id, warehouse, namespace, name, kind, uuid, "
                "metadata_location, metadata, version, kek_uri, kek_version, wrapped_key, moved_files, "
                "dropped_at_ms, purge_after_ms) VALUES ('d1', 'w', 'ns', 't', 'table', "
                "'5f2c1f4e-2a43-4a0e-9d84-1f4d1f6f1a11', 'file:///w/ns/t/m.json', x'00', 0, 'local://k', "
                "'1', x'00', '[]', 10, 1234)"
            )
        )
    engine.dispose()
    upgrade(url, "0005")
    engine = create_engine(url)
    with engine.connect() as connection:
        row = connection.execute(
            text("SELECT purge_attempts, last_purge_error, next_purge_attempt_ms FROM dropped_objects")
        ).one()
        indexes = {r[1] for r in connection.execute(text("PRAGMA index_list(dropped_objects)"))}
    engine.dispose()
    assert tuple(row) == (0, None, 1234)
    assert "ix_dropped_next_attempt" in indexes
    assert "ix_dropped_purge" not in indexes


# -- the sweep ---------------------------------------------------------------------------------


@pytest.fixture
async def ctx(store: Store, tmp_path: Path) -> AsyncIterator[CatalogContext]:
    """A catalog on `store` with the local KEK and one sealing warehouse, `w`."""
    keyring = KeyRing.open(KmsSettings(), tmp_path / "kms")
    sealer = Sealer(keyring)
    yield CatalogContext(
        store=store,
        sealer=sealer,
        warehouses={WAREHOUSE: Warehouse(WAREHOUSE, (tmp_path / "warehouse").as_uri(), True, 0)},
        default_warehouse=WAREHOUSE,
        idempotency=Idempotency(store, sealer, 1800),
        limits=Limits(),
    )
    await keyring.aclose()


async def test_a_sweep_records_each_failure_and_does_not_retry_before_the_backoff(
    ctx: CatalogContext,
) -> None:
    # Rows whose wrapped data key the KMS refuses: every purge attempt of them fails.
    broken = [_dropped(f"broken{i}", purge_after_ms=0) for i in range(3)]
    await _insert(ctx.store, *broken)
    backoff = PurgeBackoff(initial_seconds=3600, max_seconds=7200)
    assert await purge_due(ctx, backoff, limit=2) == 0
    assert await purge_due(ctx, backoff, limit=2) == 0  # the third, then nothing due: all wait
    assert await purge_due(ctx, backoff, limit=2) == 0
    async with ctx.store.read() as tx:
        recorded = [await dropped_rows.get_dropped(tx, row.drop_id) for row in broken]
    for row in recorded:
        assert row is not None
        assert row.purge_attempts == 1  # once each, although the sweep ran three times
        assert row.last_purge_error is not None
        assert row.last_purge_error.startswith("KeyServiceUnavailableError: ")
        assert 3_500_000 <= row.next_attempt_ms - _now_ms() <= 3_600_000
    listing = orjson.loads(await list_dropped(ctx, WAREHOUSE, PageRequest.parse(None, "10", 10, 10)))
    assert {item["purge-attempts"] for item in listing["dropped"]} == {1}
    assert all(item["last-purge-error"] for item in listing["dropped"])
