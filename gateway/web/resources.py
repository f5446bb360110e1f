"""Cedar resources for a request, built from its path, query and (for some operations) its body.

Grants live in namespace properties, so a resource carries the properties of its whole namespace
chain, read in one query. A body that names the resource (creates, renames, transactions) is the
one the pipeline parsed before authorization (`gateway.web.http.parsed_body`), the same objects the
handler then applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel

from cedarberg.catalog import requests as req
from cedarberg.catalog.identifiers import SEPARATOR, Identifier, Namespace
from cedarberg.catalog.lookups import read_many
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.gateway.authn.api_keys import ApiKeyError
from cedarberg.gateway.authz import naming
from cedarberg.gateway.authz.context import ChangeSummary
from cedarberg.gateway.authz.entities import EntityType, Resource
from cedarberg.gateway.authz.naming import ResourceName, StatedGrants
from cedarberg.gateway.authz.operations import ActionGroup, OperationSpec, Scope, Source
from cedarberg.gateway.web import http
from cedarberg.gateway.web.bodies import body_model

if TYPE_CHECKING:  # annotations only: the security and services are passed in
    from cedarberg.gateway.web.security import Security
    from cedarberg.gateway.web.services import Services

# Reads may be decided on grants up to `cache.registry_ttl_seconds` old (when changed by another
# process); everything else on the database's.
_NO_PROPERTIES: dict[str, str] = {}  # one object, so the resource memo recognises "absent"
_CACHED_GROUPS = frozenset({ActionGroup.READ, ActionGroup.OPERATE, ActionGroup.CONSOLE})
# Commits whose every write is decided again, on its own action, by the effect gate on the grants
# the catalog reads from the database with the pointer it plans on (EFFECT_CHECKS: the operation's
# action for an existing object and for one it creates). Their request-level decision may use the
# cached grants like a read: what it lets happen before the gate (reading the pointer and the
# metadata, answering a commit that changes nothing) is what a read decided on the same grants
# does, and nothing is written that the database's grants do not allow. Registrations are not
# among them: they open a file the caller names, which must be decided on the database's grants.
_REDECIDED_BY_THE_GATE = frozenset({"updateTable", "commitTransaction", "replaceView"})


@dataclass(frozen=True, slots=True)
class RequestResources:
    resource: Resource | None = None
    target: Resource | None = None
    tables: Sequence[Resource] = ()
    changes: ChangeSummary = field(default_factory=ChangeSummary)


@dataclass(frozen=True, slots=True)
class _Names:
    """What a request names, before grants: the resource, a rename's target, a transaction's tables."""

    resource: ResourceName | None = None
    target: ResourceName | None = None
    tables: Sequence[ResourceName] = ()


@dataclass(frozen=True, slots=True)
class ChainRead:
    """The properties of one namespace chain (top level first, None where a namespace does not
    exist), read from the database in this request by the catalog (`Effect.namespaces_read`):
    as fresh as the gate's own read, so the gate decides on them without reading again."""

    warehouse: str
    levels: tuple[str, ...]
    chain: Sequence[Mapping[str, str] | None]

    def matches(self, warehouse: str, levels: tuple[str, ...]) -> bool:
        return warehouse == self.warehouse and levels == self.levels and len(self.chain) == len(levels)


class RegistryGrants:
    """The registry's grants: namespace properties read from the store (through its short-lived
    read cache unless `fresh`), resources reused through the resource memo while those are.
    `stated` properties (an access review's "what if", never a request's) replace the registry's
    value of the same key on the same namespace (`StatedGrants.over`)."""

    def __init__(
        self,
        services: Services,
        fresh: bool,
        stated: StatedGrants | None = None,
        created: tuple[str, ...] | None = None,
        read: ChainRead | None = None,
    ) -> None:
        self._services = services
        self._fresh = fresh
        self._stated = stated
        self._created = created  # the levels of a namespace the request creates: no grants yet
        self._read = read  # one chain's properties read from the database in the request

    def warehouse(self, warehouse: str) -> Resource:
        if self._stated is not None:
            return self._stated.warehouse(warehouse)
        return self._services.resources.warehouse(warehouse)

    async def namespace(self, warehouse: str, levels: tuple[str, ...]) -> Resource:
        if levels == self._created:
            # The namespace the request creates is decided as what the create writes: a new
            # namespace under its parents' grants (one that exists already is a 409 in the
            # transaction, whatever its own properties say).
            parents = await _chain(self._services, warehouse, levels[:-1], self._fresh)
            chain = [*parents, _NO_PROPERTIES]
        elif self._read is not None and self._read.matches(warehouse, levels):
            chain = [dict(found) if found else _NO_PROPERTIES for found in self._read.chain]
        else:
            chain = await _chain(self._services, warehouse, levels, self._fresh)
        if self._stated is not None:
            return await self._stated.over(chain).namespace(warehouse, levels)
        return self._services.resources.namespace(warehouse, levels, chain)

    def child(self, parent: Resource, name: str, view: bool) -> Resource:
        return self._services.resources.child(parent, name, view)


