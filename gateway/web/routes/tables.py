"""Table routes and multi-table transactions (scan planning is in routes/planning.py, access to a
table's files in routes/data_access.py and routes/signing.py)."""

from __future__ import annotations

from aiohttp import web

from cedarberg.catalog import requests as req
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.identifiers import Identifier
from cedarberg.gateway.authz.scan_grants import read_view
from cedarberg.gateway.web import http
from cedarberg.gateway.web.effect_gate import effect_gate
from cedarberg.gateway.web.keys import VERDICT, security, services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes import data_access, signing
from cedarberg.gateway.web.services import mutate

TABLES = "/v1/{prefix}/namespaces/{namespace}/tables"
TABLE = TABLES + "/{table}"


async def _with_storage_config(
    request: web.Request, identifier: Identifier, response: web.Response
) -> web.Response:
    """A create or register answer with the access delegation the client asked for."""
    if response.status != 200 or not isinstance(response.body, bytes):
        return response
    if not data_access.wants_storage_config(request):
        return response
    body = await data_access.with_storage_config(request, identifier, response.body)
    return http.json_response(body, headers=data_access.NO_STORE)


async def list_tables(request: web.Request) -> web.Response:
    svc = services(request)
    return http.json_response(
        await svc.tables.list_all(http.prefix(request), http.namespace(request), svc.page(request))
    )


async def create_table(request: web.Request) -> web.Response:
    namespace = http.namespace(request)
    body = http.parsed_body(request, req.CreateTableRequest)
    svc, gate = services(request), effect_gate(request)
    response = await mutate(
        request, lambda rec: svc.tables.create(http.prefix(request), namespace, body, rec, gate)
    )
    return await _with_storage_config(request, Identifier.of(namespace, body.name), response)


async def load_table(request: web.Request) -> web.Response:
    identifier = http.table(request)
    # Credentials are added per request: an answer that carries them is a 200, never a 304.
    storage_config = data_access.wants_storage_config(request)
    etag, body = await services(request).tables.load(
        http.prefix(request),
        identifier,
        http.query_value(request, "snapshots", "all"),
        None if storage_config else request.headers.get("If-None-Match"),
        # A caller allowed only through restricted permits is told its read-restrictions.
        read_view(security(request).policies, request.get(VERDICT)),
    )
    if body is None:
        return web.Response(status=304, headers={"ETag": etag})
    if storage_config:
        body = await data_access.with_storage_config(request, identifier, body)
        return http.json_response(body, headers={"ETag": etag, **data_access.NO_STORE})
    return http.json_response(body, headers={"ETag": etag})


async def table_exists(request: web.Request) -> web.Response:
    await services(request).tables.exists(http.prefix(request), http.table(request))
    return web.Response(status=204)


async def update_table(request: web.Request) -> web.Response:
    identifier = http.table(request)
    body = http.parsed_body(request, req.CommitTableRequest)
    # The identifier comes from the path; a body identifier, if sent, must agree with it.
    if body.identifier is not None and body.identifier.identifier() != identifier:
        raise InvalidRequestError("identifier in the body does not match the path")
    svc, gate = services(request), effect_gate(request)
    return await mutate(
        request, lambda rec: svc.tables.commit(http.prefix(request), identifier, body, rec, gate)
    )


async def drop_table(request: web.Request) -> web.Response:
    identifier = http.table(request)
    purge = http.flag(request, "purgeRequested")
    svc = services(request)
    return await mutate(request, lambda rec: svc.tables.drop(http.prefix(request), identifier, purge, rec))


async def unregister_table(request: web.Request) -> web.Response:
    identifier = http.table(request)
    svc = services(request)
    return await mutate(request, lambda rec: svc.tables.unregister(http.prefix(request), identifier, rec))


async def register_table(request: web.Request) -> web.Response:
    namespace = http.namespace(request)
    body = http.parsed_body(request, req.RegisterTableRequest)
    svc, gate = services(request), effect_gate(request)
    response = await mutate(
        request, lambda rec: svc.tables.register(http.prefix(request), namespace, body, rec, gate)
    )
    return await _with_storage_config(request, Identifier.of(namespace, body.name), response)


async def rename_table(request: web.Request) -> web.Response:
    body = http.parsed_body(request, req.RenameRequest)
    source, target = body.source.identifier(), body.destination.identifier()
    svc, gate = services(request), effect_gate(request)
    return await mutate(
        request, lambda rec: svc.tables.rename(http.prefix(request), source, target, rec, gate)
    )


async def report_metrics(request: web.Request) -> web.Response:
    identifier = http.table(request)
    body = http.parsed_body(request, req.MetricsReport)
    await services(request).tables.report_metrics(http.prefix(request), identifier, body)
    return web.Response(status=204)


async def commit_transaction(request: web.Request) -> web.Response:
    changes = http.parsed_body(request, req.CommitTransactionRequest).changes_by_table()
    svc, gate = services(request), effect_gate(request)
    return await mutate(
        request, lambda rec: svc.tables.commit_transaction(http.prefix(request), changes, rec, gate)
    )


ROUTES = [
    Route("GET", TABLES, list_tables, "listTables"),
    Route("POST", TABLES, create_table, "createTable"),
    Route("GET", TABLE, load_table, "loadTable"),
    Route("HEAD", TABLE, table_exists, "tableExists"),
    Route("POST", TABLE, update_table, "updateTable"),
    Route("DELETE", TABLE, drop_table, "dropTable"),
    Route(
        "POST",
        "/v1/{prefix}/namespaces/{namespace}/register",
        register_table,
        "registerTable",
    ),
    Route("POST", TABLE + "/unregister", unregister_table, "unregisterTable"),
    Route("POST", "/v1/{prefix}/tables/rename", rename_table, "renameTable"),
    Route(
        "POST",
        TABLE + "/metrics",
        report_metrics,
        "reportMetrics",
    ),
    Route(
        "POST",
        "/v1/{prefix}/transactions/commit",
        commit_transaction,
        "commitTransaction",
    ),
    # Scan planning is in gateway.web.routes.planning.
    Route("GET", TABLE + "/credentials", data_access.load_credentials, "loadCredentials"),
    Route("POST", TABLE + "/sign", signing.sign_request, "signRequest"),
]
