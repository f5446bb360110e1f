"""The registry on SQLAlchemy 2 async: SQLite (embedded default) or PostgreSQL (scale-out).

Invariants:
- A table or view pointer changes only through `swap_object`, an `UPDATE ... WHERE
  metadata_location = :expected` whose row count tells whether the swap won (compare-and-swap).
- Writes on SQLite are serialised in-process and start with `BEGIN IMMEDIATE`, so concurrent
  writers wait for the lock instead of failing half-way with "database is locked".
- Every database error that is not a known constraint violation becomes StorageUnavailableError;
  driver messages never reach clients.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Hashable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
from sqlalchemy import Connection, and_, delete, event, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from cedarberg.catalog.errors import (
    AlreadyExistsError,
    CommitStateUnknownError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    StorageUnavailableError,
)
from cedarberg.catalog.store.cache import RegistryCache, Touched, note_uncached_read
from cedarberg.catalog.store.schema import (
    catalog_objects,
    dropped_objects,
    idempotency_records,
    metrics_reports,
    namespaces,
    registry_keys,
)
from cedarberg.kms.keys import WrappedKey

T = TypeVar("T")
log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
_PG_MIGRATION_LOCK = 0x6365646172  # "cedar": serialises migrations of several starting gateways


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class ObjectRow:
    """One table or view pointer as stored: `metadata` is sealed, the data key wrapped."""

    warehouse: str
    namespace: str
    name: str
    kind: str
    uuid: str
    metadata_location: str
    metadata: bytes
    version: int
    kek_uri: str
    kek_version: str
    wrapped_key: bytes

    @property
    def data_key(self) -> WrappedKey:
        return WrappedKey(self.kek_uri, self.kek_version, self.wrapped_key)


@dataclass(frozen=True, slots=True)
class DroppedRow:
    """A soft-deleted object: its last pointer, where its metadata files were moved, and its
    purge attempts so far (`next_purge_attempt_ms` None: at `purge_after_ms`)."""

    drop_id: str
    row: ObjectRow
    moved_files: list[tuple[str, str]]  # (published location, parked location)
    dropped_at_ms: int
    purge_after_ms: int
    purge_attempts: int = 0
    last_purge_error: str | None = None
    next_purge_attempt_ms: int | None = None

    @property
    def next_attempt_ms(self) -> int:
        """When the next purge attempt may start."""
        return self.purge_after_ms if self.next_purge_attempt_ms is None else self.next_purge_attempt_ms


@dataclass(frozen=True, slots=True)
class KeyRef:
    """A wrapped data key and the row that holds it (for KEK rotation)."""

    table: str  # catalog_objects | dropped_objects | registry_keys
    row_id: str  # object UUID, drop id or registry key name
    warehouse: str
    kind: str
    uuid: str
    wrapped: WrappedKey


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    operation: str
    request_hash: str | None  # None only for records written before revision 0006
    outcome: str
    payload: bytes | None
    created_at: float


_OBJECT_FIELDS = tuple(ObjectRow.__dataclass_fields__)
_OBJECT_COLUMNS = [catalog_objects.c[name] for name in _OBJECT_FIELDS]
_DROPPED_COLUMNS = [dropped_objects.c[name] for name in _OBJECT_FIELDS]
_KEY_TABLES = {
    "catalog_objects": (catalog_objects, catalog_objects.c.uuid),
    "dropped_objects": (dropped_objects, dropped_objects.c.drop_id),
    "registry_keys": (registry_keys, registry_keys.c.name),
}


def _dropped(row: Any) -> DroppedRow:
    values = row._asdict()
    return DroppedRow(
        drop_id=values["drop_id"],
        row=ObjectRow(**{name: values[name] for name in _OBJECT_FIELDS}),
        moved_files=[(str(a), str(b)) for a, b in orjson.loads(values["moved_files"])],
        dropped_at_ms=values["dropped_at_ms"],
        purge_after_ms=values["purge_after_ms"],
        purge_attempts=values["purge_attempts"],
        last_purge_error=values["last_purge_error"],
        next_purge_attempt_ms=values["next_purge_attempt_ms"],
    )


class DuplicateKeyError(Exception):
    """An idempotency key was recorded by a concurrent request first."""


def _is_foreign_key_violation(err: IntegrityError) -> bool:
    message = str(err.orig).lower()
    return "foreign key" in message or "fk_" in message


class StoreTx:
    """Operations inside one database transaction."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn
        self.touched = Touched()  # what this transaction changed, for the read cache

    @property
    def connection(self) -> AsyncConnection:
        """The transaction's connection, for the store modules beside this one (catalog.store.plans)."""
        return self._conn

    # -- namespaces -------------------------------------------------------------------------
    async def get_namespace(
        self, warehouse: str, name: str, for_update: bool = False
    ) -> dict[str, str] | None:
        query = select(namespaces.c.properties).where(
            namespaces.c.warehouse == warehouse, namespaces.c.name == name
        )
        row = (await self._conn.execute(query.with_for_update() if for_update else query)).first()
        return None if row is None else dict(orjson.loads(row.properties))

    async def namespace_properties(self, warehouse: str, names: list[str]) -> dict[str, dict[str, str]]:
        """Properties of the named namespaces that exist (one query, for a namespace chain)."""
        if not names:
            return {}
        rows = await self._conn.execute(
            select(namespaces.c.name, namespaces.c.properties).where(
                namespaces.c.warehouse == warehouse, namespaces.c.name.in_(names)
            )
        )
        return {row.name: dict(orjson.loads(row.properties)) for row in rows}

    async def list_namespaces(
        self, warehouse: str, parent: str | None, after: str | None, limit: int
    ) -> list[str]:
        query = select(namespaces.c.name).where(namespaces.c.warehouse == warehouse)
        query = query.where(
            namespaces.c.parent.is_(None) if parent is None else namespaces.c.parent == parent
        )
        if after is not None:
            query = query.where(namespaces.c.name > after)
        rows = await self._conn.execute(query.order_by(namespaces.c.name).limit(limit))
        return [row.name for row in rows]

    async def insert_namespace(
        self, warehouse: str, name: str, parent: str | None, properties: dict[str, str]
    ) -> None:
        self.touched.namespaces.add((warehouse, name))
        try:
            await self._conn.execute(
                insert(namespaces).values(
                    warehouse=warehouse,
                    name=name,
                    parent=parent,
                    properties=orjson.dumps(properties).decode(),
                    created_at_ms=_now_ms(),
                )
            )
        except IntegrityError as err:
            if _is_foreign_key_violation(err):
                raise NoSuchNamespaceError("parent namespace does not exist") from None
            raise AlreadyExistsError("namespace already exists") from None

    async def set_namespace_properties(self, warehouse: str, name: str, properties: dict[str, str]) -> None:
        self.touched.namespaces.add((warehouse, name))
        await self._conn.execute(
            update(namespaces)
            .where(namespaces.c.warehouse == warehouse, namespaces.c.name == name)
            .values(properties=orjson.dumps(properties).decode())
        )

    async def delete_namespace(self, warehouse: str, name: str) -> bool:
        """Delete an empty namespace; False if absent. Raises NamespaceNotEmptyError."""
        self.touched.namespaces.add((warehouse, name))
        children = await self._conn.execute(
            select(func.count())
            .select_from(namespaces)
            .where(namespaces.c.warehouse == warehouse, namespaces.c.parent == name)
        )
        objects = await self._conn.execute(
            select(func.count())
            .select_from(catalog_objects)
            .where(catalog_objects.c.warehouse == warehouse, catalog_objects.c.namespace == name)
        )
        if children.scalar_one() or objects.scalar_one():
            raise NamespaceNotEmptyError("namespace is not empty")
        try:
            result = await self._conn.execute(
                delete(namespaces).where(namespaces.c.warehouse == warehouse, namespaces.c.name == name)
            )
        except IntegrityError:
            raise NamespaceNotEmptyError("namespace is not empty") from None
        return bool(result.rowcount)

    # -- tables and views -------------------------------------------------------------------
    async def get_object(self, warehouse: str, namespace: str, name: str) -> ObjectRow | None:
        row = (
            await self._conn.execute(
                select(*_OBJECT_COLUMNS).where(
                    catalog_objects.c.warehouse == warehouse,
                    catalog_objects.c.namespace == namespace,
                    catalog_objects.c.name == name,
                )
            )
        ).first()
        return None if row is None else ObjectRow(**row._asdict())

    async def list_objects(
        self, warehouse: str, namespace: str, kind: str, after: str | None, limit: int
    ) -> list[str]:
        query = select(catalog_objects.c.name).where(
            catalog_objects.c.warehouse == warehouse,
            catalog_objects.c.namespace == namespace,
            catalog_objects.c.kind == kind,
        )
        if after is not None:
            query = query.where(catalog_objects.c.name > after)
        rows = await self._conn.execute(query.order_by(catalog_objects.c.name).limit(limit))
        return [row.name for row in rows]

    async def object_locations(self, warehouse: str) -> list[tuple[str, str, str]]:
        """(namespace, name, metadata_location) of every object in a warehouse."""
        rows = await self._conn.execute(
            select(
                catalog_objects.c.namespace, catalog_objects.c.name, catalog_objects.c.metadata_location
            ).where(catalog_objects.c.warehouse == warehouse)
        )
        return [(row.namespace, row.name, row.metadata_location) for row in rows]

    async def insert_object(self, row: ObjectRow) -> None:
        """Insert a new pointer. Raises AlreadyExistsError or NoSuchNamespaceError."""
        self.touched.objects.add((row.warehouse, row.namespace, row.name))
        try:
            await self._conn.execute(insert(catalog_objects).values(**asdict(row), updated_at_ms=_now_ms()))
        except IntegrityError as err:
            if _is_foreign_key_violation(err):
                raise NoSuchNamespaceError("namespace does not exist") from None
            if "uuid" in str(err.orig).lower():
                # Two pointers to one table's metadata would let their histories diverge.
                raise AlreadyExistsError(
                    f"a table or view with UUID {row.uuid} is registered already"
                ) from None
            raise AlreadyExistsError("a table or view with this name already exists") from None

    async def swap_object(self, base: ObjectRow, new_location: str, new_metadata: bytes) -> bool:
        """Compare-and-swap the pointer `base` was read from; True if it still named
        `base.metadata_location` and now moved."""
        warehouse, namespace, name = base.warehouse, base.namespace, base.name
        self.touched.objects.add((warehouse, namespace, name))
        result = await self._conn.execute(
            update(catalog_objects)
            .where(
                catalog_objects.c.warehouse == warehouse,
                catalog_objects.c.namespace == namespace,
                catalog_objects.c.name == name,
                catalog_objects.c.metadata_location == base.metadata_location,
            )
            .values(
                metadata_location=new_location,
                metadata=new_metadata,
                version=catalog_objects.c.version + 1,
                updated_at_ms=_now_ms(),
            )
        )
        return result.rowcount == 1

    async def delete_object(
        self, warehouse: str, namespace: str, name: str, kind: str, expected_location: str | None = None
    ) -> bool:
        """Delete a pointer (only if it still names `expected_location`, when given)."""
        self.touched.objects.add((warehouse, namespace, name))
        query = delete(catalog_objects).where(
            catalog_objects.c.warehouse == warehouse,
            catalog_objects.c.namespace == namespace,
            catalog_objects.c.name == name,
            catalog_objects.c.kind == kind,
        )
        if expected_location is not None:
            query = query.where(catalog_objects.c.metadata_location == expected_location)
        result = await self._conn.execute(query)
        return result.rowcount == 1

    async def rename_object(
        self, warehouse: str, kind: str, source: tuple[str, str], target: tuple[str, str]
    ) -> bool:
        """Move a pointer to a new (namespace, name); False if the source is absent.

        Raises AlreadyExistsError if the target name is taken, NoSuchNamespaceError if the target
        namespace is missing.
        """
        self.touched.objects.update({(warehouse, source[0], source[1]), (warehouse, target[0], target[1])})
        try:
            result = await self._conn.execute(
                update(catalog_objects)
                .where(
                    and_(
                        catalog_objects.c.warehouse == warehouse,
                        catalog_objects.c.namespace == source[0],
                        catalog_objects.c.name == source[1],
                        catalog_objects.c.kind == kind,
                    )
                )
                .values(namespace=target[0], name=target[1], updated_at_ms=_now_ms())
            )
        except IntegrityError as err:
            if _is_foreign_key_violation(err):
                raise NoSuchNamespaceError("target namespace does not exist") from None
            raise AlreadyExistsError("a table or view with the target name already exists") from None
        return result.rowcount == 1

    # -- idempotency ------------------------------------------------------------------------
    async def get_idempotency(self, key: str, not_before: float) -> IdempotencyRecord | None:
        row = (
            await self._conn.execute(
                select(idempotency_records).where(
                    idempotency_records.c.key == key, idempotency_records.c.created_at >= not_before
                )
            )
        ).first()
        if row is None:
            return None
        return IdempotencyRecord(row.operation, row.request_hash, row.outcome, row.payload, row.created_at)

    async def put_idempotency(self, key: str, record: IdempotencyRecord, expired_before: float) -> None:
        """Record a final outcome under `key`, replacing a record created before `expired_before`.
        Raises DuplicateKeyError when a live record has the key."""
        await self._conn.execute(
            delete(idempotency_records).where(
                idempotency_records.c.key == key, idempotency_records.c.created_at < expired_before
            )
        )
        try:
            await self._conn.execute(
                insert(idempotency_records).values(
                    key=key,
                    operation=record.operation,
                    request_hash=record.request_hash,
                    outcome=record.outcome,
                    payload=record.payload,
                    created_at=record.created_at,
                )
            )
        except IntegrityError:
            raise DuplicateKeyError(key) from None

    async def purge_idempotency(self, before: float) -> int:
        result = await self._conn.execute(
            delete(idempotency_records).where(idempotency_records.c.created_at < before)
        )
        return int(result.rowcount)

    # -- metrics ----------------------------------------------------------------------------
    async def insert_metrics_report(
        self, warehouse: str, namespace: str, name: str, report_type: str, report: bytes
    ) -> None:
        await self._conn.execute(
            insert(metrics_reports).values(
                warehouse=warehouse,
                namespace=namespace,
                name=name,
                report_type=report_type,
                report=report,
                received_at_ms=_now_ms(),
            )
        )

    async def count_metrics_reports(self, warehouse: str, namespace: str, name: str) -> int:
        result = await self._conn.execute(
            select(func.count())
            .select_from(metrics_reports)
            .where(
                metrics_reports.c.warehouse == warehouse,
                metrics_reports.c.namespace == namespace,
                metrics_reports.c.name == name,
            )
        )
        return int(result.scalar_one())

    async def delete_metrics_reports(self, warehouse: str, namespace: str, name: str) -> None:
        await self._conn.execute(
            delete(metrics_reports).where(
                metrics_reports.c.warehouse == warehouse,
                metrics_reports.c.namespace == namespace,
                metrics_reports.c.name == name,
            )
        )

    async def delete_metrics_reports_before(self, before_ms: int, limit: int) -> int:
        """Delete up to `limit` reports received before `before_ms` (oldest first, by the
        `ix_metrics_received` index); returns how many."""
        oldest = (
            select(metrics_reports.c.id)
            .where(metrics_reports.c.received_at_ms < before_ms)
            .order_by(metrics_reports.c.received_at_ms)
            .limit(limit)
        )
        result = await self._conn.execute(
            delete(metrics_reports).where(metrics_reports.c.id.in_(oldest.scalar_subquery()))
        )
        return int(result.rowcount)

    # -- soft-deleted objects ---------------------------------------------------------------
    async def insert_dropped(self, dropped: DroppedRow) -> None:
        await self._conn.execute(
            insert(dropped_objects).values(
                **asdict(dropped.row),
                drop_id=dropped.drop_id,
                moved_files=orjson.dumps(dropped.moved_files).decode(),
                dropped_at_ms=dropped.dropped_at_ms,
                purge_after_ms=dropped.purge_after_ms,
                purge_attempts=dropped.purge_attempts,
                last_purge_error=dropped.last_purge_error,
                next_purge_attempt_ms=dropped.next_attempt_ms,
            )
        )

    async def get_dropped(self, drop_id: str) -> DroppedRow | None:
        row = (
            await self._conn.execute(select(dropped_objects).where(dropped_objects.c.drop_id == drop_id))
        ).first()
        return None if row is None else _dropped(row)

    async def list_dropped(self, warehouse: str, after: str | None, limit: int) -> list[DroppedRow]:
        """Soft-deleted objects of a warehouse in drop-id order (keyset pagination)."""
        query = select(dropped_objects).where(dropped_objects.c.warehouse == warehouse)
        if after is not None:
            query = query.where(dropped_objects.c.drop_id > after)
        rows = await self._conn.execute(query.order_by(dropped_objects.c.drop_id).limit(limit))
        return [_dropped(row) for row in rows]

    async def due_for_purge(self, now_ms: int, warehouses: Collection[str], limit: int) -> list[DroppedRow]:
        """At most `limit` soft-deleted objects of these warehouses whose next purge attempt is
        due, earliest first (index-backed). An object waiting out a backoff is not among them, so
        objects that keep failing cannot fill the batch; nor are objects of warehouses this
        gateway does not serve."""
        if not warehouses:
            return []
        rows = await self._conn.execute(
            select(dropped_objects)
            .where(
                dropped_objects.c.next_purge_attempt_ms <= now_ms,
                dropped_objects.c.purge_after_ms <= now_ms,  # the retention holds whatever was recorded
                dropped_objects.c.warehouse.in_(sorted(warehouses)),
            )
            .order_by(dropped_objects.c.next_purge_attempt_ms, dropped_objects.c.drop_id)
            .limit(limit)
        )
        return [_dropped(row) for row in rows]

    async def claim_purge(self, dropped: DroppedRow, next_attempt_ms: int) -> bool:
        """Count a purge attempt of `dropped` as started and move its next attempt to
        `next_attempt_ms`, only if no one else claimed it since it was read (compare-and-swap on
        the attempt count). False: another sweeper (instance or worker) has it, or it is gone.
        Claiming before purging also means an attempt that never finishes still waits its backoff."""
        result = await self._conn.execute(
            update(dropped_objects)
            .where(
                dropped_objects.c.drop_id == dropped.drop_id,
                dropped_objects.c.purge_attempts == dropped.purge_attempts,
            )
            .values(purge_attempts=dropped.purge_attempts + 1, next_purge_attempt_ms=next_attempt_ms)
        )
        return result.rowcount == 1

    async def record_purge_failure(
        self, drop_id: str, attempts: int, error: str, next_attempt_ms: int
    ) -> bool:
        """Record why attempt number `attempts` failed and when the next may start; False if the
        row is gone or another attempt has been claimed since."""
        result = await self._conn.execute(
            update(dropped_objects)
            .where(dropped_objects.c.drop_id == drop_id, dropped_objects.c.purge_attempts == attempts)
            .values(last_purge_error=error, next_purge_attempt_ms=next_attempt_ms)
        )
        return result.rowcount == 1

    async def delete_dropped(self, drop_id: str) -> bool:
        result = await self._conn.execute(delete(dropped_objects).where(dropped_objects.c.drop_id == drop_id))
        return result.rowcount == 1

    # -- data keys --------------------------------------------------------------------------
    async def get_registry_key(self, name: str) -> tuple[str, WrappedKey] | None:
        """(uuid, wrapped key) of a registry data key."""
        row = (await self._conn.execute(select(registry_keys).where(registry_keys.c.name == name))).first()
        if row is None:
            return None
        return row.uuid, WrappedKey(row.kek_uri, row.kek_version, row.wrapped_key)

    async def insert_registry_key(self, name: str, key_uuid: str, wrapped: WrappedKey) -> bool:
        """Store a new registry key; False if another instance stored one first."""
        try:
            await self._conn.execute(
                insert(registry_keys).values(
                    name=name,
                    uuid=key_uuid,
                    kek_uri=wrapped.kek_uri,
                    kek_version=wrapped.kek_version,
                    wrapped_key=wrapped.ciphertext,
                    created_at_ms=_now_ms(),
                )
            )
        except IntegrityError:
            return False
        return True

    async def keys_not_under(self, kek_uri: str, kek_version: str, limit: int) -> list[KeyRef]:
        """Up to `limit` wrapped keys, over all key-holding tables, not wrapped by this KEK version."""
        refs: list[KeyRef] = []
        for table_name, (table, id_column) in _KEY_TABLES.items():
            if len(refs) >= limit:
                break
            is_registry = table is registry_keys
            columns = [
                id_column.label("row_id"),
                table.c.uuid,
                table.c.kek_uri,
                table.c.kek_version,
                table.c.wrapped_key,
            ]
            if not is_registry:
                columns += [table.c.warehouse, table.c.kind]
            rows = await self._conn.execute(
                select(*columns)
                .where((table.c.kek_uri != kek_uri) | (table.c.kek_version != kek_version))
                .limit(limit - len(refs))
            )
            for row in rows:
                refs.append(
                    KeyRef(
                        table=table_name,
                        row_id=row.row_id,
                        warehouse="" if is_registry else row.warehouse,
                        kind="registry" if is_registry else row.kind,
                        uuid=row.uuid,
                        wrapped=WrappedKey(row.kek_uri, row.kek_version, row.wrapped_key),
                    )
                )
        return refs

    async def count_keys_not_under(self, kek_uri: str, kek_version: str) -> int:
        total = 0
        for table, _id_column in _KEY_TABLES.values():
            result = await self._conn.execute(
                select(func.count())
                .select_from(table)
                .where((table.c.kek_uri != kek_uri) | (table.c.kek_version != kek_version))
            )
            total += int(result.scalar_one())
        return total

    async def replace_key(self, ref: KeyRef, new: WrappedKey) -> bool:
        """Swap a wrapped key for its rewrapped form, only if it is still the one read."""
        self.touched.everything = True
        table, id_column = _KEY_TABLES[ref.table]
        result = await self._conn.execute(
            update(table)
            .where(id_column == ref.row_id, table.c.wrapped_key == ref.wrapped.ciphertext)
            .values(kek_uri=new.kek_uri, kek_version=new.kek_version, wrapped_key=new.ciphertext)
        )
        return result.rowcount == 1