def _warehouse(request: web.Request, services: Services) -> str:
    """The warehouse of the path's prefix (the default one without a prefix), resolved as every
    handler resolves it (`CatalogContext.warehouse`): an unknown prefix is a 404, never a decision
    on a warehouse that does not exist."""
    return services.ctx.warehouse(http.prefix(request)).name


async def _chain(
    services: Services, warehouse: str, levels: tuple[str, ...], fresh: bool
) -> list[dict[str, str]]:
    keys = [SEPARATOR.join(levels[: i + 1]) for i in range(len(levels))]
    if not keys:
        return []
    if not fresh:
        return [found or _NO_PROPERTIES for found in await read_many(services.ctx.store, warehouse, keys)]
    async with services.ctx.store.read() as tx:
        read = await namespace_rows.namespace_properties(tx, warehouse, keys)
    return [read.get(key) or _NO_PROPERTIES for key in keys]


async def namespace_of(
    services: Services, warehouse: str, namespace: Namespace, fresh: bool = False
) -> Resource:
    """The namespace's resource with the grants of its chain. Reads may use the registry's
    short-lived read cache; mutations pass `fresh` and are decided on the database's grants (fresh
    dicts, so the resource memo builds their resource anew)."""
    name = ResourceName(EntityType.NAMESPACE, warehouse, namespace.levels)
    return await naming.build(name, RegistryGrants(services, fresh))


async def object_of(
    services: Services, warehouse: str, identifier: Identifier, view: bool, fresh: bool = False
) -> Resource:
    """The table's (or view's) resource with the grants of its namespace chain (see `namespace_of`)."""
    name = _object(identifier, view, warehouse)
    return await naming.build(name, RegistryGrants(services, fresh))


async def object_on_read(services: Services, read: ChainRead, identifier: Identifier, view: bool) -> Resource:
    """`object_of` with the grants of `read`, the chain's properties as the catalog read them from
    the database in this request (with the version it planned on); read again if `read` is not
    this object's chain."""
    name = _object(identifier, view, read.warehouse)
    return await naming.build(name, RegistryGrants(services, True, read=read))


def _object(identifier: Identifier, view: bool, warehouse: str) -> ResourceName:
    kind = EntityType.VIEW if view else EntityType.TABLE
    return ResourceName(kind, warehouse, identifier.namespace.levels, identifier.name)


async def build(
    request: web.Request, spec: OperationSpec, services: Services, security: Security
) -> RequestResources:
    """The resources `spec` is decided on, named by the request as the operation table's `naming`
    says and built with the registry's grants (`gateway.authz.naming.build`). Raises
    InvalidRequestError for unusable input, NoSuchWarehouseError for a warehouse that does not
    exist (nothing is decided then)."""
    names = await _names(request, spec, services, security)
    changes = _changes(request, spec)
    created = None
    if spec.creates and names.resource is not None and names.resource.kind is EntityType.NAMESPACE:
        created = names.resource.namespace
    cached = spec.group in _CACHED_GROUPS or spec.operation in _REDECIDED_BY_THE_GATE
    grants = RegistryGrants(services, fresh=not cached, created=created)
    return RequestResources(
        resource=None if names.resource is None else await naming.build(names.resource, grants),
        target=None if names.target is None else await naming.build(names.target, grants),
        tables=[await naming.build(table, grants) for table in names.tables],
        changes=changes,
    )


def _body(request: web.Request, spec: OperationSpec) -> BaseModel:
    return http.parsed_body(request, body_model(spec))


