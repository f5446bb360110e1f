"""The one choke point that decides what a caller may do with a table's files.

Vended credentials and remote signing both ask `decide_file_access`: read access is the route's read
action (`loadCredentials` or `signRequest`), write access additionally needs `writeTableData`, an
action no route carries. Every decision made here is audited like the pipeline's own decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from catalog.identifiers import Identifier
from gateway import resources
from gateway.audit import Decision as AuditDecision
from gateway.authn.principal import Principal
from gateway.authz.context import RequestContext
from gateway.authz.entities import Resource
from gateway.pipeline import PRINCIPAL, REQUEST_ID, route_of
from gateway.routes.ops import metrics
from gateway.security import security
from gateway.services import services

WRITE_ACTION = "writeTableData"


@dataclass(frozen=True, slots=True)
class FileAccess:
    read: bool
    write: bool


async def table_resource(request: web.Request, identifier: Identifier, fresh: bool) -> Resource:
    """The Cedar resource of a table named by the request (grants read fresh when `fresh`)."""
    svc = services(request)
    warehouse = request.match_info.get("prefix") or svc.ctx.default_warehouse
    return await resources.object_of(svc, warehouse, identifier, False, fresh)


def decide_file_access(
    request: web.Request, table: Resource, read_action: str, *, want_write: bool = True
) -> FileAccess:
    """What the request's principal may do with `table`'s files.

    `read_action` is `loadCredentials` or `signRequest`; when it is the request's own route, the
    pipeline has allowed it already (the handler would not run otherwise) and it is not decided
    twice. Write is decided only when read is allowed and `want_write` (a GET needs no write)."""
    route = route_of(request)
    read = (route is not None and route.operation == read_action) or _decide(request, read_action, table)
    write = read and want_write and _decide(request, WRITE_ACTION, table)
    return FileAccess(read, write)


def _decide(request: web.Request, action: str, table: Resource) -> bool:
    sec = security(request)
    principal: Principal = request[PRINCIPAL]
    decision = sec.policies.decide(
        principal, action, table, RequestContext.of(principal, request.remote or "")
    )
    stats = metrics(request)
    stats.child(stats.decisions, action, "allow" if decision.allowed else "deny").inc()
    request_id = request.get(REQUEST_ID)
    sec.audit.record_decision(
        request_id=None if request_id is None else str(request_id),
        principal=principal,
        action=action,
        resource=str(table),
        decision=AuditDecision.ALLOW if decision.allowed else AuditDecision.DENY,
        policy_ids=decision.policy_ids,
        policy_version=decision.version,
        client_address=request.remote,
    )
    return decision.allowed
