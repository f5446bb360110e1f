"""Server-side scan planning: planTableScan, fetchPlanningResult, cancelPlanning, fetchScanTasks.

A plan belongs to the principal that asked for it: its plan id and plan tasks answer only that
principal, on that table (anyone else gets 404, as for an unknown id).
"""

from __future__ import annotations

import orjson
from aiohttp import web

from cedarberg.catalog.planning.grants import ScanGrant
from cedarberg.catalog.planning.request import FetchScanTasksRequest, PlanScanRequest
from cedarberg.catalog.planning.service import PlanAnswer
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz.scan_grants import scan_grants
from cedarberg.gateway.web import errors, http
from cedarberg.gateway.web.keys import PRINCIPAL, VERDICT, security, services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.tables import TABLE


def _owner(request: web.Request) -> str:
    principal: Principal = request[PRINCIPAL]
    # Ids are namespaced by authentication method (an OIDC subject never equals a key's
    # principal) and unique per kind.
    return f"{principal.kind}:{principal.id}"


def _scan_grants(request: web.Request) -> tuple[ScanGrant, ...]:
    """How the caller may scan the table: from the verdict the pipeline allowed the request with."""
    return scan_grants(security(request).policies, request.get(VERDICT))


def _answer(answer: PlanAnswer) -> web.Response:
    if answer.failure is None:
        return http.json_response(answer.body)
    mapped = errors.lookup(answer.failure)
    status, error_type = (mapped.status, mapped.error_type) if mapped else (500, "ServiceFailureException")
    body = {"status": "failed", "error": {"message": str(answer.failure), "type": error_type, "code": status}}
    return http.json_response(orjson.dumps(body))


async def plan_table_scan(request: web.Request) -> web.Response:
    identifier = http.table(request)
    body = http.parsed_body(request, PlanScanRequest)
    answer = await services(request).plans.plan(
        http.prefix(request), identifier, body, _scan_grants(request), _owner(request)
    )
    return _answer(answer)


async def fetch_planning_result(request: web.Request) -> web.Response:
    answer = await services(request).plans.result(
        http.prefix(request), http.table(request), request.match_info["plan_id"], _owner(request)
    )
    return _answer(answer)


async def cancel_planning(request: web.Request) -> web.Response:
    await services(request).plans.cancel(
        http.prefix(request), http.table(request), request.match_info["plan_id"], _owner(request)
    )
    return web.Response(status=204)


async def fetch_scan_tasks(request: web.Request) -> web.Response:
    identifier = http.table(request)
    body = http.parsed_body(request, FetchScanTasksRequest)
    page = await services(request).plans.tasks(
        http.prefix(request), identifier, body.plan_task, _owner(request)
    )
    return http.json_response(page)


ROUTES = [
    Route("POST", TABLE + "/plan", plan_table_scan, "planTableScan"),
    Route("GET", TABLE + "/plan/{plan_id}", fetch_planning_result, "fetchPlanningResult"),
    Route("DELETE", TABLE + "/plan/{plan_id}", cancel_planning, "cancelPlanning"),
    Route("POST", TABLE + "/tasks", fetch_scan_tasks, "fetchScanTasks"),
]
