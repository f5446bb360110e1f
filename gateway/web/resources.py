"""Cedar resources for a request, built from its path, query and (for some operations) its body.

Grants live in namespace properties, so a resource carries the properties of its whole namespace
chain, read in one query. A body that names the resource (creates, renames, transactions) is the
one the pipeline parsed before authorization (`gateway.web.http.parsed_body`), the same objects the
handler then applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from catalog import requests as req
from catalog.identifiers import SEPARATOR, Identifier, Namespace
from catalog.namespaces import read_many
from gateway.authn.api_keys import ApiKeyError
from gateway.authz import entities
from gateway.authz.context import ChangeSummary
from gateway.authz.entities import Resource
from gateway.authz.operations import ActionGroup, OperationSpec, Scope
from gateway.web import http

if TYPE_CHECKING:  # annotations only: the security and services are passed in
    from gateway.web.security import Security
    from gateway.web.services import Services

_CREATE_NAMED_BY_BODY: dict[str, type[req.NamedRequest]] = {
    "createTable": req.CreateTableRequest,
    "registerTable": req.RegisterTableRequest,
    "createView": req.CreateViewRequest,
    "registerView": req.RegisterViewRequest,
}
# Reads may be decided on grants up to `cache.registry_ttl_seconds` old (when changed by another
# process); everything else on the database's.
_NO_PROPERTIES: dict[str, str] = {}  # one object, so the resource memo recognises "absent"
_CACHED_GROUPS = frozenset({ActionGroup.READ, ActionGroup.OPERATE})


@dataclass(frozen=True, slots=True)
class RequestResources:
    resource: Resource | None = None
    target: Resource | None = None
    tables: Sequence[Resource] = ()
    changes: ChangeSummary = field(default_factory=ChangeSummary)


def _warehouse(request: web.Request, services: Services) -> str:
    return request.match_info.get("prefix") or services.ctx.default_warehouse


async def _chain(
    services: Services, warehouse: str, namespace: Namespace, fresh: bool
) -> list[dict[str, str]]:
    keys = [SEPARATOR.join(namespace.levels[: i + 1]) for i in range(len(namespace.levels))]
    if not fresh:
        return [found or _NO_PROPERTIES for found in await read_many(services.ctx.store, warehouse, keys)]
    async with services.ctx.store.read() as tx:
        read = await tx.namespace_properties(warehouse, keys)
    return [read.get(key) or _NO_PROPERTIES for key in keys]


async def namespace_of(
    services: Services, warehouse: str, namespace: Namespace, fresh: bool = False
) -> Resource:
    """The namespace's resource with the grants of its chain. Reads may use the registry's
    short-lived read cache; mutations pass `fresh` and are decided on the database's grants (fresh
    dicts, so the resource memo builds their resource anew)."""
    chain = await _chain(services, warehouse, namespace, fresh)
    return services.resources.namespace(warehouse, namespace.levels, chain)


async def object_of(
    services: Services, warehouse: str, identifier: Identifier, view: bool, fresh: bool = False
) -> Resource:
    parent = await namespace_of(services, warehouse, identifier.namespace, fresh)
    return services.resources.child(parent, identifier.name, view)


async def build(
    request: web.Request, spec: OperationSpec, services: Services, security: Security
) -> RequestResources:
    """The resources `spec` is decided on. Raises InvalidRequestError for unusable input."""
    warehouse = _warehouse(request, services)
    match = request.match_info
    view = spec.scope is Scope.VIEW
    fresh = spec.group not in _CACHED_GROUPS
    if spec.scope is Scope.CATALOG:
        return RequestResources(entities.catalog_resource())
    if spec.scope is Scope.API_KEY:
        key_id = match["key_id"]
        try:
            owner = (await security.api_keys.get_key(key_id)).principal_id
        except ApiKeyError:  # an unknown or malformed id: the handler answers 404 once authorized
            owner = ""
        return RequestResources(entities.api_key_resource(key_id, owner))
    if spec.scope is Scope.WAREHOUSE:
        return RequestResources(entities.warehouse_resource(request.query.get("warehouse") or warehouse))
    if spec.scope is Scope.CONTAINER:
        parent = request.query.get("parent")
        if parent:
            return RequestResources(await namespace_of(services, warehouse, Namespace.parse(parent), fresh))
        return RequestResources(entities.warehouse_resource(warehouse))
    if spec.scope is Scope.NAMESPACE:
        return await _namespace_resources(request, spec, services, warehouse, fresh)
    # tables and views
    if spec.operation == "commitTransaction":
        body = http.parsed_body(request, req.CommitTransactionRequest)
        return RequestResources(
            tables=[
                await object_of(services, warehouse, identifier, False, fresh)
                for identifier, _change in body.changes_by_table()
            ]
        )
    if spec.operation in ("renameTable", "renameView"):
        rename = http.parsed_body(request, req.RenameRequest)
        source = await object_of(services, warehouse, rename.source.identifier(), view, fresh)
        target = await object_of(services, warehouse, rename.destination.identifier(), view, fresh)
        return RequestResources(source, target)
    namespace = Namespace.parse(match["namespace"])
    named_by = _CREATE_NAMED_BY_BODY.get(spec.operation)
    if named_by is not None:
        identifier = Identifier.of(namespace, http.parsed_body(request, named_by).name)
    else:
        identifier = Identifier.of(namespace, match["view" if view else "table"])
    return RequestResources(await object_of(services, warehouse, identifier, view, fresh))


async def _namespace_resources(
    request: web.Request, spec: OperationSpec, services: Services, warehouse: str, fresh: bool
) -> RequestResources:
    """A namespace operation's resource; property changes name the keys of the parsed request."""
    changes = ChangeSummary()
    if spec.operation == "createNamespace":
        created = http.parsed_body(request, req.CreateNamespaceRequest)
        namespace = Namespace.of(created.namespace)
        changes = ChangeSummary.of_properties(created.properties)
    else:
        namespace = Namespace.parse(request.match_info["namespace"])
        if spec.operation == "updateProperties":
            update = http.parsed_body(request, req.UpdateNamespacePropertiesRequest)
            changes = ChangeSummary.of_properties(update.updates, update.removals)
    return RequestResources(await namespace_of(services, warehouse, namespace, fresh), changes=changes)


async def visible_children(
    request: web.Request, spec: OperationSpec, services: Services, document: dict[str, Any]
) -> list[Resource]:
    """Resources for the entries of a listing response, in order."""
    warehouse = _warehouse(request, services)
    if spec.operation == "listNamespaces":
        levels = [tuple(item) for item in document.get("namespaces", [])]
        keys = [SEPARATOR.join(item) for item in levels]
        own = dict(zip(keys, await read_many(services.ctx.store, warehouse, keys), strict=True))
        parent_param = request.query.get("parent")
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
