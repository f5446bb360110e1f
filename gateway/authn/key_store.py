"""Persistent API key records: the `api_keys` table, on the registry's drivers (SQLite or PostgreSQL).

The table lives beside the catalog registry, possibly in the same database, and is created by the
registry's one migration history (`catalog/migrations`, revisions 0007 on: catalog.store.history).
The store runs on a driver of its own, built by the registry's factory
(`catalog.store.connect.open_driver`): the same connection handling, durability settings (WAL with
synchronous=FULL; synchronous_commit on), busy handling and transactions as the registry, with a
few connections (API keys are read on cache misses and by the change feed's poll, far from the
registry's hot path). Statements are SQLAlchemy Core compiled once per dialect
(`catalog.store.statements`); SQLAlchemy engines are built only to migrate (`catalog.store.engine`).

Invariants:
- Only an Argon2id hash of a key's secret is stored; `ApiKeyRecord` (what callers list and show)
  never carries it. The hash travels only inside `StoredKey`, whose repr hides it.
- Timestamps are stored and returned in UTC.
- Database failures surface as `catalog.errors.StorageUnavailableError` (driver messages never
  reach clients); the gateway already maps that error to 503. A write whose COMMIT was not
  confirmed is StorageUnavailableError too (retrying a key write is safe: see each method).
- Writes on SQLite start with `BEGIN IMMEDIATE` (the registry's driver), and wait for the lock
  asynchronously, up to the registry's busy timeout, rather than fail when another process, such
  as `cedarberg keys create`, holds it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

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
    bindparam,
    delete,
    func,
    insert,
    select,
    text,
    update,
)

from cedarberg.catalog.errors import CommitStateUnknownError, StorageUnavailableError
from cedarberg.catalog.store.connect import open_driver
from cedarberg.catalog.store.driver import Connection, DatabaseError, Driver, IntegrityViolation
from cedarberg.catalog.store.engine import migrate_registry
from cedarberg.catalog.store.statements import Sql, values_of
from cedarberg.gateway.authn.key_record import ApiKeyRecord, record_from_row, utc

# Serialises writers of the change feed on PostgreSQL, so feed ids are assigned in commit order
# and a reader that has seen id N can never later find a smaller id committed (see KeyStore).
_PG_FEED_LOCK = 0x6B6579666565  # "keyfee"
# Longer than any gateway token lives (`tokens.ttl_seconds` ≤ 1 day, plus `leeway_seconds` ≤ 5
# min): a process starting up reads the token cut-offs of every key changed within it.
FEED_RETENTION = timedelta(days=1, hours=1)
# Connections of the store's own driver: on PostgreSQL at most this many (the settings' pool
# description counts them), on SQLite this many idle readers besides its one writer.
KEY_STORE_CONNECTIONS = 4
KEY_STORE_SQLITE_READERS = 2

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
_key = api_keys.c
_feed = api_key_changes.c
_LIMIT = bindparam("limit", type_=Integer)
_INSERT_KEY = Sql(
    insert(api_keys).values(
        values_of(
            api_keys,
            "id",
            "principal",
            "kind",
            "groups",
            "secret_hash",
            "created_at",
            "expires_at",
            "description",
        )
    )
)
_GET_KEY = Sql(select(api_keys).where(_key.id == bindparam("id")))
_GET_GENERATION = Sql(select(_key.generation).where(_key.id == bindparam("id")))
_UPGRADE_HASH = Sql(
    update(api_keys)
    .where(_key.id == bindparam("id"), _key.secret_hash == bindparam("old_hash"))
    .values(secret_hash=bindparam("new_hash"))
)
_REVOKE = Sql(
    update(api_keys)
    .where(_key.id == bindparam("id"), _key.revoked_at.is_(None))
    .values(
        revoked_at=bindparam("at"),
        generation=_key.generation + 1,
        previous_secret_hash=None,  # a revocation ends both secrets at once
        previous_secret_until=None,
    )
)
# On PostgreSQL only; the lock's key is a constant of the statement's text.
_LOCK_FEED = Sql(text(f"SELECT pg_advisory_xact_lock({_PG_FEED_LOCK})"))
_APPEND_CHANGE = Sql(
    insert(api_key_changes).values(
        values_of(api_key_changes, "key_id", "changed_at", "generation", "previous_until")
    )
)
_PRUNE_CHANGES = Sql(
    delete(api_key_changes).where(_feed.changed_at < bindparam("before", type_=_feed.changed_at.type))
)
_LATEST_CHANGE = Sql(select(func.max(_feed.id)))
_CHANGES_AFTER = Sql(
    select(_feed.id, _feed.key_id, _feed.generation, _feed.previous_until)
    .where(_feed.id > bindparam("cursor"))
    .order_by(_feed.id)
    .limit(_LIMIT)
)


@lru_cache(maxsize=2)
def _replace_secret(overlap: bool) -> Sql:
    """Rotation: with an overlap the secret being replaced becomes the previous one."""
    return Sql(
        update(api_keys)
        .where(_key.id == bindparam("id"), _key.revoked_at.is_(None))
        .values(
            # The right-hand sides read the row as it was before this update.
            previous_secret_hash=_key.secret_hash if overlap else None,
            previous_secret_until=bindparam("previous_until", type_=_key.previous_secret_until.type)
            if overlap
            else None,
            secret_hash=bindparam("secret_hash"),
            rotated_at=bindparam("at", type_=_key.rotated_at.type),
            generation=_key.generation + 1,
        )
    )


@lru_cache(maxsize=4)
def _list_keys(by_principal: bool, after: bool) -> Sql:
    query = select(*_RECORD_COLUMNS)
    if by_principal:
        query = query.where(_key.principal == bindparam("principal"))
    if after:
        query = query.where(_key.id > bindparam("after"))
    return Sql(query.order_by(_key.id).limit(_LIMIT))


class KeyStore:
    """Reads and writes `api_keys`. Build with `open_key_store(url)` / `connect_key_store(url)`,
    or around a driver (`catalog.store.connect.open_driver`) whose schema is current."""

    def __init__(self, driver: Driver, *, url: str | None = None) -> None:
        self._driver = driver
        self._url = url
        self._is_sqlite = driver.dialect.name == "sqlite"

    async def migrate(self) -> None:
        """Bring the registry's schema, these tables included, to head (its one migration history,
        under the registry's migration lock; a store built from a URL only). Raises
        StorageUnavailableError, SchemaHistoryError."""
        if self._url is None:
            raise StorageUnavailableError("the key store was built without a URL to migrate")
        await migrate_gateway(self._url)

    async def close(self) -> None:
        """Close the driver's connections (a commit under way finishes first)."""
        await self._driver.close()

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[Connection]:
        """A write transaction on the store's driver: committed on normal exit, rolled back if
        the body raises. A refused constraint (`catalog.store.driver.IntegrityViolation`) is
        raised as is; every other database failure is StorageUnavailableError. For the gateway's
        other tables in this database too (`directory`, `console_sessions`)."""
        try:
            async with self._driver.write() as conn:
                yield conn
        except (DatabaseError, CommitStateUnknownError, OSError) as err:
            raise StorageUnavailableError(f"the key store is unavailable: {type(err).__name__}") from err

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Connection]:
        """Reads in autocommit: each statement sees the latest committed state. Raises
        StorageUnavailableError."""
        try:
            async with self._driver.read() as conn:
                yield conn
        except (DatabaseError, OSError) as err:
            raise StorageUnavailableError(f"the key store is unavailable: {type(err).__name__}") from err

    async def insert(self, record: ApiKeyRecord, secret_hash: str) -> None:
        """Store a new key. Raises KeyIdTakenError, StorageUnavailableError."""
        try:
            async with self.writing() as conn:
                await conn.execute(
                    _INSERT_KEY,
                    {
                        "id": record.key_id,
                        "principal": record.principal,
                        "kind": record.kind.value,
                        "groups": list(record.groups),
                        "secret_hash": secret_hash,
                        "created_at": record.created_at,
                        "expires_at": record.expires_at,
                        "description": record.description,
                    },
                )
        except IntegrityViolation:
            raise KeyIdTakenError(record.key_id) from None

    async def get(self, key_id: str) -> StoredKey | None:
        async with self.reading() as conn:
            row = (await conn.execute(_GET_KEY, {"id": key_id})).first()
        return (
            None
            if row is None
            else StoredKey(record_from_row(row), row.secret_hash, row.previous_secret_hash)
        )

    async def list_records(
        self, *, principal: str | None, after: str | None, limit: int
    ) -> list[ApiKeyRecord]:
        """Records ordered by id, starting after `after` (keyset pagination)."""
        query = _list_keys(principal is not None, after is not None)
        async with self.reading() as conn:
            rows = await conn.execute(query, {"principal": principal, "after": after, "limit": limit})
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
        async with self.writing() as conn:
            result = await conn.execute(
                _replace_secret(overlap),
                {
                    "id": key_id,
                    "secret_hash": secret_hash,
                    "at": rotated_at,
                    "previous_until": previous_until,
                },
            )
            if result.rowcount != 1:
                return None
            return await self._publish_change(conn, key_id, rotated_at, previous_until if overlap else None)

    async def upgrade_hash(self, key_id: str, old_hash: str, new_hash: str) -> bool:
        """Replace a hash made with outdated parameters, unless the key was rotated meanwhile."""
        async with self.writing() as conn:
            result = await conn.execute(
                _UPGRADE_HASH, {"id": key_id, "old_hash": old_hash, "new_hash": new_hash}
            )
            return result.rowcount == 1

    async def revoke(self, key_id: str, revoked_at: datetime) -> int | None:
        """Mark a key revoked and give it the next generation; returns that generation, or None
        if the key is absent or revoked already."""
        async with self.writing() as conn:
            result = await conn.execute(_REVOKE, {"id": key_id, "at": revoked_at})
            if result.rowcount != 1:
                return None
            return await self._publish_change(conn, key_id, revoked_at)

    # -- change feed --------------------------------------------------------------------------
    async def _publish_change(
        self, conn: Connection, key_id: str, at: datetime, previous_until: datetime | None = None
    ) -> int:
        """Append the key's new generation to the change feed in the writer's transaction (so
        the feed and the row change together), prune entries past the retention, and return the
        generation."""
        if not self._is_sqlite:  # SQLite writers are serialised by BEGIN IMMEDIATE already
            await conn.execute(_LOCK_FEED)
        generation = int((await conn.execute(_GET_GENERATION, {"id": key_id})).scalar_one())
        await conn.execute(
            _APPEND_CHANGE,
            {"key_id": key_id, "changed_at": at, "generation": generation, "previous_until": previous_until},
        )
        await conn.execute(_PRUNE_CHANGES, {"before": at - FEED_RETENTION})
        return generation

    async def latest_change(self) -> int:
        """The id of the newest feed entry (0 if none): where a new reader starts."""
        async with self.reading() as conn:
            value = (await conn.execute(_LATEST_CHANGE)).scalar()
        return int(value or 0)

    async def changes_after(self, cursor: int, limit: int = 1000) -> list[KeyChange]:
        """Feed entries with id > `cursor`, oldest first."""
        async with self.reading() as conn:
            rows = await conn.execute(_CHANGES_AFTER, {"cursor": cursor, "limit": limit})
        return [
            KeyChange(int(row.id), str(row.key_id), int(row.generation), utc(row.previous_until))
            for row in rows
        ]


async def migrate_gateway(url: str) -> None:
    """Upgrade the registry's schema at `url`, the gateway's tables included, to head: its one
    migration history, under the registry's migration lock. Raises StorageUnavailableError,
    SchemaHistoryError."""
    await migrate_registry(url)


def connect_key_store(url: str) -> KeyStore:
    """A store on a driver of its own for `url` (SQLite or PostgreSQL, catalog.store.urls),
    whose schema the caller made sure is current (`cedarberg serve` upgrades it before any
    worker starts). Connects lazily; `close()` closes the driver. Raises
    StorageUnavailableError for an unsupported URL."""
    return KeyStore(open_driver(url, KEY_STORE_CONNECTIONS, sqlite_readers=KEY_STORE_SQLITE_READERS), url=url)


async def open_key_store(url: str) -> KeyStore:
    """`connect_key_store(url)` with migrations applied. Raises StorageUnavailableError."""
    await migrate_gateway(url)
    return connect_key_store(url)
