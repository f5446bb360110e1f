"""Reading what a request names: a namespace, a table or a view (the kinds of catalog objects),
in a transaction (`require_*`: for a mutation, compared against the database) or through the
read cache (`read_*`), and the errors that say it is not there or its name is taken.

Every operation module looks names up here, so that none needs another operation module for
its lookups, and every "does not exist" and "already exists" is worded in one place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from cedarberg.catalog.errors import (
    AlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    NotFoundError,
)
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.store import commit_reads
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import roots as root_rows
from cedarberg.catalog.store.cache import RegistryKey
from cedarberg.catalog.store.commit_reads import ObjectInChain
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.tx import StoreTx

TABLE = "table"
VIEW = "view"
_MISSING: dict[str, type[NotFoundError]] = {TABLE: NoSuchTableError, VIEW: NoSuchViewError}


def name_taken(identifier: Identifier, existing_kind: str, wanted_kind: str) -> AlreadyExistsError:
    """The error for creating a `wanted_kind` where an `existing_kind` has the name, worded as
    Iceberg's reference catalog words it (engines show it to people; Iceberg's compatibility kit
    asserts it): "Table already exists: ns.t", "View with same name already exists: ns.v"."""
    if existing_kind == wanted_kind:
        return AlreadyExistsError(f"{existing_kind.capitalize()} already exists: {identifier}")
    return AlreadyExistsError(f"{existing_kind.capitalize()} with same name already exists: {identifier}")


async def require_object(tx: StoreTx, warehouse: str, identifier: Identifier, kind: str) -> ObjectRow:
    """The stored table or view. Raises NoSuchTableError / NoSuchViewError."""
    row = await object_rows.get_object(tx, warehouse, identifier.namespace.key, identifier.name)
    if row is None or row.kind != kind:
        raise _MISSING[kind](f"{kind.capitalize()} does not exist: {identifier}")
    return row


async def read_for_change(store: Store, warehouse: str, identifier: Identifier) -> ObjectInChain | None:
    """What a change to `identifier` plans and is judged on, in one statement from the database
    (never a cache): the object's pointer and the properties of its namespace and every one above
    it (`catalog.store.commit_reads`); None if its namespace does not exist."""
    levels = identifier.namespace.levels
    chain = [Namespace.of(levels[: depth + 1]).key for depth in range(len(levels))]
    async with store.read() as tx:
        return await commit_reads.object_in_chain(tx, warehouse, chain, identifier.name)


async def read_object(store: Store, warehouse: str, identifier: Identifier, kind: str) -> ObjectRow:
    """`require_object` for reads: the registry's row, or its short-lived cached copy (never for
    a mutation, which compares against the database). Raises NoSuchTableError / NoSuchViewError."""
    namespace, name = identifier.namespace.key, identifier.name
    row = await store.cached(
        RegistryKey.object(warehouse, namespace, name),
        lambda tx: object_rows.get_object(tx, warehouse, namespace, name),
    )
    if row is None or row.kind != kind:
        raise _MISSING[kind](f"{kind.capitalize()} does not exist: {identifier}")
    return row


async def check_uuid(tx: StoreTx, uuid: str) -> None:
    """Raise AlreadyExistsError if a live or dropped table or view has this UUID."""
    if await root_rows.uuid_in_use(tx, uuid):
        raise AlreadyExistsError(
            f"a table or view with UUID {uuid} exists or was dropped: undrop it rather than register it"
        )


async def require_namespace(
    tx: StoreTx, warehouse: str, namespace: Namespace, for_update: bool = False
) -> dict[str, str]:
    """The namespace's properties. Raises NoSuchNamespaceError."""
    properties = await namespace_rows.get_namespace(tx, warehouse, namespace.key, for_update)
    if properties is None:
        raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
    return properties


async def read_namespace(store: Store, warehouse: str, namespace: Namespace) -> dict[str, str]:
    """`require_namespace` for reads: the registry's properties or their short-lived cached copy
    (callers must not modify them). Raises NoSuchNamespaceError."""
    properties = await read_properties(store, warehouse, namespace.key)
    if properties is None:
        raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
    return properties


def _properties_of(warehouse: str, name: str) -> Callable[[StoreTx], Awaitable[dict[str, str] | None]]:
    return lambda tx: namespace_rows.get_namespace(tx, warehouse, name)


async def read_properties(store: Store, warehouse: str, name: str) -> dict[str, str] | None:
    """A namespace's properties (None if it does not exist), through the read cache."""
    return await store.cached(RegistryKey.namespace(warehouse, name), _properties_of(warehouse, name))


async def read_many(store: Store, warehouse: str, names: list[str]) -> list[dict[str, str] | None]:
    """Properties of several namespaces (None where one does not exist), in order, through the
    read cache; whatever is not cached is read in one query."""
    cache = store.cache
    found: dict[str, dict[str, str] | None] = {}
    if cache.enabled:
        for name in names:
            key = RegistryKey.namespace(warehouse, name)
            hit, value, stale = cache.lookup_stale(key)
            if hit:
                found[name] = value
                if stale:
                    store.refresh_later(key, _properties_of(warehouse, name))
    missing = [name for name in names if name not in found]
    if missing:
        generation = cache.generation
        async with store.read(for_cache=True) as tx:
            read = await namespace_rows.namespace_properties(tx, warehouse, missing)
        for name in missing:
            found[name] = cache.store(
                RegistryKey.namespace(warehouse, name),
                read.get(name),
                generation,
                _properties_of(warehouse, name),
            )
    return [found[name] for name in names]
