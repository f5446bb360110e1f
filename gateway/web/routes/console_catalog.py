"""The console's Catalog page: warehouses -> namespaces -> tables and views, as the signed-in
principal may see them, and (for those allowed) the soft-deleted objects with undrop.

    GET  /console/                                                      -> /console/catalog
    GET  /console/catalog                                               warehouses   (getConfig, filtered)
    GET  /console/catalog/{warehouse}                                   namespaces   (listNamespaces)
    GET  /console/catalog/{warehouse}/namespaces/{namespace}            a namespace  (loadNamespaceMetadata;
                                                                        listNamespaces, listTables, listViews)
    GET  .../namespaces/{namespace}/tables/{table}                      a table      (loadTable)
    GET  .../namespaces/{namespace}/views/{view}                        a view       (loadView)
    GET  /console/catalog/{warehouse}/dropped                           soft-deleted (listDroppedObjects)
    POST /console/catalog/{warehouse}/dropped/{drop_id}/undrop          undrop       (undropObject, CSRF)

A long listing is paged as the REST API pages it: each listing's page token (the catalog's sealed
token, bound to the caller and the listing, `catalog.pagination`) travels in its own query
parameter (`namespaces`, `tables`, `views`, `dropped`), and a "Next" link carries the next one
while keeping the other listings of the page where they are. A token that does not open for this
listing and caller is a 400, as in the REST API.

Every GET is the operation `useConsole` for the pipeline, then each object shown is decided here
with the REST API's action for the same read (`gateway.web.console.decisions`): listings are
filtered by visibility, and an object the principal may not see answers 404 as if absent. The
undrop form is the admin API's `undropObject`, decided and audited by the pipeline itself. A
namespace in a path is its levels joined by 0x1F and percent-encoded, as in the REST API.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import quote, urlencode

import orjson
from aiohttp import web

from cedarberg.catalog.dropped import list_dropped, undrop
from cedarberg.catalog.identifiers import SEPARATOR, Identifier, Namespace
from cedarberg.catalog.lookups import read_many
from cedarberg.catalog.pagination import PageRequest
from cedarberg.gateway.authz.entities import Resource, catalog_resource
from cedarberg.gateway.authz.scan_grants import read_view
from cedarberg.gateway.web import http, resources
from cedarberg.gateway.web.caller import caller_of
from cedarberg.gateway.web.console import decisions
from cedarberg.gateway.web.console.access_link import access_link
from cedarberg.gateway.web.console.layout import page
from cedarberg.gateway.web.console.metadata_view import table_summary, view_summary, when
from cedarberg.gateway.web.console.pages import see_other
from cedarberg.gateway.web.keys import security, services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.services import Services, mutate

CATALOG: Final = "/console/catalog"
_EMPTY: Final[dict[str, str]] = {}


def _quoted(value: str) -> str:
    return quote(value, safe="")


def warehouse_url(warehouse: str) -> str:
    return f"{CATALOG}/{_quoted(warehouse)}"


def namespace_url(warehouse: str, levels: tuple[str, ...]) -> str:
    return f"{warehouse_url(warehouse)}/namespaces/{_quoted(SEPARATOR.join(levels))}"


def object_url(warehouse: str, levels: tuple[str, ...], name: str, view: bool) -> str:
    return f"{namespace_url(warehouse, levels)}/{'views' if view else 'tables'}/{_quoted(name)}"


# The query parameters that carry each listing's page token: one per listing, so each is paged on
# its own.
_PAGED: Final = ("namespaces", "tables", "views", "dropped")


def _page(request: web.Request, listing: str) -> PageRequest:
    """The page of `listing` that the request's query names (its first without a token), as large
    as the gateway allows, bound to the caller exactly as the REST API binds its tokens."""
    settings = services(request).settings
    token = http.query_value(request, listing) or None
    return PageRequest.parse(
        token, str(settings.max_page_size), settings.max_page_size, settings.max_page_size, caller_of(request)
    )


def _next_url(request: web.Request, base: str, listing: str, token: str | None) -> str | None:
    """The address of `listing`'s next page at `base` (None on its last page): the next token in
    `listing`'s parameter, the other listings' tokens as they are."""
    if token is None:
        return None
    tokens = ((name, http.query_value(request, name)) for name in _PAGED)
    query = {name: value for name, value in tokens if value}
    query[listing] = token
    return f"{base}?{urlencode(query)}"


def _crumbs(warehouse: str, levels: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    crumbs = [("Catalog", CATALOG), (warehouse, warehouse_url(warehouse))]
    crumbs += [(level, namespace_url(warehouse, levels[: i + 1])) for i, level in enumerate(levels)]
    return crumbs


async def home(request: web.Request) -> web.Response:
    return see_other(CATALOG)


async def warehouses(request: web.Request) -> web.Response:
    """The warehouses the principal may see (getConfig, as a client discovering them)."""
    svc = services(request)
    listed = [svc.resources.warehouse(name) for name in svc.ctx.warehouses]
    shown = [
        {
            "name": r.warehouse,
            "url": warehouse_url(str(r.warehouse)),
            "sealed": svc.ctx.warehouses[str(r.warehouse)].seal_files,
        }
        for r in decisions.visible(request, listed)
    ]
    return page(request, "catalog.html", {"section": "Catalog", "warehouses": shown})


def _warehouse_of(request: web.Request, svc: Services) -> str:
    """The path's warehouse; NoSuchWarehouseError (404) if it does not exist."""
    return svc.ctx.warehouse(request.match_info["warehouse"]).name


