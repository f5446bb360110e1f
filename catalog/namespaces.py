"""Namespace operations: list, create, load, exists, drop (only when empty), properties."""

from __future__ import annotations

from cedarberg.catalog import confinement, documents, locations, roots
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.errors import (
    AlreadyExistsError,
    CatalogError,
    InvalidRequestError,
    NoSuchNamespaceError,
    UnprocessableError,
)
from cedarberg.catalog.idempotency import Body, Recorder
from cedarberg.catalog.identifiers import Namespace
from cedarberg.catalog.lookups import read_namespace, require_namespace
from cedarberg.catalog.pagination import PageRequest, Scope, fetch_page
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import server_writes

LOCATION_PROPERTY = "location"


def _check_location_property(warehouse: Warehouse, properties: dict[str, str]) -> None:
    if LOCATION_PROPERTY in properties:
        locations.require_within(properties[LOCATION_PROPERTY], warehouse.location, "namespace location")


class NamespaceService:
    def __init__(self, ctx: CatalogContext) -> None:
        self._ctx = ctx

    async def list_namespaces(
        self, warehouse_name: str | None, parent: Namespace | None, page: PageRequest
    ) -> bytes:
        warehouse = self._ctx.warehouse(warehouse_name)
        store = self._ctx.store
        if parent is not None:
            await read_namespace(store, warehouse.name, parent)
        parent_key = None if parent is None else parent.key

        async def fetch(after: str | None, limit: int) -> list[str]:
            key = store.cache.listing_key(("namespaces", warehouse.name), parent_key, after, limit)
            return await store.cached(
                key, lambda tx: namespace_rows.list_namespaces(tx, warehouse.name, parent_key, after, limit)
            )

        result = await fetch_page(
            page, fetch, self._ctx.page_key, Scope(warehouse.name, "namespaces", parent_key or "")
        )
        return documents.dumps(
            {
                "namespaces": [Namespace.parse(key).levels for key in result.items],
                "next-page-token": result.next_token,
            }
        )

    async def create(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        properties: dict[str, str],
        rec: Recorder | None,
    ) -> Body:
        """Create a namespace and record its directory. Raises InvalidRequestError (a name
        reserved for object directories, a missing parent, a `location` outside the warehouse),
        AlreadyExistsError, and LocationNotAllowedError (its directory lies inside an object's roots)."""
        warehouse = self._ctx.warehouse(warehouse_name)
        # Only the new level: the levels above name namespaces that exist already (a parent must),
        # judged when they were created.
        roots.check_namespace_name(namespace.levels[-1])
        _check_location_property(warehouse, properties)
        body = documents.dumps({"namespace": namespace.levels, "properties": properties})
        parent = namespace.parent_key if len(namespace.levels) > 1 else None
        if self._ctx.store.writes_alone and await self._create_alone(
            warehouse, namespace, properties, rec, body
        ):
            return body
        async with self._ctx.store.write() as tx:
            try:
                await namespace_rows.insert_namespace(tx, warehouse.name, namespace.key, parent, properties)
            except NoSuchNamespaceError:
                # A missing parent is a 400, not a 404: the spec lists no 404 for createNamespace.
                # The reference (Java's CatalogHandlers over InMemoryCatalog / JdbcCatalog) instead
                # creates the child with no parent at all (namespaces there are mere prefixes). Here
                # the namespace tree is what policies, confinement and listings hang off, and
                # creating the missing ancestors implicitly would create namespaces the caller was
                # never authorized to create, so the parent must be created first.
                raise InvalidRequestError(
                    f"cannot create namespace {namespace}: its parent namespace does not exist "
                    "(create the parent first)"
                ) from None
            except AlreadyExistsError:
                raise AlreadyExistsError(f"Namespace already exists: {namespace}") from None
            await confinement.record_namespace(tx, warehouse, namespace, properties, new=True)
            if rec is not None:
                await rec.record(tx, body)
        return body

    async def _create_alone(
        self,
        warehouse: Warehouse,
        namespace: Namespace,
        properties: dict[str, str],
        rec: Recorder | None,
        body: Body,
    ) -> bool:
        """`create`'s write in one statement (catalog.store.server_writes): True if it landed.
        False (nothing written) when the name is taken, the parent is missing or the directory
        may lie inside an object's roots: `create`'s transaction decides then, and words it."""
        try:
            directory = roots.namespace_directory(warehouse.location, namespace, properties)
        except CatalogError:
            return False
        parent = namespace.parent_key if len(namespace.levels) > 1 else None
        new = server_writes.NewNamespace(warehouse.name, namespace.key, parent, properties, directory)
        pending = None if rec is None else rec.pending(body)
        if (
            await server_writes.insert_namespace(self._ctx.store, new, pending)
            is not server_writes.Outcome.DONE
        ):
            return False
        if rec is not None:
            rec.recorded = True
        return True

    async def load(self, warehouse_name: str | None, namespace: Namespace) -> bytes:
        warehouse = self._ctx.warehouse(warehouse_name)
        properties = await read_namespace(self._ctx.store, warehouse.name, namespace)
        return documents.dumps({"namespace": namespace.levels, "properties": properties})

    async def exists(self, warehouse_name: str | None, namespace: Namespace) -> None:
        """Returns if the namespace exists. Raises NoSuchNamespaceError."""
        await self.load(warehouse_name, namespace)

    async def drop(self, warehouse_name: str | None, namespace: Namespace, rec: Recorder | None) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)
        async with self._ctx.store.write() as tx:
            if not await namespace_rows.delete_namespace(tx, warehouse.name, namespace.key):
                raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
            await confinement.forget_namespace(tx, warehouse, namespace)
            if rec is not None:
                await rec.record(tx, None)
        return None

    async def update_properties(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        removals: list[str],
        updates: dict[str, str],
        rec: Recorder | None,
    ) -> Body:
        warehouse = self._ctx.warehouse(warehouse_name)
        both = sorted(set(removals) & set(updates))
        if both:
            raise UnprocessableError(f"keys both removed and updated: {', '.join(both)}")
        _check_location_property(warehouse, updates)
        async with self._ctx.store.write() as tx:
            current = await require_namespace(tx, warehouse.name, namespace, for_update=True)
            removed = [key for key in removals if key in current]
            missing = [key for key in removals if key not in current]
            merged = {key: value for key, value in current.items() if key not in removals} | updates
            await namespace_rows.set_namespace_properties(tx, warehouse.name, namespace.key, merged)
            await confinement.record_namespace(tx, warehouse, namespace, merged)
            body = documents.dumps({"updated": sorted(updates), "removed": removed, "missing": missing})
            if rec is not None:
                await rec.record(tx, body)
        return body
