"""The request pipeline in process: the middleware order, request ids, the ErrorModel mapping of
every way a request can fail before or inside a handler, and the typed request keys the
middlewares hand to handlers. (Beside `tests/gateway/test_bad_input.py`, which sends the same
kinds of requests to a gateway process.)"""

from __future__ import annotations

import gc
import logging
import re
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpClient

from cedarberg.catalog import requests as req
from cedarberg.gateway.authn.principal import AuthMethod, PrincipalKind
from cedarberg.gateway.web import front, middlewares
from cedarberg.gateway.web.answers import REQUEST_ID_HEADER
from cedarberg.gateway.web.app import GC_THRESHOLDS, create_app
from cedarberg.gateway.web.keys import (
    METRICS,
    PARSED_BODY,
    PRINCIPAL,
    REQUEST_ID,
    ROUTE,
    SECURITY,
    VERDICT,
    route_of,
)
from cedarberg.gateway.web.middlewares import MIDDLEWARES
from cedarberg.gateway.web.route import Route
from tests.gateway.web.conftest import InProcessGateway, MakeGateway
from tests.support.inprocess import Template, fronted, inprocess_settings

_GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")


async def _error(response: Any, status: int, error_type: str) -> dict[str, Any]:
    """Assert an Iceberg ErrorModel answer and return its `error` object."""
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    document = await response.json()
    assert set(document) == {"error"}
    error: dict[str, Any] = document["error"]
    assert error["type"] == error_type
    assert error["code"] == status
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


