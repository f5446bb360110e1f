"""Persistent API key records: the `api_keys` table on SQLAlchemy 2 async (SQLite or PostgreSQL).

The table lives beside the catalog registry, possibly in the same database, and is created by the
registry's one migration history (`catalog/migrations`, revisions 0007 on: catalog.store.history).
The store has a small engine of its own (the registry runs on plain drivers, catalog.store.sql):
API keys are read on cache misses and by the change feed's poll, far from the registry's hot path.

Invariants:
- Only an Argon2id hash of a key's secret is stored; `ApiKeyRecord` (what callers list and show)
  never carries it. The hash travels only inside `StoredKey`, whose repr hides it.
- Timestamps are stored and returned in UTC.
- Database failures surface as `catalog.errors.StorageUnavailableError` (driver messages never
  reach clients); the gateway already maps that error to 503.
- Writes on SQLite run with the `cedarberg_write` execution option, so they start with
  `BEGIN IMMEDIATE` (the registry's convention), and wait on SQLite's busy timeout rather than fail
  when another process, such as `cedarberg keys create`, holds the write lock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    delete,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store.engine import PG_MIGRATION_LOCK, create_engine, run_migrations
from cedarberg.gateway.authn.key_record import ApiKeyRecord, record_from_row, utc

# Serialises writers of the change feed on PostgreSQL, so feed ids are assigned in commit order
# and a reader that has seen id N can never later find a smaller id committed (see KeyStore).
_PG_FEED_LOCK = 0x6B6579666565  # "keyfee"
# Longer than any gateway token lives (`tokens.ttl_seconds` ≤ 1 day, plus `leeway_seconds` ≤ 5
# min): a process starting up reads the token cut-offs of every key changed within it.
FEED_RETENTION = timedelta(days=1, hours=1)

metadata = MetaData()

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(16), primary_key=True),
    Column("principal", String(256), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("groups", JSON, nullable=False),
    Column("secret_hash", String(255), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
    Column("rotated_at", DateTime(timezone=True), nullable=True),
    Column("description", String(1024), nullable=False),
    # Bumped by every rotation and revocation: tokens of an older generation are refused.
    Column("generation", Integer, nullable=False, server_default=text("0")),
    # A rotation's overlap window: the previous secret's hash works until `previous_secret_until`.
    Column("previous_secret_hash", String(255), nullable=True),
    Column("previous_secret_until", DateTime(timezone=True), nullable=True),
    Index("ix_api_keys_principal", "principal"),
)

# The change feed: one row per revocation or rotation, read by every gateway process to evict
# its cached verifications of that key and to refuse its tokens of older generations
# (`ApiKeyAuthenticator.poll_changes`). Rows older than FEED_RETENTION are pruned by the writers.
api_key_changes = Table(
    "api_key_changes",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("key_id", String(16), nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
    Column("generation", Integer, nullable=False, server_default=text("0")),
    # Until when the secret (and tokens) of generation - 1 stay valid; None: they ended with it.
    Column("previous_until", DateTime(timezone=True), nullable=True),
    Index("ix_api_key_changes_changed_at", "changed_at"),
)


@dataclass(frozen=True, slots=True)
class StoredKey:
    """A record with its secret hash (and the previous secret's, during a rotation's overlap),
    for verification only."""

    record: ApiKeyRecord
    secret_hash: str = field(repr=False)
    previous_secret_hash: str | None = field(default=None, repr=False)


class KeyIdTakenError(Exception):
    """A new key's random id is in use already (practically never: ids carry 80 random bits)."""


@dataclass(frozen=True, slots=True)
class KeyChange:
    """One change feed entry: key `key_id` was rotated or revoked, giving it `generation`;
    `previous_until`: until when generation - 1 (the previous secret, its tokens) stays valid."""

    id: int
    key_id: str
    generation: int
    previous_until: datetime | None = None


_RECORD_COLUMNS = [c for c in api_keys.c if c.name not in {"secret_hash", "previous_secret_hash"}]