async def _child_namespaces(
    request: web.Request, svc: Services, warehouse: str, parent: Resource, levels: tuple[str, ...]
) -> tuple[list[dict[str, str]], str | None] | None:
    """The visible namespaces of the requested page in `parent` (None when listNamespaces is
    denied there), and the next page's token (None on the last page)."""
    if not decisions.decide(request, "listNamespaces", parent).allowed:
        return None
    return await _namespace_rows(request, svc, warehouse, parent, levels)


async def _namespace_rows(
    request: web.Request, svc: Services, warehouse: str, parent: Resource, levels: tuple[str, ...]
) -> tuple[list[dict[str, str]], str | None]:
    """The visible namespaces of the requested page in `parent`, listNamespaces decided already,
    and the next page's token. Entries the principal may not see are left out of the page."""
    parent_ns = Namespace(levels) if levels else None
    page_request = _page(request, "namespaces")
    listing = orjson.loads(await svc.namespaces.list_namespaces(warehouse, parent_ns, page_request))
    found = [tuple(item) for item in listing["namespaces"]]
    keys = [SEPARATOR.join(item) for item in found]
    own = await read_many(svc.ctx.store, warehouse, keys)
    children = [
        svc.resources.child_namespace(parent, item[-1], props or _EMPTY)
        for item, props in zip(found, own, strict=True)
    ]
    kept = {id(r) for r in decisions.visible(request, children)}
    rows = [
        {"name": ".".join(item), "url": namespace_url(warehouse, item)}
        for item, child in zip(found, children, strict=True)
        if id(child) in kept
    ]
    return rows, listing.get("next-page-token")


async def warehouse(request: web.Request) -> web.Response:
    svc = services(request)
    name = _warehouse_of(request, svc)
    resource = svc.resources.warehouse(name)
    decisions.require(request, "listNamespaces", resource)
    rows, next_token = await _namespace_rows(request, svc, name, resource, ())
    context = {
        "section": "Catalog",
        "crumbs": _crumbs(name),
        "warehouse": name,
        "sealed": svc.ctx.warehouses[name].seal_files,
        "namespaces": rows,
        "next_url": _next_url(request, warehouse_url(name), "namespaces", next_token),
        "access_url": access_link(request, name),
        "dropped_url": f"{warehouse_url(name)}/dropped"
        if decisions.would_allow(request, "listDroppedObjects", catalog_resource())
        else None,
    }
    return page(request, "warehouse.html", context)


async def _objects(
    request: web.Request, svc: Services, namespace: Resource, view: bool
) -> tuple[list[dict[str, str]], str | None] | None:
    """The visible tables (or views) of the requested page of the namespace, and the next page's
    token; None when listing them is denied."""
    if not decisions.decide(request, "listViews" if view else "listTables", namespace).allowed:
        return None
    warehouse, levels = str(namespace.warehouse), namespace.namespace
    service = svc.views if view else svc.tables
    page_request = _page(request, "views" if view else "tables")
    listing = orjson.loads(await service.list_all(warehouse, Namespace(levels), page_request))
    names = [str(item["name"]) for item in listing["identifiers"]]
    children = [svc.resources.child(namespace, name, view) for name in names]
    kept = {id(r) for r in decisions.visible(request, children)}
    rows = [
        {"name": name, "url": object_url(warehouse, levels, name, view)}
        for name, child in zip(names, children, strict=True)
        if id(child) in kept
    ]
    return rows, listing.get("next-page-token")


def _section(
    request: web.Request, base: str, listing: str, listed: tuple[list[dict[str, str]], str | None] | None
) -> dict[str, Any]:
    if listed is None:
        return {"allowed": False, "rows": [], "next_url": None}
    return {"allowed": True, "rows": listed[0], "next_url": _next_url(request, base, listing, listed[1])}


async def namespace(request: web.Request) -> web.Response:
    svc = services(request)
    name = _warehouse_of(request, svc)
    ns = Namespace.parse(request.match_info["namespace"])
    resource = await resources.namespace_of(svc, name, ns)
    decisions.require(request, "loadNamespaceMetadata", resource)
    properties = orjson.loads(await svc.namespaces.load(name, ns))["properties"]
    here = namespace_url(name, ns.levels)
    context = {
        "section": "Catalog",
        "crumbs": _crumbs(name, ns.levels),
        "namespace": str(ns),
        "properties": sorted(properties.items()),
        "guards": resource.grants,
        "access_url": access_link(request, name, ns.levels),
        "children": _section(
            request, here, "namespaces", await _child_namespaces(request, svc, name, resource, ns.levels)
        ),
        "tables": _section(request, here, "tables", await _objects(request, svc, resource, view=False)),
        "views": _section(request, here, "views", await _objects(request, svc, resource, view=True)),
    }
    return page(request, "namespace.html", context)


