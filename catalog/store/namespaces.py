"""Rows of `namespaces` (see `catalog.store.schema.namespaces`): a namespace's name, parent and
properties, per warehouse.

A namespace is deleted only when it holds no namespace and no table or view; the foreign keys
of the schema hold the same rule against a concurrent insert.
"""

from __future__ import annotations

from functools import lru_cache

import orjson
from sqlalchemy import bindparam as param
from sqlalchemy import delete, func, insert, select, update

from cedarberg.catalog.errors import AlreadyExistsError, NamespaceNotEmptyError, NoSuchNamespaceError
from cedarberg.catalog.store.driver import IntegrityViolation
from cedarberg.catalog.store.schema import catalog_objects, namespaces
from cedarberg.catalog.store.statements import LIMIT, Sql, in_list, in_params, values_of
from cedarberg.catalog.store.tx import StoreTx, now_ms

_ns = namespaces.c
_obj = catalog_objects.c
_ns_key = (_ns.warehouse == param("warehouse"), _ns.name == param("name"))

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
        select(_ns.name, _ns.properties).where(
            _ns.warehouse == param("warehouse"), in_list(_ns.name, "n", count)
        )
    )


@lru_cache(maxsize=4)
def _list_namespaces(top_level: bool, paged: bool) -> Sql:
    query = select(_ns.name).where(_ns.warehouse == param("warehouse"))
    query = query.where(_ns.parent.is_(None) if top_level else _ns.parent == param("parent"))
    if paged:
        query = query.where(_ns.name > param("after"))
    return Sql(query.order_by(_ns.name).limit(LIMIT))


async def get_namespace(
    tx: StoreTx, warehouse: str, name: str, for_update: bool = False
) -> dict[str, str] | None:
    """A namespace's properties, None if it does not exist (`for_update`: locked until `tx`
    ends, on PostgreSQL)."""
    query = _GET_NAMESPACE_FOR_UPDATE if for_update else _GET_NAMESPACE
    row = (await tx.connection.execute(query, {"warehouse": warehouse, "name": name})).first()
    return None if row is None else dict(orjson.loads(row.properties))


async def namespace_properties(tx: StoreTx, warehouse: str, names: list[str]) -> dict[str, dict[str, str]]:
    """Properties of the named namespaces that exist (one query, for a namespace chain)."""
    if not names:
        return {}
    unique = list(dict.fromkeys(names))
    rows = await tx.connection.execute(
        _namespace_properties(len(unique)), {"warehouse": warehouse, **in_params("n", unique)}
    )
    return {row.name: dict(orjson.loads(row.properties)) for row in rows}


async def list_namespaces(
    tx: StoreTx, warehouse: str, parent: str | None, after: str | None, limit: int
) -> list[str]:
    """Up to `limit` namespaces directly under `parent` (None: top level), by name, after `after`."""
    rows = await tx.connection.execute(
        _list_namespaces(parent is None, after is not None),
        {"warehouse": warehouse, "parent": parent, "after": after, "limit": limit},
    )
    return [row.name for row in rows]


async def insert_namespace(
    tx: StoreTx, warehouse: str, name: str, parent: str | None, properties: dict[str, str]
) -> None:
    """Create a namespace. Raises NoSuchNamespaceError (no parent) or AlreadyExistsError."""
    tx.touched.namespaces.add((warehouse, name))
    try:
        await tx.connection.execute(
            _INSERT_NAMESPACE,
            {
                "warehouse": warehouse,
                "name": name,
                "parent": parent,
                "properties": orjson.dumps(properties).decode(),
                "created_at_ms": now_ms(),
            },
        )
    except IntegrityViolation as err:
        if err.foreign_key:
            raise NoSuchNamespaceError("parent namespace does not exist") from None
        raise AlreadyExistsError("namespace already exists") from None


async def set_namespace_properties(
    tx: StoreTx, warehouse: str, name: str, properties: dict[str, str]
) -> None:
    """Replace a namespace's properties."""
    tx.touched.namespaces.add((warehouse, name))
    await tx.connection.execute(
        _SET_NAMESPACE_PROPERTIES,
        {"warehouse": warehouse, "name": name, "properties": orjson.dumps(properties).decode()},
    )


async def delete_namespace(tx: StoreTx, warehouse: str, name: str) -> bool:
    """Delete an empty namespace; False if absent. Raises NamespaceNotEmptyError."""
    tx.touched.namespaces.add((warehouse, name))
    key = {"warehouse": warehouse, "name": name}
    children = await tx.connection.execute(_COUNT_CHILDREN, key)
    objects = await tx.connection.execute(_COUNT_OBJECTS_IN, key)
    if children.scalar_one() or objects.scalar_one():
        raise NamespaceNotEmptyError("namespace is not empty")
    try:
        result = await tx.connection.execute(_DELETE_NAMESPACE, key)
    except IntegrityViolation:
        raise NamespaceNotEmptyError("namespace is not empty") from None
    return bool(result.rowcount)