def _identifier(value: object) -> Identifier:
    if not isinstance(value, req.TableIdentifierModel):
        raise TypeError(f"not a table identifier field: {type(value).__name__}")
    return value.identifier()


async def _names(request: web.Request, spec: OperationSpec, services: Services, security: Security) -> _Names:
    """What the request names, read where `spec.naming` says, resolved to the canonical objects its
    handler acts on. Raises NoSuchWarehouseError for a warehouse that does not exist."""
    how, view = spec.naming, spec.scope is Scope.VIEW
    if how.source is Source.SCOPE:
        return _Names(ResourceName(EntityType.CATALOG))
    warehouse = _warehouse(request, services)
    if how.source is Source.QUERY:
        value = http.query_value(request, how.field)
        if not value:
            return _Names(ResourceName(EntityType.WAREHOUSE, warehouse))
        if spec.scope is Scope.WAREHOUSE:
            # Named by name or by location: decided on the warehouse the handler will answer for.
            return _Names(ResourceName(EntityType.WAREHOUSE, services.ctx.find_warehouse(value).name))
        return _Names(ResourceName(EntityType.NAMESPACE, warehouse, Namespace.parse(value).levels))
    if how.source is Source.PATH:
        value = request.match_info[how.field]
        if spec.scope is Scope.API_KEY:
            return _Names(
                ResourceName(EntityType.API_KEY, name=value, owner=await _key_owner(security, value))
            )
        if spec.scope is Scope.NAMESPACE:
            return _Names(ResourceName(EntityType.NAMESPACE, warehouse, Namespace.parse(value).levels))
        identifier = Identifier.of(Namespace.parse(request.match_info["namespace"]), value)
        return _Names(_object(identifier, view, warehouse))
    if how.source is Source.BODY_TABLES:
        body = _body(request, spec)
        if not isinstance(body, req.CommitTransactionRequest):
            raise TypeError(f"{spec.operation}: not a transaction body: {type(body).__name__}")
        return _Names(tables=[_object(i, False, warehouse) for i, _change in body.changes_by_table()])
    if how.source is Source.BODY_IDENTIFIER:
        body = _body(request, spec)
        source = _object(_identifier(getattr(body, how.field)), view, warehouse)
        return _Names(source, _object(_identifier(getattr(body, how.target)), view, warehouse))
    if how.source is Source.BODY_NAME:
        namespace = Namespace.parse(request.match_info["namespace"])
        return _Names(
            _object(Identifier.of(namespace, getattr(_body(request, spec), how.field)), view, warehouse)
        )
    levels = Namespace.of(getattr(_body(request, spec), how.field)).levels  # Source.BODY_NAMESPACE
    return _Names(ResourceName(EntityType.NAMESPACE, warehouse, levels))


async def _key_owner(security: Security, key_id: str) -> str:
    try:
        return (await security.api_keys.get_key(key_id)).principal_id
    except ApiKeyError:  # an unknown or malformed id: the handler answers 404 once authorized
        return ""


def _changes(request: web.Request, spec: OperationSpec) -> ChangeSummary:
    """The property keys the request sets and removes, from the body fields `spec.changes` names."""
    if not spec.changes:
        return ChangeSummary()
    body = _body(request, spec)
    return ChangeSummary.of_properties(*(getattr(body, name) for name in spec.changes))


async def visible_children(
    request: web.Request, spec: OperationSpec, services: Services, document: dict[str, Any]
) -> list[Resource]:
    """Resources for the entries of a listing response, in order."""
    warehouse = _warehouse(request, services)
    if spec.operation == "listNamespaces":
        levels = [tuple(item) for item in document.get("namespaces", [])]
        keys = [SEPARATOR.join(item) for item in levels]
        own = dict(zip(keys, await read_many(services.ctx.store, warehouse, keys), strict=True))
        parent_param = http.query_value(request, "parent")
        parent = (
            await namespace_of(services, warehouse, Namespace.parse(parent_param))
            if parent_param
            else services.resources.warehouse(warehouse)
        )
        return [
            services.resources.child_namespace(parent, item[-1], own[key] or _NO_PROPERTIES)
            for item, key in zip(levels, keys, strict=True)
        ]
    namespace = await namespace_of(services, warehouse, Namespace.parse(request.match_info["namespace"]))
    view = spec.operation == "listViews"
    return [
        services.resources.child(namespace, item["name"], view) for item in document.get("identifiers", [])
    ]
