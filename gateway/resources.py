"""Cedar resources for a request, built from its path, query and (for some operations) its body.

Grants live in namespace properties, so a resource carries the properties of its whole namespace
chain, read in one query. A body needed to name the resource (creates, renames, transactions) is
parsed here; a body that does not name one is a 400 before any decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from catalog.errors import InvalidRequestError
from catalog.identifiers import SEPARATOR, Identifier, Namespace
from catalog.namespaces import read_many
from gateway.authn.api_keys import ApiKeyError
from gateway.authz import entities
from gateway.authz.context import ChangeSummary
from gateway.authz.entities import Resource
from gateway.authz.operations import ActionGroup, OperationSpec, Scope
from gateway.security import Security
from gateway.services import Services

_CREATE_NAMED_BY_BODY = frozenset({"createTable", "registerTable", "createView", "registerView"})
_COMMITS = frozenset({"updateTable", "replaceView"})
# Reads may be decided on grants up to `cache.registry_ttl_seconds` old (when changed by another
# process); everything else on the database's.
_NO_PROPERTIES: dict[str, str] = {}  # one object, so the resource memo recognises "absent"
_CACHED_GROUPS = frozenset({ActionGroup.READ, ActionGroup.OPERATE})


@dataclass(frozen=True, slots=True)
class RequestResources:
    resource: Resource | None = None
    target: Resource | None = None
    tables: Sequence[tuple[Resource, ChangeSummary]] = ()
    changes: ChangeSummary = field(default_factory=ChangeSummary)


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        document = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        raise InvalidRequestError("request body is not valid JSON") from None
    if not isinstance(document, dict):
        raise InvalidRequestError("request body must be a JSON object")
    return document


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


def _identifier(document: Any) -> Identifier:
    return Identifier.from_json(document)


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
        if spec.operation == "createNamespace":
            namespace = Namespace.of((await _body(request)).get("namespace"))
        else:
            namespace = Namespace.parse(match["namespace"])
        return RequestResources(await namespace_of(services, warehouse, namespace, fresh))
    # tables and views
    if spec.operation == "commitTransaction":
        changes = (await _body(request)).get("table-changes")
        if not isinstance(changes, list) or not changes:
            raise InvalidRequestError("table-changes must be a non-empty list")
        tables = []
        for change in changes:
            if not isinstance(change, dict):
                raise InvalidRequestError("every table change must be an object")
            summary = ChangeSummary.of_commit(change.get("updates") or [], change.get("requirements") or [])
            tables.append(
                (
                    await object_of(services, warehouse, _identifier(change.get("identifier")), False, fresh),
                    summary,
                )
            )
        return RequestResources(tables=tables)
    if spec.operation in ("renameTable", "renameView"):
        body = await _body(request)
        source = await object_of(services, warehouse, _identifier(body.get("source")), view, fresh)
        target = await object_of(services, warehouse, _identifier(body.get("destination")), view, fresh)
        return RequestResources(source, target)
    namespace = Namespace.parse(match["namespace"])
    if spec.operation in _CREATE_NAMED_BY_BODY:
        identifier = Identifier.of(namespace, (await _body(request)).get("name"))
    else:
        identifier = Identifier.of(namespace, match["view" if view else "table"])
    resource = await object_of(services, warehouse, identifier, view, fresh)
    if spec.operation in _COMMITS:
        body = await _body(request)
        summary = ChangeSummary.of_commit(body.get("updates") or [], body.get("requirements") or [])
        return RequestResources(resource, changes=summary)
    return RequestResources(resource)


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