def run_migrations(connection: Connection, script_location: Path = MIGRATIONS) -> None:
    """Upgrade the schema of `script_location`'s migrations to head on `connection`."""
    # Imported here: Alembic is needed once at start-up and is slow to import.
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


# Durability: a commit is acknowledged only once it survives power loss. SQLite in WAL mode with
# synchronous=FULL syncs the WAL at every commit (NORMAL may lose the last commits); PostgreSQL
# sessions keep synchronous_commit on whatever the server's default says.
SQLITE_SYNCHRONOUS = "FULL"
POSTGRES_SERVER_SETTINGS = {"synchronous_commit": "on"}


def create_engine(url: str, pool_size: int, max_overflow: int) -> AsyncEngine:
    """An engine for the registry at `url` (SQLite or PostgreSQL) with the durable settings."""
    if url.startswith("sqlite"):
        db_path = url.split("///", 1)[-1]
        if db_path and db_path != ":memory:":
            Path(db_path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, pool_size=pool_size, max_overflow=max_overflow)
        prepare_sqlite(engine)
        return engine
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        connect_args={"server_settings": POSTGRES_SERVER_SETTINGS},
    )


def prepare_sqlite(engine: AsyncEngine) -> None:
    """Take transaction control from pysqlite so BEGIN is explicit (and IMMEDIATE for writers)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the lock up front; readers use WAL snapshots per statement and need no
        # transaction at all (each BEGIN/COMMIT would cost two more hops to the driver thread).
        if conn.get_execution_options().get("cedarberg_write", False):
            conn.exec_driver_sql("BEGIN IMMEDIATE")


class Store:
    """The registry connection pool. Open with `Store.open`, close with `close`."""

    def __init__(
        self, engine: AsyncEngine, pool_capacity: int = 0, cache: RegistryCache | None = None
    ) -> None:
        self._engine = engine
        self._is_sqlite = engine.dialect.name == "sqlite"
        self._sqlite_writer = asyncio.Lock()
        self.pool_capacity = pool_capacity  # most connections the pool opens at once
        # Off unless the caller gives one: CLI commands and migrations read the registry directly.
        self.cache = cache if cache is not None else RegistryCache(ttl_seconds=0)
        self._reading: dict[Hashable, asyncio.Future[Any]] = {}
        self._refreshes: set[asyncio.Task[Any]] = set()  # held so they are not collected mid-read

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool = True,
        pool_size: int = 10,
        max_overflow: int = 10,
        cache: RegistryCache | None = None,
    ) -> Store:
        """Connect and (unless `migrate` is False: the caller made sure the schema is current)
        apply migrations. The pool sizes apply to PostgreSQL (SQLite needs only a few
        connections: its writers are serialised). Raises StorageUnavailableError if unreachable."""
        if url.startswith("sqlite"):
            # SQLite needs few connections: its writers are serialised.
            pool_size, max_overflow = 4, 4
        engine = create_engine(url, pool_size, max_overflow)
        store = cls(engine, pool_size + max_overflow, cache)
        if not migrate:
            return store
        try:
            async with store._write_connection() as conn:
                if not store._is_sqlite:
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
                await conn.run_sync(run_migrations)
        except (OSError, SQLAlchemyError) as err:
            await engine.dispose()
            raise StorageUnavailableError(f"cannot open the registry: {type(err).__name__}") from err
        return store

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    @property
    def engine(self) -> AsyncEngine:
        """The engine, for instrumentation (pool events); queries go through read/write."""
        return self._engine

    async def ping(self) -> bool:
        """True if the registry answers a trivial query (callers bound the wait)."""
        try:
            async with self._engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except (OSError, SQLAlchemyError):
            return False
        return True

    async def close(self) -> None:
        for task in list(self._refreshes):
            task.cancel()
        await asyncio.gather(*self._refreshes, return_exceptions=True)
        await self._engine.dispose()

    @asynccontextmanager
    async def _write_connection(self) -> AsyncIterator[AsyncConnection]:
        """A connection inside a write transaction. An error raised by the body rolls back; an
        error while committing means the outcome is unknown (CommitStateUnknownError)."""
        async with AsyncExitStack() as stack:
            if self._is_sqlite:
                await stack.enter_async_context(self._sqlite_writer)
            conn = await stack.enter_async_context(self._engine.connect())
            if self._is_sqlite:
                conn = await conn.execution_options(cedarberg_write=True)
            transaction = await conn.begin()
            try:
                yield conn
            except BaseException:
                await transaction.rollback()
                raise
            try:
                await transaction.commit()
            except (DBAPIError, OSError) as err:
                raise CommitStateUnknownError("the registry did not confirm the commit") from err

    @asynccontextmanager
    async def write(self) -> AsyncIterator[StoreTx]:
        """A read-write transaction: committed on normal exit, rolled back on error."""
        tx: StoreTx | None = None
        try:
            async with self._write_connection() as conn:
                tx = StoreTx(conn)
                yield tx
        except (DBAPIError, OSError) as err:
            raise StorageUnavailableError(f"the registry is unavailable: {type(err).__name__}") from err
        finally:
            # Committed, rolled back or unknown: cached reads of what it touched are not trusted.
            if tx is not None:
                self.cache.forget(tx.touched)

    async def cached(self, key: Hashable, load: Callable[[StoreTx], Awaitable[T]]) -> T:
        """`load` run in a read transaction, or its cached result (see `catalog.store.cache`)."""
        cache = self.cache
        if not cache.enabled:
            async with self.read() as tx:
                return await load(tx)
        found, value, stale = cache.lookup_stale(key)
        if found:
            if stale:
                self.refresh_later(key, load)
            return value  # type: ignore[no-any-return]
        pending = self._reading.get(key)
        if pending is not None:  # single flight: misses of one entry share one read
            note_uncached_read()  # noted by the reader that started it, not by this request
            return await asyncio.shield(pending)
        return await self._read_into_cache(key, load, self._claim(key))

    def refresh_later(self, key: Hashable, load: Callable[[StoreTx], Awaitable[Any]]) -> None:
        """Re-read a stale entry in the background (once at a time per entry)."""
        if key in self._reading:
            return
        task = asyncio.get_running_loop().create_task(self._read_into_cache(key, load, self._claim(key)))
        self._refreshes.add(task)
        task.add_done_callback(self._refreshed)

    def _claim(self, key: Hashable) -> asyncio.Future[Any]:
        """Mark `key` as being read (synchronously, so no second read of it can start)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._reading[key] = future
        return future

    def _refreshed(self, task: asyncio.Task[Any]) -> None:
        self._refreshes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The stale entry ages out; the next request reads (and reports) for itself.
            log.warning("registry cache refresh failed: %s", type(task.exception()).__name__)

    async def _read_into_cache(
        self, key: Hashable, load: Callable[[StoreTx], Awaitable[T]], future: asyncio.Future[Any]
    ) -> T:
        """Read `key` for the claim `future` (see `_claim`), share the outcome, cache the value."""
        cache = self.cache
        generation = cache.generation
        try:
            async with self.read(for_cache=True) as tx:
                value = await load(tx)
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._reading[key]
        value = cache.store(key, value, generation, load)
        future.set_result(value)
        return value

    @asynccontextmanager
    async def read(self, *, for_cache: bool = False) -> AsyncIterator[StoreTx]:
        """A read-only transaction. `for_cache`: its results go into the read cache (which notes
        them for request plans); any other read is noted as one that bypassed the cache."""
        if not for_cache:
            note_uncached_read()
        try:
            async with self._engine.connect() as conn, conn.begin():
                yield StoreTx(conn)
        except (DBAPIError, OSError) as err:
            raise StorageUnavailableError(f"the registry is unavailable: {type(err).__name__}") from err