class KeyStore:
    """Reads and writes `api_keys`. Build with `open_key_store(url)` or around a shared engine."""

    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = False) -> None:
        self._engine = engine
        self._owns_engine = owns_engine
        self._is_sqlite = engine.dialect.name == "sqlite"

    async def migrate(self) -> None:
        """Bring the registry's schema, these tables included, to head (its one migration history,
        under the registry's migration lock). Raises StorageUnavailableError, SchemaHistoryError."""
        async with self._write() as conn:
            if not self._is_sqlite:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_MIGRATION_LOCK})
            await conn.run_sync(run_migrations)

    async def close(self) -> None:
        """Dispose of the engine if this store created it."""
        if self._owns_engine:
            await self._engine.dispose()

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        try:
            async with self._engine.connect() as plain:
                conn = await plain.execution_options(cedarberg_write=True) if self._is_sqlite else plain
                async with conn.begin():
                    yield conn
        except IntegrityError:
            raise
        except (SQLAlchemyError, OSError) as err:
            raise StorageUnavailableError(f"the key store is unavailable: {type(err).__name__}") from err

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        try:
            async with self._engine.connect() as conn:
                yield conn
        except (SQLAlchemyError, OSError) as err:
            raise StorageUnavailableError(f"the key store is unavailable: {type(err).__name__}") from err

    # For the other gateway tables on this engine (`gateway.authn.directory`): the same
    # transactions, SQLite write locking and error mapping as the key tables.
    writing = _write
    reading = _read

    async def insert(self, record: ApiKeyRecord, secret_hash: str) -> None:
        """Store a new key. Raises KeyIdTakenError, StorageUnavailableError."""
        try:
            async with self._write() as conn:
                await conn.execute(
                    insert(api_keys).values(
                        id=record.key_id,
                        principal=record.principal,
                        kind=record.kind.value,
                        groups=list(record.groups),
                        secret_hash=secret_hash,
                        created_at=record.created_at,
                        expires_at=record.expires_at,
                        revoked_at=None,
                        rotated_at=None,
                        description=record.description,
                    )
                )
        except IntegrityError:
            raise KeyIdTakenError(record.key_id) from None

    async def get(self, key_id: str) -> StoredKey | None:
        async with self._read() as conn:
            row = (await conn.execute(select(api_keys).where(api_keys.c.id == key_id))).first()
        return (
            None
            if row is None
            else StoredKey(record_from_row(row), row.secret_hash, row.previous_secret_hash)
        )

    async def list_records(
        self, *, principal: str | None, after: str | None, limit: int
    ) -> list[ApiKeyRecord]:
        """Records ordered by id, starting after `after` (keyset pagination)."""
        query = select(*_RECORD_COLUMNS)
        if principal is not None:
            query = query.where(api_keys.c.principal == principal)
        if after is not None:
            query = query.where(api_keys.c.id > after)
        async with self._read() as conn:
            rows = await conn.execute(query.order_by(api_keys.c.id).limit(limit))
            return [record_from_row(row) for row in rows]

    async def replace_secret(
        self, key_id: str, secret_hash: str, rotated_at: datetime, previous_until: datetime | None = None
    ) -> int | None:
        """Give an unrevoked key a new secret hash and the next generation; returns that
        generation, or None if the key is absent or revoked.

        With `previous_until` (after `rotated_at`) the secret being replaced keeps working until
        then (it becomes the previous secret, replacing any earlier one); without, it stops now
        and any previous secret with it."""
        overlap = previous_until is not None and previous_until > rotated_at
        async with self._write() as conn:
            result = await conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(
                    # The right-hand sides read the row as it was before this update.
                    previous_secret_hash=api_keys.c.secret_hash if overlap else None,
                    previous_secret_until=previous_until if overlap else None,
                    secret_hash=secret_hash,
                    rotated_at=rotated_at,
                    generation=api_keys.c.generation + 1,
                )
            )
            if result.rowcount != 1:
                return None
            return await self._publish_change(conn, key_id, rotated_at, previous_until if overlap else None)

    async def upgrade_hash(self, key_id: str, old_hash: str, new_hash: str) -> bool:
        """Replace a hash made with outdated parameters, unless the key was rotated meanwhile."""
        async with self._write() as conn:
            result = await conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.secret_hash == old_hash)
                .values(secret_hash=new_hash)
            )
            return result.rowcount == 1

    async def revoke(self, key_id: str, revoked_at: datetime) -> int | None:
        """Mark a key revoked and give it the next generation; returns that generation, or None
        if the key is absent or revoked already."""
        async with self._write() as conn:
            result = await conn.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(
                    revoked_at=revoked_at,
                    generation=api_keys.c.generation + 1,
                    previous_secret_hash=None,  # a revocation ends both secrets at once
                    previous_secret_until=None,
                )
            )
            if result.rowcount != 1:
                return None
            return await self._publish_change(conn, key_id, revoked_at)

    # -- change feed --------------------------------------------------------------------------
    async def _publish_change(
        self, conn: AsyncConnection, key_id: str, at: datetime, previous_until: datetime | None = None
    ) -> int:
        """Append the key's new generation to the change feed in the writer's transaction (so
        the feed and the row change together), prune entries past the retention, and return the
        generation."""
        if not self._is_sqlite:  # SQLite writers are serialised by BEGIN IMMEDIATE already
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_FEED_LOCK})
        generation = int(
            (await conn.execute(select(api_keys.c.generation).where(api_keys.c.id == key_id))).scalar_one()
        )
        await conn.execute(
            insert(api_key_changes).values(
                key_id=key_id, changed_at=at, generation=generation, previous_until=previous_until
            )
        )
        await conn.execute(delete(api_key_changes).where(api_key_changes.c.changed_at < at - FEED_RETENTION))
        return generation

    async def latest_change(self) -> int:
        """The id of the newest feed entry (0 if none): where a new reader starts."""
        async with self._read() as conn:
            value = (await conn.execute(select(func.max(api_key_changes.c.id)))).scalar()
        return int(value or 0)

    async def changes_after(self, cursor: int, limit: int = 1000) -> list[KeyChange]:
        """Feed entries with id > `cursor`, oldest first."""
        async with self._read() as conn:
            rows = await conn.execute(
                select(
                    api_key_changes.c.id,
                    api_key_changes.c.key_id,
                    api_key_changes.c.generation,
                    api_key_changes.c.previous_until,
                )
                .where(api_key_changes.c.id > cursor)
                .order_by(api_key_changes.c.id)
                .limit(limit)
            )
            return [
                KeyChange(int(row.id), str(row.key_id), int(row.generation), utc(row.previous_until))
                for row in rows
            ]


def connect_key_store(url: str) -> KeyStore:
    """A store on an engine of its own for `url` (SQLite or PostgreSQL), whose schema the caller
    made sure is current (`cedarberg serve` upgrades it before any worker starts). The store owns
    the engine: `close()` disposes of it. Two connections and two more under load: keys are
    read on verification-cache misses and by the change feed's poll."""
    return KeyStore(create_engine(url, 2, 2), owns_engine=True)


async def open_key_store(url: str) -> KeyStore:
    """`connect_key_store(url)` with migrations applied. Raises StorageUnavailableError."""
    store = connect_key_store(url)
    engine = store._engine
    try:
        await store.migrate()
    except BaseException:
        await engine.dispose()
        raise
    return store
