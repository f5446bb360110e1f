"""Rows of `catalog_objects` (see `catalog.store.schema.catalog_objects`): the pointer of each
table and view to its current metadata file, with the sealed metadata and the wrapped data key.

Invariant: a pointer changes only through `swap_object`, an `UPDATE ... WHERE
metadata_location = :expected AND wrapped_key = :expected_key` whose row count tells whether the
swap won (compare-and-swap), or, on PostgreSQL, the same UPDATE inside one statement
(catalog.store.server_writes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import orjson
from sqlalchemy import BigInteger, and_, delete, insert, select, update
from sqlalchemy import bindparam as param

from cedarberg.catalog.errors import AlreadyExistsError, NoSuchNamespaceError
from cedarberg.catalog.store.driver import IntegrityViolation
from cedarberg.catalog.store.schema import catalog_objects, namespaces
from cedarberg.catalog.store.statements import LIMIT, Sql, values_of
from cedarberg.catalog.store.tx import StoreTx, now_ms
from cedarberg.kms.keys import WrappedKey


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


OBJECT_FIELDS = tuple(ObjectRow.__dataclass_fields__)  # the columns an ObjectRow is read from
_obj = catalog_objects.c
_ns = namespaces.c
_OBJECT_COLUMNS = [_obj[name] for name in OBJECT_FIELDS]
_obj_key = (
    _obj.warehouse == param("warehouse"),
    _obj.namespace == param("namespace"),
    _obj.name == param("name"),
)

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
    insert(catalog_objects).values(values_of(catalog_objects, *OBJECT_FIELDS, "updated_at_ms"))
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
    return Sql(query.order_by(_obj.name).limit(LIMIT))


@lru_cache(maxsize=4)
def _delete_object(expecting: bool) -> Sql:
    query = delete(catalog_objects).where(*_obj_key, _obj.kind == param("kind"))
    if expecting:
        query = query.where(_obj.metadata_location == param("expected"))
    return Sql(query)


async def get_object(tx: StoreTx, warehouse: str, namespace: str, name: str) -> ObjectRow | None:
    """The pointer `name` in a namespace, None if there is none."""
    row = (
        await tx.connection.execute(
            _GET_OBJECT, {"warehouse": warehouse, "namespace": namespace, "name": name}
        )
    ).first()
    return None if row is None else ObjectRow(*row)


async def get_object_in_namespace(
    tx: StoreTx, warehouse: str, namespace: str, name: str
) -> tuple[dict[str, str], ObjectRow | None] | None:
    """`get_namespace` and `get_object` in one statement (one round trip on PostgreSQL): the
    namespace's properties and the pointer `name` in it (None: no such object); None if the
    namespace does not exist."""
    found = (
        await tx.connection.execute(
            _OBJECT_IN_NAMESPACE, {"warehouse": warehouse, "namespace": namespace, "name": name}
        )
    ).first()
    if found is None:
        return None
    properties = dict(orjson.loads(found.ns_properties))
    return properties, None if found.uuid is None else ObjectRow(*found[1:])


async def list_objects(
    tx: StoreTx, warehouse: str, namespace: str, kind: str, after: str | None, limit: int
) -> list[str]:
    """Up to `limit` names of one kind (table or view) in a namespace, by name, after `after`."""
    rows = await tx.connection.execute(
        _list_objects(after is not None),
        {"warehouse": warehouse, "namespace": namespace, "kind": kind, "after": after, "limit": limit},
    )
    return [row.name for row in rows]


async def object_locations(tx: StoreTx, warehouse: str) -> list[tuple[str, str, str]]:
    """(namespace, name, metadata_location) of every object in a warehouse."""
    rows = await tx.connection.execute(_OBJECT_LOCATIONS, {"warehouse": warehouse})
    return [(row.namespace, row.name, row.metadata_location) for row in rows]


async def insert_object(tx: StoreTx, row: ObjectRow) -> None:
    """Insert a new pointer. Raises AlreadyExistsError or NoSuchNamespaceError."""
    tx.touched.objects.add((row.warehouse, row.namespace, row.name))
    try:
        await tx.connection.execute(_INSERT_OBJECT, {**asdict(row), "updated_at_ms": now_ms()})
    except IntegrityViolation as err:
        if err.foreign_key:
            raise NoSuchNamespaceError("namespace does not exist") from None
        if "uuid" in err.detail:
            # Two pointers to one table's metadata would let their histories diverge.
            raise AlreadyExistsError(f"a table or view with UUID {row.uuid} is registered already") from None
        raise AlreadyExistsError("a table or view with this name already exists") from None


async def swap_object(tx: StoreTx, base: ObjectRow, new_location: str, new_metadata: bytes) -> bool:
    """Compare-and-swap the pointer `base` was read from; True if it still named
    `base.metadata_location` with `base`'s data key (a file location alone does not name a
    version: a table dropped and its last file registered again has the same one) and now
    moved."""
    version = Version(base.warehouse, base.namespace, base.name, base.metadata_location, base.wrapped_key)
    return await swap_version(tx, version, new_location, new_metadata)


@dataclass(frozen=True, slots=True)
class Version:
    """What names one version of a pointer: its object, metadata file and wrapped data key."""

    warehouse: str
    namespace: str
    name: str
    metadata_location: str
    wrapped_key: bytes


async def swap_version(tx: StoreTx, expected: Version, new_location: str, new_metadata: bytes) -> bool:
    """`swap_object` given only what names the version read."""
    tx.touched.objects.add((expected.warehouse, expected.namespace, expected.name))
    result = await tx.connection.execute(
        _SWAP_OBJECT,
        {
            "warehouse": expected.warehouse,
            "namespace": expected.namespace,
            "name": expected.name,
            "expected": expected.metadata_location,
            "expected_key": expected.wrapped_key,
            "new_location": new_location,
            "new_metadata": new_metadata,
            "now": now_ms(),
        },
    )
    return result.rowcount == 1


async def delete_object(
    tx: StoreTx, warehouse: str, namespace: str, name: str, kind: str, expected_location: str | None = None
) -> bool:
    """Delete a pointer (only if it still names `expected_location`, when given)."""
    tx.touched.objects.add((warehouse, namespace, name))
    result = await tx.connection.execute(
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
    tx: StoreTx, warehouse: str, kind: str, source: tuple[str, str], target: tuple[str, str]
) -> bool:
    """Move a pointer to a new (namespace, name); False if the source is absent.

    Raises AlreadyExistsError if the target name is taken, NoSuchNamespaceError if the target
    namespace is missing.
    """
    tx.touched.objects.update({(warehouse, source[0], source[1]), (warehouse, target[0], target[1])})
    try:
        result = await tx.connection.execute(
            _RENAME_OBJECT,
            {
                "warehouse": warehouse,
                "namespace": source[0],
                "name": source[1],
                "kind": kind,
                "to_namespace": target[0],
                "to_name": target[1],
                "now": now_ms(),
            },
        )
    except IntegrityViolation as err:
        if err.foreign_key:
            raise NoSuchNamespaceError("target namespace does not exist") from None
        raise AlreadyExistsError("a table or view with the target name already exists") from None
    return result.rowcount == 1
