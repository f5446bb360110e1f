"""Table routes and multi-table transactions (scan planning is in routes/planning.py, access to a
table's files in routes/data_access.py and routes/signing.py)."""

from __future__ import annotations

from aiohttp import web

from catalog import metrics_reports
from catalog import requests as req
from catalog.errors import InvalidRequestError
from catalog.identifiers import Identifier
from gateway import http
from gateway.routes import data_access, signing
from gateway.routes.route import Route
from gateway.services import mutate, services

TABLES = "/v1/{prefix}/namespaces/{namespace}/tables"
TABLE = TABLES + "/{table}"


def _identifier(model: req.TableIdentifierModel) -> Identifier:
    return Identifier.of(model.namespace, model.name)


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
    body = req.parse(req.CreateTableRequest, await http.json_body(request))
    Identifier.of(namespace, body.name)
    svc = services(request)
    response = await mutate(
        request, lambda rec: svc.tables.create(http.prefix(request), namespace, body, rec)
    )
    return await _with_storage_config(request, Identifier.of(namespace, body.name), response)


async def load_table(request: web.Request) -> web.Response:
    identifier = http.table(request)
    # Credentials are added per request: an answer that carries them is a 200, never a 304.
    storage_config = data_access.wants_storage_config(request)
    etag, body = await services(request).tables.load(
        http.prefix(request),
        identifier,
        request.query.get("snapshots", "all"),
        None if storage_config else request.headers.get("If-None-Match"),
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
    body = req.parse(req.CommitTableRequest, await http.json_body(request))
    # The identifier comes from the path; a body identifier, if sent, must agree with it.
    if body.identifier is not None and _identifier(body.identifier) != identifier:
        raise InvalidRequestError("identifier in the body does not match the path")
    svc = services(request)
    return await mutate(request, lambda rec: svc.tables.commit(http.prefix(request), identifier, body, rec))


async def drop_table(request: web.Request) -> web.Response:
    identifier = http.table(request)
    purge = http.flag(request, "purgeRequested")
    svc = services(request)
    return await mutate(request, lambda rec: svc.tables.drop(http.prefix(request), identifier, purge, rec))


async def register_table(request: web.Request) -> web.Response:
    namespace = http.namespace(request)
    body = req.parse(req.RegisterTableRequest, await http.json_body(request))
    svc = services(request)
    response = await mutate(
        request, lambda rec: svc.tables.register(http.prefix(request), namespace, body, rec)
    )
    return await _with_storage_config(request, Identifier.of(namespace, body.name), response)


async def rename_table(request: web.Request) -> web.Response:
    body = req.parse(req.RenameRequest, await http.json_body(request))
    source, target = _identifier(body.source), _identifier(body.destination)
    svc = services(request)
    return await mutate(request, lambda rec: svc.tables.rename(http.prefix(request), source, target, rec))


async def report_metrics(request: web.Request) -> web.Response:
    identifier = http.table(request)
    body = metrics_reports.parse_report(await request.read())
    await services(request).tables.report_metrics(http.prefix(request), identifier, body)
    return web.Response(status=204)


async def commit_transaction(request: web.Request) -> web.Response:
    body = req.parse(req.CommitTransactionRequest, await http.json_body(request))
    changes = []
    for change in body.table_changes:
        if change.identifier is None:
            raise InvalidRequestError("every table change in a transaction needs an identifier")
        changes.append((_identifier(change.identifier), change))
    svc = services(request)
    return await mutate(
        request, lambda rec: svc.tables.commit_transaction(http.prefix(request), changes, rec)
    )


ROUTES = [
    Route("GET", TABLES, list_tables, "listTables"),
    Route("POST", TABLES, create_table, "createTable"),
    Route("GET", TABLE, load_table, "loadTable"),
    Route("HEAD", TABLE, table_exists, "tableExists"),
    Route("POST", TABLE, update_table, "updateTable"),
    Route("DELETE", TABLE, drop_table, "dropTable"),
    Route("POST", "/v1/{prefix}/namespaces/{namespace}/register", register_table, "registerTable"),
    Route("POST", "/v1/{prefix}/tables/rename", rename_table, "renameTable"),
    Route("POST", TABLE + "/metrics", report_metrics, "reportMetrics"),
    Route("POST", "/v1/{prefix}/transactions/commit", commit_transaction, "commitTransaction"),
    # Scan planning is in gateway.routes.planning.
    Route("GET", TABLE + "/credentials", data_access.load_credentials, "loadCredentials"),
    Route("POST", TABLE + "/sign", signing.sign_request, "signRequest"),
]
