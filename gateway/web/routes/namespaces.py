"""Namespace routes."""

from __future__ import annotations

from aiohttp import web

from cedarberg.catalog import requests as req
from cedarberg.catalog.identifiers import Namespace
from cedarberg.gateway.web import http
from cedarberg.gateway.web.keys import services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.services import mutate

NS = "/v1/{prefix}/namespaces"


async def list_namespaces(request: web.Request) -> web.Response:
    svc = services(request)
    parent = http.query_value(request, "parent")
    # An empty parent is treated as absent, as the spec asks for backward compatibility.
    parent_ns = Namespace.parse(parent) if parent else None
    return http.json_response(
        await svc.namespaces.list_namespaces(http.prefix(request), parent_ns, svc.page(request))
    )


async def create_namespace(request: web.Request) -> web.Response:
    body = http.parsed_body(request, req.CreateNamespaceRequest)
    namespace = Namespace.of(body.namespace)
    svc = services(request)
    return await mutate(
        request,
        lambda rec: svc.namespaces.create(http.prefix(request), namespace, dict(body.properties), rec),
    )


async def load_namespace(request: web.Request) -> web.Response:
    return http.json_response(
        await services(request).namespaces.load(http.prefix(request), http.namespace(request))
    )


async def namespace_exists(request: web.Request) -> web.Response:
    await services(request).namespaces.exists(http.prefix(request), http.namespace(request))
    return web.Response(status=204)


async def drop_namespace(request: web.Request) -> web.Response:
    namespace = http.namespace(request)
    svc = services(request)
    return await mutate(request, lambda rec: svc.namespaces.drop(http.prefix(request), namespace, rec))


async def update_properties(request: web.Request) -> web.Response:
    namespace = http.namespace(request)
    body = http.parsed_body(request, req.UpdateNamespacePropertiesRequest)
    svc = services(request)
    return await mutate(
        request,
        lambda rec: svc.namespaces.update_properties(
            http.prefix(request), namespace, list(body.removals), dict(body.updates), rec
        ),
    )


ROUTES = [
    Route("GET", NS, list_namespaces, "listNamespaces"),
    Route("POST", NS, create_namespace, "createNamespace"),
    Route("GET", NS + "/{namespace}", load_namespace, "loadNamespaceMetadata"),
    Route("HEAD", NS + "/{namespace}", namespace_exists, "namespaceExists"),
    Route("DELETE", NS + "/{namespace}", drop_namespace, "dropNamespace"),
    Route(
        "POST",
        NS + "/{namespace}/properties",
        update_properties,
        "updateProperties",
    ),
]