def _samples(exposition: str, family: str) -> dict[str, float]:
    """`{labels: value}` of one Prometheus family's samples."""
    found = {}
    for line in exposition.splitlines():
        match = re.match(rf"^{family}\{{(.*)\}} (\S+)$", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


# -- the order -----------------------------------------------------------------------------------


def test_the_application_runs_the_one_pipeline() -> None:
    assert (middlewares.pipeline,) == MIDDLEWARES


async def test_the_running_app_holds_exactly_the_constant(gw: InProcessGateway) -> None:
    assert tuple(gw.app.middlewares) == MIDDLEWARES


async def test_every_request_is_counted_by_the_outermost_middleware(gw: InProcessGateway) -> None:
    """Answered, refused by routing, and failed in a handler alike: all are counted by the pipeline."""
    assert (await gw.client.get("/v1/namespaces")).status == 200
    assert (await gw.client.get("/v1/no-such-route")).status == 404
    assert (await gw.client.get("/v1/namespaces/absent")).status == 404
    assert (await gw.client.delete("/v1/config")).status == 405
    exposition = await (await gw.client.get("/metrics")).text()
    counted = _samples(exposition, "cedarberg_http_requests_total")
    assert counted['method="GET",operation="listNamespaces",status="200"'] == 1
    assert counted['method="GET",operation="unmatched",status="404"'] == 1
    assert counted['method="GET",operation="loadNamespaceMetadata",status="404"'] == 1
    assert counted['method="DELETE",operation="unmatched",status="405"'] == 1


async def test_a_request_refused_by_the_outer_middlewares_never_reaches_the_inner_ones(
    make_gateway: MakeGateway,
) -> None:
    """Over the address limit: 429 before authentication, so a bad credential is not even looked at
    (no 401, no failed-authentication count)."""
    gw = await make_gateway(anonymous=False, config={"rate_limits": {"per_address": "2/minute"}})
    bad = {"Authorization": "Bearer cbk_aaaaaaaaaaaaaaaa_" + "A" * 43}
    statuses = [(await gw.client.get("/v1/namespaces", headers=bad)).status for _ in range(3)]
    assert statuses == [401, 401, 429]
    # Every route is behind the address limit, public ones too.
    assert (await gw.client.get("/health")).status == 429
    rejected = _samples(gw.app[METRICS].exposition().decode(), "cedarberg_rate_limit_rejections_total")
    assert rejected == {'op_class="any",scope="address"': 2.0}


@pytest.mark.parametrize("entry", ["front", "middleware"])
async def test_the_pipeline_runs_once_per_request_from_either_entry(
    aiohttp_client: AiohttpClient, template: Template, tmp_path: Path, entry: str
) -> None:
    """A worker's server enters the pipeline at its front, before routing (`gateway.web.front`); a
    server without the front (aiohttp's own) enters it at the middleware. Either way each request
    gets one id, is counted once under its route, and a repeated read is replayed from its plan."""
    thresholds = gc.get_threshold()
    app = create_app(inprocess_settings(template, tmp_path))
    client = await aiohttp_client(await fronted(app) if entry == "front" else app)
    try:
        answers = [await client.get("/v1/namespaces") for _ in range(2)]
        answers.append(await client.get("/v1/no-such-route"))
        answers.append(await client.delete("/v1/config"))
        assert [a.status for a in answers] == [200, 200, 404, 405]
        assert all(_GENERATED_ID.match(a.headers[REQUEST_ID_HEADER]) for a in answers)
        assert len({a.headers[REQUEST_ID_HEADER] for a in answers}) == 4
        assert await answers[0].read() == await answers[1].read()
        assert app[SECURITY].plans.replayed == 1
        exposition = app[METRICS].exposition().decode()
        counted = _samples(exposition, "cedarberg_http_requests_total")
        assert counted == {
            'method="GET",operation="listNamespaces",status="200"': 2,
            'method="GET",operation="unmatched",status="404"': 1,
            'method="DELETE",operation="unmatched",status="405"': 1,
        }
        assert re.search(r"^cedarberg_http_requests_in_flight 0\.0$", exposition, re.MULTILINE)
    finally:
        # The application froze its start-up heap and set the thresholds, as a worker does.
        gc.unfreeze()
        gc.set_threshold(*thresholds)


async def test_a_started_application_collects_garbage_at_the_server_thresholds(gw: InProcessGateway) -> None:
    assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_freeze_count() > 0  # the start-up heap is out of the collector's reach


async def test_the_front_is_installed_on_a_set_up_runner_only(template: Template, tmp_path: Path) -> None:
    runner = web.AppRunner(create_app(inprocess_settings(template, tmp_path)))
    with pytest.raises(RuntimeError, match=r"after runner\.setup"):
        front.install(runner)


# -- request ids -----------------------------------------------------------------------------------


async def test_every_answer_carries_a_generated_request_id(gw: InProcessGateway) -> None:
    ids = set()
    for path in ("/v1/config", "/v1/no-such-route", "/health"):
        answer = await gw.client.get(path)
        assert _GENERATED_ID.match(answer.headers[REQUEST_ID_HEADER])
        ids.add(answer.headers[REQUEST_ID_HEADER])
    assert len(ids) == 3


async def test_a_well_formed_client_request_id_is_kept_and_a_bad_one_replaced(gw: InProcessGateway) -> None:
    kept = await gw.client.get("/v1/config", headers={REQUEST_ID_HEADER: "client-trace.0001"})
    assert kept.headers[REQUEST_ID_HEADER] == "client-trace.0001"
    for bad in ("short", "has spaces in it", "x" * 65, "semi;colon;id"):
        replaced = await gw.client.get("/v1/config", headers={REQUEST_ID_HEADER: bad})
        assert _GENERATED_ID.match(replaced.headers[REQUEST_ID_HEADER]), bad


# -- the ErrorModel mapping ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/no-such-route", "/nothing", "/v1/namespaces/a/tables/b/extra"])
async def test_an_unknown_route_is_a_404_error_model(gw: InProcessGateway, path: str) -> None:
    answer = await gw.client.get(path)
    await _error(answer, 404, "NotFoundException")
    assert REQUEST_ID_HEADER in answer.headers


@pytest.mark.parametrize(("method", "path"), [("DELETE", "/v1/config"), ("PUT", "/v1/namespaces")])
async def test_a_wrong_method_is_a_405_with_allow(gw: InProcessGateway, method: str, path: str) -> None:
    answer = await gw.client.request(method, path)
    await _error(answer, 405, "MethodNotAllowedException")
    assert "GET" in answer.headers["Allow"]


async def test_a_body_over_the_limit_is_a_413_and_nothing_is_created(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(config={"max_body_bytes": 1024})
    body = orjson.dumps({"namespace": ["big"], "properties": {"padding": "x" * 2000}})
    answer = await gw.client.post("/v1/namespaces", data=body, headers={"Content-Type": "application/json"})
    error = await _error(answer, 413, "RequestTooLargeException")
    assert error["message"] == "request body is too large"
    assert (await gw.client.get("/v1/namespaces/big")).status == 404


_MALFORMED = (b"{not json", b"[]", b'{"namespace": "flat"}', b"")


async def test_a_malformed_body_is_a_400_before_any_decision(make_gateway: MakeGateway) -> None:
    """A caller Cedar would refuse gets 400, not 403: the body is parsed before authorization, and
    no decision is made (or audited) for the request. (One application for every body: the
    caller's key is verified once.)"""
    gw = await make_gateway(anonymous=False)
    nobody = gw.keys["nobody"]
    for data in _MALFORMED:
        answer = await gw.client.post(
            "/v1/namespaces",
            data=data,
            headers={"Authorization": f"Bearer {nobody}", "Content-Type": "application/json"},
        )
        await _error(answer, 400, "BadRequestException")
        request_id = answer.headers[REQUEST_ID_HEADER]
        assert [r for r in await gw.audit() if r["request_id"] == request_id] == [], data
    # The same caller with a well-formed body is decided, refused and audited.
    refused = await gw.client.post(
        "/v1/namespaces", json={"namespace": ["x"]}, headers={"Authorization": f"Bearer {nobody}"}
    )
    assert refused.status == 403
    decided = [r for r in await gw.audit() if r["request_id"] == refused.headers[REQUEST_ID_HEADER]]
    assert [(r["event"], r["action"], r["decision"]) for r in decided] == [
        ("decision", "createNamespace", "deny")
    ]


# Bodies on which pyiceberg's "before" validators raised what pydantic does not wrap (KeyError,
# AttributeError): each was a 500 until `requests.parse` mapped them. Found by tests/fuzz, which
# sent them exactly so (to warehouse "0", which does not exist: bodies are parsed first).
_SET_STATISTICS_WITHOUT_STATISTICS = {
    "identifier": {"namespace": ["accounting", "tax"], "name": ""},
    "requirements": [],
    "updates": [{"action": "set-statistics", "snapshot-id": 0}],
}
_UNDECODABLE_BODIES = [
    pytest.param(
        "/v1/0/namespaces/accounting/tables",
        {
            "name": "",
            "location": "",
            "schema": {"type": "struct", "fields": [], "identifier-field-ids": []},
            "partition-spec": {"fields": []},
            "write-order": {"fields": [[None, None]]},
            "stage-create": False,
            "properties": {},
        },
        "invalid request: a value is not of the JSON type its field requires",
        id="create-table-sort-field-not-an-object",
    ),
    pytest.param(
        "/v1/0/namespaces/accounting/tables/sales",
        _SET_STATISTICS_WITHOUT_STATISTICS,
        "invalid request: missing field 'statistics'",
        id="update-table-set-statistics-without-statistics",
    ),
    pytest.param(
        "/v1/0/transactions/commit",
        {"table-changes": [_SET_STATISTICS_WITHOUT_STATISTICS]},
        "invalid request: missing field 'statistics'",
        id="commit-transaction-set-statistics-without-statistics",
    ),
]


@pytest.mark.parametrize(("path", "body", "message"), _UNDECODABLE_BODIES)
async def test_a_body_pyiceberg_cannot_decode_is_a_400(
    gw: InProcessGateway, path: str, body: dict[str, Any], message: str
) -> None:
    answer = await gw.client.post(
        path, json=body, headers={"X-Iceberg-Access-Delegation": "vended-credentials"}
    )
    error = await _error(answer, 400, "BadRequestException")
    assert error["message"] == message


async def test_set_statistics_without_statistics_leaves_the_table_as_it_was(gw: InProcessGateway) -> None:
    await gw.create_namespace("ns")
    await gw.create_table("ns", "t")
    before = await (await gw.client.get("/v1/namespaces/ns/tables/t")).json()
    body = {"requirements": [], "updates": [{"action": "set-statistics", "snapshot-id": 0}]}
    error = await _error(
        await gw.client.post("/v1/namespaces/ns/tables/t", json=body), 400, "BadRequestException"
    )
    assert error["message"] == "invalid request: missing field 'statistics'"
    after = await (await gw.client.get("/v1/namespaces/ns/tables/t")).json()
    assert after["metadata-location"] == before["metadata-location"]


async def _explode(_request: web.Request) -> web.StreamResponse:
    raise RuntimeError("secret internals: /var/lib/cedarberg/catalog.db row 42")


async def test_an_unmapped_error_is_a_500_naming_only_the_request_id(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    explode = Route("GET", "/v1/namespaces/{namespace}/explode", _explode, "loadNamespaceMetadata")
    gw = await make_gateway(extra_routes=[explode])
    await gw.create_namespace("ns")
    with caplog.at_level(logging.ERROR, logger="cedarberg.request"):
        answer = await gw.client.get("/v1/namespaces/ns/explode")
    error = await _error(answer, 500, "ServerErrorException")
    request_id = answer.headers[REQUEST_ID_HEADER]
    assert error["message"] == f"internal error; request id {request_id}"
    assert "secret" not in await answer.text()
    assert any("secret internals" in r.getMessage() or r.exc_info for r in caplog.records)


async def test_catalog_errors_map_through_the_one_table(gw: InProcessGateway) -> None:
    await gw.create_namespace("ns")
    await _error(await gw.client.get("/v1/namespaces/absent"), 404, "NoSuchNamespaceException")
    await _error(await gw.client.get("/v1/namespaces/ns/tables/absent"), 404, "NoSuchTableException")
    await _error(await gw.client.get("/v1/namespaces/ns/views/absent"), 404, "NoSuchViewException")
    await _error(await gw.client.get("/v1/absentwh/namespaces"), 404, "NoSuchWarehouseException")
    await _error(
        await gw.client.post("/v1/namespaces", json={"namespace": ["ns"]}), 409, "AlreadyExistsException"
    )


# -- typed request keys ----------------------------------------------------------------------------


async def _show_keys(request: web.Request) -> web.StreamResponse:
    """What the middlewares left on the request, as the handler sees it."""
    route = request[ROUTE]
    principal = request[PRINCIPAL]
    verdict = request[VERDICT]
    parsed = request.get(PARSED_BODY)
    return web.json_response(
        {
            "request_id": request[REQUEST_ID],
            "route_operation": None if route is None else route.operation,
            "same_route": route is route_of(request),
            "principal": principal.id,
            "kind": principal.kind.value,
            "auth_method": principal.auth_method.value,
            "verdict_operation": verdict.operation,
            "verdict_allowed": verdict.allowed,
            "parsed_body": None if parsed is None else type(parsed).__name__,
        }
    )


async def test_the_pipeline_sets_the_typed_request_keys(make_gateway: MakeGateway) -> None:
    # The body model comes from the operation table's entry for createNamespace.
    create_route_body = req.CreateNamespaceRequest
    probes = [
        Route("GET", "/v1/namespaces/{namespace}/probe", _show_keys, "loadNamespaceMetadata"),
        Route("POST", "/v1/probe-namespaces", _show_keys, "createNamespace"),
    ]
    gw = await make_gateway(anonymous=False, extra_routes=probes)
    key = gw.keys["root"]
    headers = {"Authorization": f"Bearer {key}", REQUEST_ID_HEADER: "probe-request-0001"}
    await gw.create_namespace("ns", headers=headers)
    read = await gw.client.get("/v1/namespaces/ns/probe", headers=headers)
    assert read.status == 200, await read.text()
    assert await read.json() == {
        "request_id": "probe-request-0001",
        "route_operation": "loadNamespaceMetadata",
        "same_route": True,
        "principal": "key:root",
        "kind": PrincipalKind.SERVICE.value,
        "auth_method": AuthMethod.API_KEY.value,
        "verdict_operation": "loadNamespaceMetadata",
        "verdict_allowed": True,
        "parsed_body": None,
    }
    written = await gw.client.post("/v1/probe-namespaces", json={"namespace": ["other"]}, headers=headers)
    assert written.status == 200, await written.text()
    shown = await written.json()
    assert shown["parsed_body"] == create_route_body.__name__
    assert shown["verdict_operation"] == "createNamespace"


async def test_a_view_commit_that_changes_nothing_writes_nothing(gw: InProcessGateway) -> None:
    """Like a table commit without updates: the current metadata, and no new file (found by
    Schemathesis: an empty replaceView body wrote a new metadata file)."""
    await gw.create_namespace("ns")
    view = {
        "name": "v",
        "schema": {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "x", "type": "int", "required": False}],
        },
        "view-version": {
            "version-id": 1,
            "schema-id": 0,
            "timestamp-ms": 1,
            "summary": {},
            "representations": [{"type": "sql", "sql": "select 1 as x", "dialect": "spark"}],
            "default-namespace": ["ns"],
        },
        "properties": {},
    }
    created = await gw.client.post("/v1/namespaces/ns/views", json=view)
    assert created.status == 200, await created.text()
    before = (await created.json())["metadata-location"]
    for body in (
        {},
        {"requirements": [], "updates": []},
        {"updates": [{"action": "set-properties", "updates": {}}]},
    ):
        answer = await gw.client.post("/v1/namespaces/ns/views/v", json=body)
        assert answer.status == 200, await answer.text()
        assert (await answer.json())["metadata-location"] == before
    changed = await gw.client.post(
        "/v1/namespaces/ns/views/v", json={"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    )
    assert changed.status == 200
    assert (await changed.json())["metadata-location"] != before


async def test_a_views_write_metadata_path_is_one_of_its_roots(gw: InProcessGateway) -> None:
    """Attack: a view whose `write.metadata.path` points into a table's location would have its
    metadata files written there; control: a path inside the view's own location is used."""
    await gw.create_namespace("ns")
    await gw.create_table("ns", "t")
    table_location = (await (await gw.client.get("/v1/namespaces/ns/tables/t")).json())["metadata"][
        "location"
    ]

    def view(name: str, metadata_path: str) -> dict[str, Any]:
        return {
            "name": name,
            "schema": {"type": "struct", "schema-id": 0, "fields": []},
            "view-version": {
                "version-id": 1,
                "schema-id": 0,
                "timestamp-ms": 1,
                "summary": {},
                "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
                "default-namespace": ["ns"],
            },
            "properties": {"write.metadata.path": metadata_path},
        }

    refused = await gw.client.post("/v1/namespaces/ns/views", json=view("v", f"{table_location}/metadata"))
    error = await _error(refused, 400, "BadRequestException")
    assert "overlaps the location of another table or view" in error["message"]
    assert (await gw.client.get("/v1/namespaces/ns/views/v")).status == 404

    own = f"{table_location.rsplit('/', 1)[0]}/own-view-{uuid.uuid4().hex}"  # an object directory
    created = await gw.client.post(
        "/v1/namespaces/ns/views", json={**view("v", f"{own}/custom"), "location": own}
    )
    assert created.status == 200, await created.text()
    assert (await created.json())["metadata-location"].startswith(f"{own}/custom/")
