"""View routes."""

from __future__ import annotations

from aiohttp import web

from cedarberg.catalog import requests as req
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.identifiers import Namespace
from cedarberg.gateway.web import http
from cedarberg.gateway.web.effect_gate import effect_gate
from cedarberg.gateway.web.keys import services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.services import mutate

VIEWS = "/v1/{prefix}/namespaces/{namespace}/views"
VIEW = VIEWS + "/{view}"


async def list_views(request: web.Request) -> web.Response:
    svc = services(request)
    return http.json_response(
        await svc.views.list_all(http.prefix(request), http.namespace(request), svc.page(request))
    )


async def create_view(request: web.Request) -> web.Response:
    namespace: Namespace = http.namespace(request)
    body = http.parsed_body(request, req.CreateViewRequest)
    svc, gate = services(request), effect_gate(request)
    return await mutate(
        request, lambda rec: svc.views.create(http.prefix(request), namespace, body, rec, gate)
    )


async def load_view(request: web.Request) -> web.Response:
    return http.json_response(await services(request).views.load(http.prefix(request), http.view(request)))


async def view_exists(request: web.Request) -> web.Response:
    await services(request).views.exists(http.prefix(request), http.view(request))
    return web.Response(status=204)


async def replace_view(request: web.Request) -> web.Response:
    identifier = http.view(request)
    body = http.parsed_body(request, req.CommitViewRequest)
    if body.identifier is not None and body.identifier.identifier() != identifier:
        raise InvalidRequestError("identifier in the body does not match the path")
    svc, gate = services(request), effect_gate(request)
    return await mutate(
        request, lambda rec: svc.views.replace(http.prefix(request), identifier, body, rec, gate)
    )


async def drop_view(request: web.Request) -> web.Response:
    identifier = http.view(request)
    svc = services(request)
    return await mutate(request, lambda rec: svc.views.drop(http.prefix(request), identifier, rec))


async def rename_view(request: web.Request) -> web.Response:
    body = http.parsed_body(request, req.RenameRequest)
    source, target = body.source.identifier(), body.destination.identifier()
    svc, gate = services(request), effect_gate(request)
    return await mutate(
        request, lambda rec: svc.views.rename(http.prefix(request), source, target, rec, gate)
    )


async def register_view(request: web.Request) -> web.Response:
    namespace = http.namespace(request)
    body = http.parsed_body(request, req.RegisterViewRequest)
    svc, gate = services(request), effect_gate(request)
    return await mutate(
        request, lambda rec: svc.views.register(http.prefix(request), namespace, body, rec, gate)
    )


ROUTES = [
    Route("GET", VIEWS, list_views, "listViews"),
    Route("POST", VIEWS, create_view, "createView"),
    Route("GET", VIEW, load_view, "loadView"),
    Route("HEAD", VIEW, view_exists, "viewExists"),
    Route("POST", VIEW, replace_view, "replaceView"),
    Route("DELETE", VIEW, drop_view, "dropView"),
    Route("POST", "/v1/{prefix}/views/rename", rename_view, "renameView"),
    Route(
        "POST",
        "/v1/{prefix}/namespaces/{namespace}/register-view",
        register_view,
        "registerView",
    ),
]
