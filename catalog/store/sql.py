"""The registry: SQLite (embedded default) or PostgreSQL (scale-out).

Statements are written in SQLAlchemy Core, compiled once per dialect (catalog.store.statements)
and run on the plain drivers: sqlite3 inline on the event loop (catalog.store.sqlite_driver) or
asyncpg with prepared statements (catalog.store.postgres_driver). Migrations run on a SQLAlchemy
engine of their own at start-up (catalog.store.engine).

Invariants:
- A table or view pointer changes only through `swap_object`, an `UPDATE ... WHERE
  metadata_location = :expected AND wrapped_key = :expected_key` whose row count tells whether
  the swap won (compare-and-swap), or, on PostgreSQL, the same UPDATE inside one statement
  (catalog.store.server_writes).
- Writes on SQLite are serialised in-process and start with `BEGIN IMMEDIATE`, so concurrent
  writers wait for the lock (asynchronously, up to the busy timeout) instead of failing half-way
  with "database is locked".
- Every database error that is not a known constraint violation becomes StorageUnavailableError;
  driver messages never reach clients.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Hashable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, TypeVar

import orjson
from sqlalchemy import BigInteger, Integer, Table, and_, delete, func, insert, select, text, update
from sqlalchemy import bindparam as param
from sqlalchemy.sql.expression import ColumnElement

from cedarberg.catalog.errors import (
    AlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    StorageUnavailableError,
)
from cedarberg.catalog.store.cache import RegistryCache, Touched, note_uncached_read
from cedarberg.catalog.store.driver import Connection, DatabaseError, Driver, IntegrityViolation
from cedarberg.catalog.store.engine import migrate_registry
from cedarberg.catalog.store.postgres_driver import PostgresDriver
from cedarberg.catalog.store.schema import (
    catalog_objects,
    dropped_objects,
    idempotency_records,
    metrics_reports,
    namespaces,
    registry_keys,
)
from cedarberg.catalog.store.sqlite_driver import SqliteDriver
from cedarberg.catalog.store.sqlite_handoff import HandedOffSqliteDriver, writer_socket_for
from cedarberg.catalog.store.statements import Sql
from cedarberg.catalog.store.urls import SUPPORTED_FORMS, is_postgres, sqlite_path
from cedarberg.kms.keys import WrappedKey

T = TypeVar("T")
log = logging.getLogger(__name__)
SQLITE_READERS = 4  # SQLite reads run inline in microseconds: a few connections serve them all
SQLITE_BUSY_TIMEOUT_SECONDS = 10.0  # as long as the busy_timeout the registry always had


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


def values_of(table: Table, *names: str) -> dict[str, Any]:
    """INSERT values: a bind parameter per column, named like the column."""
    return {name: param(name, type_=table.c[name].type) for name in names}


def _in(column: ColumnElement[Any], prefix: str, count: int) -> ColumnElement[bool]:
    """`column IN (:prefix0, ..., :prefix{count-1})`: one shape per list length."""
    return column.in_([param(f"{prefix}{i}", type_=column.type) for i in range(count)])


def in_params(prefix: str, values: Collection[Any]) -> dict[str, Any]:
    return {f"{prefix}{i}": value for i, value in enumerate(values)}


_LIMIT = param("limit", type_=Integer)
_ns = namespaces.c
_obj = catalog_objects.c
_idem = idempotency_records.c
_met = metrics_reports.c
_drop = dropped_objects.c
_ns_key = (_ns.warehouse == param("warehouse"), _ns.name == param("name"))
_obj_key = (
    _obj.warehouse == param("warehouse"),
    _obj.namespace == param("namespace"),
    _obj.name == param("name"),
)

_GET_NAMESPACE = Sql(select(_ns.properties).where(*_ns_key))
_GET_NAMESPACE_FOR_UPDATE = Sql(select(_ns.properties).where(*_ns_key).with_for_update())
_INSERT_NAMESPACE = Sql(
    insert(namespaces).values(
        values_of(namespaces, "warehouse", "name", "parent", "properties", "created_at_ms")
    )
)
_SET_NAMESPACE_PROPERTIES = Sql(update(namespaces).where(*_ns_key).values(properties=param("properties")))
_COUNT_CHILDREN = Sql(
    select(func.count())
    .select_from(namespaces)
    .where(_ns.warehouse == param("warehouse"), _ns.parent == param("name"))
)
_COUNT_OBJECTS_IN = Sql(
    select(func.count())
    .select_from(catalog_objects)
    .where(_obj.warehouse == param("warehouse"), _obj.namespace == param("name"))
)
_DELETE_NAMESPACE = Sql(delete(namespaces).where(*_ns_key))


@lru_cache(maxsize=64)
def _namespace_properties(count: int) -> Sql:
    return Sql(
        select(_ns.name, _ns.properties).where(_ns.warehouse == param("warehouse"), _in(_ns.name, "n", count))
    )


@lru_cache(maxsize=4)
def _list_namespaces(top_level: bool, paged: bool) -> Sql:
    query = select(_ns.name).where(_ns.warehouse == param("warehouse"))
    query = query.where(_ns.parent.is_(None) if top_level else _ns.parent == param("parent"))
    if paged:
        query = query.where(_ns.name > param("after"))
    return Sql(query.order_by(_ns.name).limit(_LIMIT))


_GET_OBJECT = Sql(select(*_OBJECT_COLUMNS).where(*_obj_key))
_OBJECT_IN_NAMESPACE = Sql(
    select(_ns.properties.label("ns_properties"), *_OBJECT_COLUMNS)
    .select_from(
        namespaces.outerjoin(
            catalog_objects,
            and_(_obj.warehouse == _ns.warehouse, _obj.namespace == _ns.name, _obj.name == param("name")),
        )
    )
    .where(_ns.warehouse == param("warehouse"), _ns.name == param("namespace"))
)
_OBJECT_LOCATIONS = Sql(
    select(_obj.namespace, _obj.name, _obj.metadata_location).where(_obj.warehouse == param("warehouse"))
)
_INSERT_OBJECT = Sql(
    insert(catalog_objects).values(values_of(catalog_objects, *_OBJECT_FIELDS, "updated_at_ms"))
)
_SWAP_OBJECT = Sql(
    update(catalog_objects)
    .where(
        *_obj_key,
        _obj.metadata_location == param("expected"),
        _obj.wrapped_key == param("expected_key", type_=_obj.wrapped_key.type),
    )
    .values(
        metadata_location=param("new_location"),
        metadata=param("new_metadata", type_=_obj.metadata.type),
        version=_obj.version + 1,
        updated_at_ms=param("now", type_=BigInteger),
    )
)
_RENAME_OBJECT = Sql(
    update(catalog_objects)
    .where(*_obj_key, _obj.kind == param("kind"))
    .values(
        namespace=param("to_namespace"), name=param("to_name"), updated_at_ms=param("now", type_=BigInteger)
    )
)


@lru_cache(maxsize=4)
def _list_objects(paged: bool) -> Sql:
    query = select(_obj.name).where(
        _obj.warehouse == param("warehouse"), _obj.namespace == param("namespace"), _obj.kind == param("kind")
    )
    if paged:
        query = query.where(_obj.name > param("after"))
    return Sql(query.order_by(_obj.name).limit(_LIMIT))


@lru_cache(maxsize=4)
def _delete_object(expecting: bool) -> Sql:
    query = delete(catalog_objects).where(*_obj_key, _obj.kind == param("kind"))
    if expecting:
        query = query.where(_obj.metadata_location == param("expected"))
    return Sql(query)


_GET_IDEMPOTENCY = Sql(
    select(_idem.operation, _idem.request_hash, _idem.outcome, _idem.payload, _idem.created_at).where(
        _idem.key == param("key"), _idem.created_at >= param("not_before")
    )
)
_DELETE_EXPIRED_KEY = Sql(
    delete(idempotency_records).where(_idem.key == param("key"), _idem.created_at < param("before"))
)
_INSERT_IDEMPOTENCY = Sql(
    insert(idempotency_records).values(
        values_of(idempotency_records, "key", "operation", "request_hash", "outcome", "payload", "created_at")
    )
)
_PURGE_IDEMPOTENCY = Sql(delete(idempotency_records).where(_idem.created_at < param("before")))

_metrics_key = (
    _met.warehouse == param("warehouse"),
    _met.namespace == param("namespace"),
    _met.name == param("name"),
)
_INSERT_METRICS = Sql(
    insert(metrics_reports).values(
        values_of(
            metrics_reports, "warehouse", "namespace", "name", "report_type", "report", "received_at_ms"
        )
    )
)
_DELETE_METRICS = Sql(delete(metrics_reports).where(*_metrics_key))
_DELETE_METRICS_BEFORE = Sql(
    delete(metrics_reports).where(
        _met.id.in_(
            select(_met.id)
            .where(_met.received_at_ms < param("before"))
            .order_by(_met.received_at_ms)
            .limit(_LIMIT)
            .scalar_subquery()
        )
    )
)

_DROPPED_FIELDS = (
    *_OBJECT_FIELDS,
    "drop_id",
    "moved_files",
    "dropped_at_ms",
    "purge_after_ms",
    "purge_attempts",
    "last_purge_error",
    "next_purge_attempt_ms",
)
_INSERT_DROPPED = Sql(insert(dropped_objects).values(values_of(dropped_objects, *_DROPPED_FIELDS)))
_GET_DROPPED = Sql(select(dropped_objects).where(_drop.drop_id == param("drop_id")))
_CLAIM_PURGE = Sql(
    update(dropped_objects)
    .where(_drop.drop_id == param("drop_id"), _drop.purge_attempts == param("attempts"))
    .values(purge_attempts=param("next_attempts"), next_purge_attempt_ms=param("next_attempt_ms"))
)
_RECORD_PURGE_FAILURE = Sql(
    update(dropped_objects)
    .where(_drop.drop_id == param("drop_id"), _drop.purge_attempts == param("attempts"))
    .values(last_purge_error=param("error"), next_purge_attempt_ms=param("next_attempt_ms"))
)
_RELEASE_PURGE = Sql(
    update(dropped_objects)
    .where(_drop.drop_id == param("drop_id"), _drop.purge_attempts == 0)
    .values(next_purge_attempt_ms=param("next_attempt_ms"))
)
_DELETE_DROPPED = Sql(delete(dropped_objects).where(_drop.drop_id == param("drop_id")))


@lru_cache(maxsize=4)
def _list_dropped(paged: bool) -> Sql:
    query = select(dropped_objects).where(_drop.warehouse == param("warehouse"))
    if paged:
        query = query.where(_drop.drop_id > param("after"))
    return Sql(query.order_by(_drop.drop_id).limit(_LIMIT))


@lru_cache(maxsize=32)
def _due_for_purge(warehouses: int) -> Sql:
    return Sql(
        select(dropped_objects)
        .where(
            _drop.next_purge_attempt_ms <= param("now"),
            _drop.purge_after_ms <= param("now"),  # the retention holds whatever was recorded
            _in(_drop.warehouse, "w", warehouses),
        )
        .order_by(_drop.next_purge_attempt_ms, _drop.drop_id)
        .limit(_LIMIT)
    )


_GET_REGISTRY_KEY = Sql(select(registry_keys).where(registry_keys.c.name == param("name")))
_INSERT_REGISTRY_KEY = Sql(
    insert(registry_keys).values(
        values_of(registry_keys, "name", "uuid", "kek_uri", "kek_version", "wrapped_key", "created_at_ms")
    )
)


def _key_statements(table: Table, id_column: ColumnElement[Any]) -> tuple[Sql, Sql, Sql]:
    """(keys not under a KEK version, their count, replace one) for one key-holding table."""
    c = table.c
    other_kek = (c.kek_uri != param("kek_uri")) | (c.kek_version != param("kek_version"))
    columns = [id_column.label("row_id"), c.uuid, c.kek_uri, c.kek_version, c.wrapped_key]
    if table is not registry_keys:
        columns += [c.warehouse, c.kind]
    return (
        Sql(select(*columns).where(other_kek).limit(_LIMIT)),
        Sql(select(func.count()).select_from(table).where(other_kek)),
        Sql(
            update(table)
            .where(id_column == param("row_id"), c.wrapped_key == param("old_key", type_=c.wrapped_key.type))
            .values(
                kek_uri=param("new_kek_uri"),
                kek_version=param("new_kek_version"),
                wrapped_key=param("new_key", type_=c.wrapped_key.type),
            )
        ),
    )


_KEY_STATEMENTS = {
    name: _key_statements(table, id_column) for name, (table, id_column) in _KEY_TABLES.items()
}


class StoreTx:
    """Operations inside one database transaction."""

    __slots__ = ("_conn", "touched")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.touched = Touched()  # what this transaction changed, for the read cache

    @property
    def connection(self) -> Connection:
        """The transaction's connection, for the store modules beside this one (catalog.store.plans,
        catalog.store.roots): it runs `Sql` statements."""
        return self._conn

    @property
    def dialect(self) -> str:
        """ "sqlite" or "postgresql"."""
        return str(self._conn.dialect.name)

    # -- namespaces -------------------------------------------------------------------------
    async def get_namespace(
        self, warehouse: str, name: str, for_update: bool = False
    ) -> dict[str, str] | None:
        query = _GET_NAMESPACE_FOR_UPDATE if for_update else _GET_NAMESPACE
        row = (await self._conn.execute(query, {"warehouse": warehouse, "name": name})).first()
        return None if row is None else dict(orjson.loads(row.properties))

    async def namespace_properties(self, warehouse: str, names: list[str]) -> dict[str, dict[str, str]]:
        """Properties of the named namespaces that exist (one query, for a namespace chain)."""
        if not names:
            return {}
        unique = list(dict.fromkeys(names))
        rows = await self._conn.execute(
            _namespace_properties(len(unique)), {"warehouse": warehouse, **in_params("n", unique)}
        )
        return {row.name: dict(orjson.loads(row.properties)) for row in rows}

    async def list_namespaces(
        self, warehouse: str, parent: str | None, after: str | None, limit: int
    ) -> list[str]:
        rows = await self._conn.execute(
            _list_namespaces(parent is None, after is not None),
            {"warehouse": warehouse, "parent": parent, "after": after, "limit": limit},
        )
        return [row.name for row in rows]

    async def insert_namespace(
        self, warehouse: str, name: str, parent: str | None, properties: dict[str, str]
    ) -> None:
        self.touched.namespaces.add((warehouse, name))
        try:
            await self._conn.execute(
                _INSERT_NAMESPACE,
                {
                    "warehouse": warehouse,
                    "name": name,
                    "parent": parent,
                    "properties": orjson.dumps(properties).decode(),
                    "created_at_ms": _now_ms(),
                },
            )
        except IntegrityViolation as err:
            if err.foreign_key:
                raise NoSuchNamespaceError("parent namespace does not exist") from None
            raise AlreadyExistsError("namespace already exists") from None

    async def set_namespace_properties(self, warehouse: str, name: str, properties: dict[str, str]) -> None:
        self.touched.namespaces.add((warehouse, name))
        await self._conn.execute(
            _SET_NAMESPACE_PROPERTIES,
            {"warehouse": warehouse, "name": name, "properties": orjson.dumps(properties).decode()},
        )

    async def delete_namespace(self, warehouse: str, name: str) -> bool:
        """Delete an empty namespace; False if absent. Raises NamespaceNotEmptyError."""
        self.touched.namespaces.add((warehouse, name))
        key = {"warehouse": warehouse, "name": name}
        children = await self._conn.execute(_COUNT_CHILDREN, key)
        objects = await self._conn.execute(_COUNT_OBJECTS_IN, key)
        if children.scalar_one() or objects.scalar_one():
            raise NamespaceNotEmptyError("namespace is not empty")
        try:
            result = await self._conn.execute(_DELETE_NAMESPACE, key)
        except IntegrityViolation:
            raise NamespaceNotEmptyError("namespace is not empty") from None
        return bool(result.rowcount)

    # -- tables and views -------------------------------------------------------------------
    async def get_object(self, warehouse: str, namespace: str, name: str) -> ObjectRow | None:
        row = (
            await self._conn.execute(
                _GET_OBJECT, {"warehouse": warehouse, "namespace": namespace, "name": name}
            )
        ).first()
        return None if row is None else ObjectRow(*row)

    async def get_object_in_namespace(
        self, warehouse: str, namespace: str, name: str
    ) -> tuple[dict[str, str], ObjectRow | None] | None:
        """`get_namespace` and `get_object` in one statement (one round trip on PostgreSQL): the
        namespace's properties and the pointer `name` in it (None: no such object); None if the
        namespace does not exist."""
        found = (
            await self._conn.execute(
                _OBJECT_IN_NAMESPACE, {"warehouse": warehouse, "namespace": namespace, "name": name}
            )
        ).first()
        if found is None:
            return None
        properties = dict(orjson.loads(found.ns_properties))
        return properties, None if found.uuid is None else ObjectRow(*found[1:])

    async def list_objects(
        self, warehouse: str, namespace: str, kind: str, after: str | None, limit: int
    ) -> list[str]:
        rows = await self._conn.execute(
            _list_objects(after is not None),
            {"warehouse": warehouse, "namespace": namespace, "kind": kind, "after": after, "limit": limit},
        )
        return [row.name for row in rows]

    async def object_locations(self, warehouse: str) -> list[tuple[str, str, str]]:
        """(namespace, name, metadata_location) of every object in a warehouse."""
        rows = await self._conn.execute(_OBJECT_LOCATIONS, {"warehouse": warehouse})
        return [(row.namespace, row.name, row.metadata_location) for row in rows]

    async def insert_object(self, row: ObjectRow) -> None:
        """Insert a new pointer. Raises AlreadyExistsError or NoSuchNamespaceError."""
        self.touched.objects.add((row.warehouse, row.namespace, row.name))
        try:
            await self._conn.execute(_INSERT_OBJECT, {**asdict(row), "updated_at_ms": _now_ms()})
        except IntegrityViolation as err:
            if err.foreign_key:
                raise NoSuchNamespaceError("namespace does not exist") from None
            if "uuid" in err.detail:
                # Two pointers to one table's metadata would let their histories diverge.
                raise AlreadyExistsError(
                    f"a table or view with UUID {row.uuid} is registered already"
                ) from None
            raise AlreadyExistsError("a table or view with this name already exists") from None

    async def swap_object(self, base: ObjectRow, new_location: str, new_metadata: bytes) -> bool:
        """Compare-and-swap the pointer `base` was read from; True if it still named
        `base.metadata_location` with `base`'s data key (a file location alone does not name a
        version: a table dropped and its last file registered again has the same one) and now
        moved."""
        warehouse, namespace, name = base.warehouse, base.namespace, base.name
        self.touched.objects.add((warehouse, namespace, name))
        result = await self._conn.execute(
            _SWAP_OBJECT,
            {
                "warehouse": warehouse,
                "namespace": namespace,
                "name": name,
                "expected": base.metadata_location,
                "expected_key": base.wrapped_key,
                "new_location": new_location,
                "new_metadata": new_metadata,
                "now": _now_ms(),
            },
        )
        return result.rowcount == 1

    async def delete_object(
        self, warehouse: str, namespace: str, name: str, kind: str, expected_location: str | None = None
    ) -> bool:
        """Delete a pointer (only if it still names `expected_location`, when given)."""
        self.touched.objects.add((warehouse, namespace, name))
        result = await self._conn.execute(
            _delete_object(expected_location is not None),
            {
                "warehouse": warehouse,
                "namespace": namespace,
                "name": name,
                "kind": kind,
                "expected": expected_location,
            },
        )
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
                _RENAME_OBJECT,
                {
                    "warehouse": warehouse,
                    "namespace": source[0],
                    "name": source[1],
                    "kind": kind,
                    "to_namespace": target[0],
                    "to_name": target[1],
                    "now": _now_ms(),
                },
            )
        except IntegrityViolation as err:
            if err.foreign_key:
                raise NoSuchNamespaceError("target namespace does not exist") from None
            raise AlreadyExistsError("a table or view with the target name already exists") from None
        return result.rowcount == 1

    # -- idempotency ------------------------------------------------------------------------
    async def get_idempotency(self, key: str, not_before: float) -> IdempotencyRecord | None:
        row = (await self._conn.execute(_GET_IDEMPOTENCY, {"key": key, "not_before": not_before})).first()
        if row is None:
            return None
        return IdempotencyRecord(row.operation, row.request_hash, row.outcome, row.payload, row.created_at)

    async def put_idempotency(self, key: str, record: IdempotencyRecord, expired_before: float) -> None:
        """Record a final outcome under `key`, replacing a record created before `expired_before`.
        Raises DuplicateKeyError when a live record has the key."""
        await self._conn.execute(_DELETE_EXPIRED_KEY, {"key": key, "before": expired_before})
        try:
            await self._conn.execute(
                _INSERT_IDEMPOTENCY,
                {
                    "key": key,
                    "operation": record.operation,
                    "request_hash": record.request_hash,
                    "outcome": record.outcome,
                    "payload": record.payload,
                    "created_at": record.created_at,
                },
            )
        except IntegrityViolation:
            raise DuplicateKeyError(key) from None

    async def purge_idempotency(self, before: float) -> int:
        result = await self._conn.execute(_PURGE_IDEMPOTENCY, {"before": before})
        return int(result.rowcount)

    # -- metrics ----------------------------------------------------------------------------
    async def insert_metrics_report(
        self, warehouse: str, namespace: str, name: str, report_type: str, report: bytes
    ) -> None:
        await self._conn.execute(
            _INSERT_METRICS,
            {
                "warehouse": warehouse,
                "namespace": namespace,
                "name": name,
                "report_type": report_type,
                "report": report,
                "received_at_ms": _now_ms(),
            },
        )

    async def delete_metrics_reports(self, warehouse: str, namespace: str, name: str) -> None:
        await self._conn.execute(
            _DELETE_METRICS, {"warehouse": warehouse, "namespace": namespace, "name": name}
        )

    async def delete_metrics_reports_before(self, before_ms: int, limit: int) -> int:
        """Delete up to `limit` reports received before `before_ms` (oldest first, by the
        `ix_metrics_received` index); returns how many."""
        result = await self._conn.execute(_DELETE_METRICS_BEFORE, {"before": before_ms, "limit": limit})
        return int(result.rowcount)

    # -- soft-deleted objects ---------------------------------------------------------------
    async def insert_dropped(self, dropped: DroppedRow) -> None:
        await self._conn.execute(
            _INSERT_DROPPED,
            {
                **asdict(dropped.row),
                "drop_id": dropped.drop_id,
                "moved_files": orjson.dumps(dropped.moved_files).decode(),
                "dropped_at_ms": dropped.dropped_at_ms,
                "purge_after_ms": dropped.purge_after_ms,
                "purge_attempts": dropped.purge_attempts,
                "last_purge_error": dropped.last_purge_error,
                "next_purge_attempt_ms": dropped.next_attempt_ms,
            },
        )

    async def get_dropped(self, drop_id: str) -> DroppedRow | None:
        row = (await self._conn.execute(_GET_DROPPED, {"drop_id": drop_id})).first()
        return None if row is None else _dropped(row)

    async def list_dropped(self, warehouse: str, after: str | None, limit: int) -> list[DroppedRow]:
        """Soft-deleted objects of a warehouse in drop-id order (keyset pagination)."""
        rows = await self._conn.execute(
            _list_dropped(after is not None), {"warehouse": warehouse, "after": after, "limit": limit}
        )
        return [_dropped(row) for row in rows]

    async def due_for_purge(self, now_ms: int, warehouses: Collection[str], limit: int) -> list[DroppedRow]:
        """At most `limit` soft-deleted objects of these warehouses whose next purge attempt is
        due, earliest first (index-backed). An object waiting out a backoff is not among them, so
        objects that keep failing cannot fill the batch; nor are objects of warehouses this
        gateway does not serve."""
        if not warehouses:
            return []
        names = sorted(set(warehouses))
        rows = await self._conn.execute(
            _due_for_purge(len(names)), {"now": now_ms, "limit": limit, **in_params("w", names)}
        )
        return [_dropped(row) for row in rows]

    async def claim_purge(self, dropped: DroppedRow, next_attempt_ms: int) -> bool:
        """Count a purge attempt of `dropped` as started and move its next attempt to
        `next_attempt_ms`, only if no one else claimed it since it was read (compare-and-swap on
        the attempt count). False: another sweeper (instance or worker) has it, or it is gone.
        Claiming before purging also means an attempt that never finishes still waits its backoff."""
        result = await self._conn.execute(
            _CLAIM_PURGE,
            {
                "drop_id": dropped.drop_id,
                "attempts": dropped.purge_attempts,
                "next_attempts": dropped.purge_attempts + 1,
                "next_attempt_ms": next_attempt_ms,
            },
        )
        return result.rowcount == 1

    async def record_purge_failure(
        self, drop_id: str, attempts: int, error: str, next_attempt_ms: int
    ) -> bool:
        """Record why attempt number `attempts` failed and when the next may start; False if the
        row is gone or another attempt has been claimed since."""
        result = await self._conn.execute(
            _RECORD_PURGE_FAILURE,
            {"drop_id": drop_id, "attempts": attempts, "error": error, "next_attempt_ms": next_attempt_ms},
        )
        return result.rowcount == 1

    async def release_purge(self, drop_id: str, next_attempt_ms: int) -> bool:
        """Let the first purge of `drop_id` start at `next_attempt_ms` (a drop holds it off
        while it moves the object's files); False if an attempt has started or the row is gone."""
        result = await self._conn.execute(
            _RELEASE_PURGE, {"drop_id": drop_id, "next_attempt_ms": next_attempt_ms}
        )
        return result.rowcount == 1

    async def delete_dropped(self, drop_id: str) -> bool:
        result = await self._conn.execute(_DELETE_DROPPED, {"drop_id": drop_id})
        return result.rowcount == 1

    # -- data keys --------------------------------------------------------------------------
    async def get_registry_key(self, name: str) -> tuple[str, WrappedKey] | None:
        """(uuid, wrapped key) of a registry data key."""
        row = (await self._conn.execute(_GET_REGISTRY_KEY, {"name": name})).first()
        if row is None:
            return None
        return row.uuid, WrappedKey(row.kek_uri, row.kek_version, row.wrapped_key)

    async def insert_registry_key(self, name: str, key_uuid: str, wrapped: WrappedKey) -> bool:
        """Store a new registry key; False if another instance stored one first."""
        try:
            await self._conn.execute(
                _INSERT_REGISTRY_KEY,
                {
                    "name": name,
                    "uuid": key_uuid,
                    "kek_uri": wrapped.kek_uri,
                    "kek_version": wrapped.kek_version,
                    "wrapped_key": wrapped.ciphertext,
                    "created_at_ms": _now_ms(),
                },
            )
        except IntegrityViolation:
            return False
        return True

    async def keys_not_under(self, kek_uri: str, kek_version: str, limit: int) -> list[KeyRef]:
        """Up to `limit` wrapped keys, over all key-holding tables, not wrapped by this KEK version."""
        refs: list[KeyRef] = []
        for table_name, (select_keys, _count, _replace) in _KEY_STATEMENTS.items():
            if len(refs) >= limit:
                break
            is_registry = table_name == "registry_keys"
            rows = await self._conn.execute(
                select_keys, {"kek_uri": kek_uri, "kek_version": kek_version, "limit": limit - len(refs)}
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
        for _select, count, _replace in _KEY_STATEMENTS.values():
            result = await self._conn.execute(count, {"kek_uri": kek_uri, "kek_version": kek_version})
            total += int(result.scalar_one())
        return total

    async def replace_key(self, ref: KeyRef, new: WrappedKey) -> bool:
        """Swap a wrapped key for its rewrapped form, only if it is still the one read."""
        self.touched.everything = True
        replace = _KEY_STATEMENTS[ref.table][2]
        result = await self._conn.execute(
            replace,
            {
                "row_id": ref.row_id,
                "old_key": ref.wrapped.ciphertext,
                "new_kek_uri": new.kek_uri,
                "new_kek_version": new.kek_version,
                "new_key": new.ciphertext,
            },
        )
        return result.rowcount == 1


_PING = Sql(text("SELECT 1"))
_STORE_NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _unavailable(dialect: str, err: Exception) -> StorageUnavailableError:
    """What a client is told when the registry failed a statement: which database, and the
    driver's exception class (a DatabaseError carries only that; never a driver message or a path)."""
    cause = str(err) if isinstance(err, DatabaseError) else type(err).__name__
    return StorageUnavailableError(
        f"the registry ({_STORE_NAMES.get(dialect, dialect)}) is unavailable: {cause}"
    )


def open_driver(url: str, capacity: int, *, sqlite_readers: int = SQLITE_READERS) -> Driver:
    """The driver for a registry URL (catalog.store.urls: SQLite or PostgreSQL, either spelling),
    opening at most `capacity` PostgreSQL connections or `sqlite_readers` idle SQLite readers (on
    SQLite a writer waits up to SQLITE_BUSY_TIMEOUT_SECONDS for another process's write lock).
    Connects lazily. Raises StorageUnavailableError for any other URL. A SQLite file whose
    writes this process hands to a writer process (catalog.store.sqlite_handoff) gets a driver
    that writes there and reads here."""
    path = sqlite_path(url)
    if path is not None:
        writer = writer_socket_for(path)
        if writer is not None:
            return HandedOffSqliteDriver(
                path, writer, readers=sqlite_readers, busy_timeout=SQLITE_BUSY_TIMEOUT_SECONDS
            )
        return SqliteDriver(path, readers=sqlite_readers, busy_timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
    if is_postgres(url):
        return PostgresDriver(url, capacity)
    raise StorageUnavailableError(f"the registry URL must be {SUPPORTED_FORMS}")


class Store:
    """The registry connection pool. Open with `Store.open`, close with `close`."""

    def __init__(self, driver: Driver, cache: RegistryCache | None = None) -> None:
        self._driver = driver
        self.pool_capacity = driver.capacity  # most connections the pool opens at once
        # The one place that chooses how the common writes run: as one statement each on
        # PostgreSQL (a server-side function, catalog.store.server_writes: one round trip instead
        # of one per statement plus BEGIN and COMMIT), as a transaction of several statements on
        # SQLite (where a statement is no round trip and writers share a COMMIT already).
        self.writes_alone = isinstance(driver, PostgresDriver)
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
        connections: its statements run inline, its writers are serialised). Raises
        StorageUnavailableError if unreachable."""
        if migrate:
            await migrate_registry(url)
        return cls(open_driver(url, pool_size + max_overflow), cache)

    @property
    def dialect(self) -> str:
        return str(self._driver.dialect.name)

    def watch_pool(self, checked_out: Callable[[], None], checked_in: Callable[[], None]) -> None:
        """Count connections taken from and given back to the pool (for the pool gauge)."""
        self._driver.watch(checked_out, checked_in)

    async def ping(self) -> bool:
        """True if the registry answers a trivial query (callers bound the wait)."""
        try:
            async with self._driver.read() as conn:
                await conn.execute(_PING)
        except (DatabaseError, OSError):
            return False
        return True

    async def close(self) -> None:
        for task in list(self._refreshes):
            task.cancel()
        await asyncio.gather(*self._refreshes, return_exceptions=True)
        await self._driver.close()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[StoreTx]:
        """A read-write transaction: committed on normal exit, rolled back on error. An error
        while committing means the outcome is unknown (CommitStateUnknownError)."""
        tx: StoreTx | None = None
        try:
            async with self._driver.write() as conn:
                tx = StoreTx(conn)
                yield tx
        except (DatabaseError, IntegrityViolation, OSError) as err:
            raise _unavailable(self.dialect, err) from err
        finally:
            # Committed, rolled back or unknown: cached reads of what it touched are not trusted.
            if tx is not None:
                self.cache.forget(tx.touched)

    async def write_alone(self, sql: Sql, params: Mapping[str, Any], touched: Touched) -> Any:
        """Run one writing statement as its own transaction (only where `writes_alone`) and return
        its scalar result; cached reads of what it `touched` are forgotten whatever happens.
        Raises IntegrityViolation (a constraint refused it: nothing written),
        StorageUnavailableError (refused otherwise: nothing written), CommitStateUnknownError
        (sent, not confirmed)."""
        driver = self._driver
        if not isinstance(driver, PostgresDriver):
            raise TypeError("this store runs its writes as transactions")
        try:
            rows = await driver.write_alone(sql, params)
        except (DatabaseError, OSError) as err:
            raise _unavailable(self.dialect, err) from err
        finally:
            self.cache.forget(touched)
        return rows.scalar()

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
        """A read-only transaction (each statement reads the latest committed state). `for_cache`:
        its results go into the read cache (which notes them for request plans); any other read
        is noted as one that bypassed the cache."""
        if not for_cache:
            note_uncached_read()
        try:
            async with self._driver.read() as conn:
                yield StoreTx(conn)
        except (DatabaseError, IntegrityViolation, OSError) as err:
            raise _unavailable(self.dialect, err) from err