async def table(request: web.Request) -> web.Response:
    svc, sec = services(request), security(request)
    name = _warehouse_of(request, svc)
    identifier = Identifier.of(Namespace.parse(request.match_info["namespace"]), request.match_info["table"])
    resource = await resources.object_of(svc, name, identifier, view=False)
    verdict = decisions.require(request, "loadTable", resource)
    # As the REST API answers it: a reader allowed only through restricted permits sees its view.
    _etag, body = await svc.tables.load(name, identifier, "all", None, read_view(sec.policies, verdict))
    assert body is not None  # no If-None-Match was given
    context = {
        "section": "Catalog",
        "crumbs": _crumbs(name, identifier.namespace.levels),
        "table": identifier.name,
        "sealed": svc.ctx.warehouses[name].seal_files,
        "guards": resource.grants,
        "access_url": access_link(request, name, identifier.namespace.levels, identifier.name),
        **table_summary(orjson.loads(body)),
    }
    return page(request, "table.html", context)


async def view(request: web.Request) -> web.Response:
    svc = services(request)
    name = _warehouse_of(request, svc)
    identifier = Identifier.of(Namespace.parse(request.match_info["namespace"]), request.match_info["view"])
    resource = await resources.object_of(svc, name, identifier, view=True)
    decisions.require(request, "loadView", resource)
    body = await svc.views.load(name, identifier)
    context = {
        "section": "Catalog",
        "crumbs": _crumbs(name, identifier.namespace.levels),
        "view": identifier.name,
        "sealed": svc.ctx.warehouses[name].seal_files,
        "guards": resource.grants,
        "access_url": access_link(request, name, identifier.namespace.levels, identifier.name, view=True),
        **view_summary(orjson.loads(body)),
    }
    return page(request, "view.html", context)


async def dropped(request: web.Request) -> web.Response:
    """Soft-deleted tables and views of the warehouse, with undrop (admins, by default)."""
    svc = services(request)
    name = _warehouse_of(request, svc)
    decisions.require(request, "listDroppedObjects", catalog_resource())
    listing = orjson.loads(await list_dropped(svc.ctx, name, _page(request, "dropped")))
    here = f"{warehouse_url(name)}/dropped"
    rows = [
        {
            "kind": item["kind"],
            "name": ".".join([*item["namespace"], item["name"]]),
            "dropped": when(item["dropped-at-ms"]),
            "purge_after": when(item["purge-after-ms"]),
            "undrop": f"{warehouse_url(name)}/dropped/{_quoted(item['drop-id'])}/undrop",
        }
        for item in listing["dropped"]
    ]
    context = {
        "section": "Catalog",
        "crumbs": [*_crumbs(name), ("Dropped", here)],
        "warehouse": name,
        "dropped": rows,
        "next_url": _next_url(request, here, "dropped", listing.get("next-page-token")),
        "may_undrop": decisions.would_allow(request, "undropObject", catalog_resource()),
    }
    return page(request, "dropped.html", context)


async def undrop_object(request: web.Request) -> web.Response:
    """Restore a soft-deleted object (the pipeline decided undropObject and checked the form)."""
    svc = services(request)
    name = _warehouse_of(request, svc)
    drop_id = request.match_info["drop_id"]
    await mutate(request, lambda rec: undrop(svc.ctx, name, drop_id, rec))
    return see_other(f"{warehouse_url(name)}/dropped")


_WAREHOUSE = CATALOG + "/{warehouse}"
_NAMESPACE = _WAREHOUSE + "/namespaces/{namespace}"
ROUTES = [
    Route("GET", "/console/", home, "useConsole", advertised=False, session=True),
    Route("GET", CATALOG, warehouses, "useConsole", advertised=False, session=True),
    Route("GET", _WAREHOUSE, warehouse, "useConsole", advertised=False, session=True),
    Route("GET", _NAMESPACE, namespace, "useConsole", advertised=False, session=True),
    Route("GET", _NAMESPACE + "/tables/{table}", table, "useConsole", advertised=False, session=True),
    Route("GET", _NAMESPACE + "/views/{view}", view, "useConsole", advertised=False, session=True),
    Route("GET", _WAREHOUSE + "/dropped", dropped, "useConsole", advertised=False, session=True),
    Route(
        "POST",
        _WAREHOUSE + "/dropped/{drop_id}/undrop",
        undrop_object,
        "undropObject",
        advertised=False,
        session=True,
    ),
]
