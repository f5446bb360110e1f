"""The one choke point that decides what a caller may do with a table's files.

Vended credentials and remote signing both ask `decide_file_access`: read access is the route's read
action (`loadCredentials` or `signRequest`), write access additionally needs `writeTableData`, an
action no route carries. Every decision made here is audited like the pipeline's own decisions.

A caller whose read is allowed only by permits carrying column/row restrictions
(`gateway.authz.restrictions`) gets no access to the files unless Cedar trusts its client to
enforce the restrictions itself: the files hold every column and row, so otherwise only planned
scans can honour a restriction. Trust is one more decision, `readRestrictedData` on the same table
with the same context (auth method, TLS subject, principal attributes), made only for such a
caller, so unrestricted callers pay nothing for it. It counts only when a permit without
restrictions allows it: a restricted permit scoped to every action says which scans a principal may
plan, not that its client may be trusted with whole files. Allowed, the caller gets exactly what an
unrestricted one would (the write decision included), marked `restricted` and `trusted`: it
received files under restrictions it must enforce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cedarberg.catalog import confinement, roots
from cedarberg.catalog.errors import ForbiddenError
from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.lookups import TABLE
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz.authorizer import Check, Verdict
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.engine import Decision
from cedarberg.gateway.authz.entities import Resource
from cedarberg.gateway.web import resources, verdicts
from cedarberg.gateway.web.keys import PRINCIPAL, VERDICT, route_of, security, services

WRITE_ACTION = "writeTableData"
TRUST_ACTION = "readRestrictedData"
RESTRICTED = (
    "your access to this table is restricted to some columns or rows: its files are available only "
    "through server-side scan planning"
)
_TRUST_ONLY_RESTRICTED = f"{TRUST_ACTION} was allowed only by permits carrying column/row restrictions"


@dataclass(frozen=True, slots=True)
class FileAccess:
    read: bool
    write: bool
    # Read is allowed only with column/row restrictions. Without `trusted` there is no access at
    # all; with it, access as for an unrestricted caller, and the client must enforce them.
    restricted: bool = False
    trusted: bool = False  # Cedar allowed readRestrictedData: the client enforces the restrictions


async def table_resource(request: web.Request, identifier: Identifier, fresh: bool) -> Resource:
    """The Cedar resource of a table named by the request (grants read fresh when `fresh`)."""
    svc = services(request)
    warehouse = request.match_info.get("prefix") or svc.ctx.default_warehouse
    return await resources.object_of(svc, warehouse, identifier, False, fresh)


async def require_confined(
    request: web.Request, action: str, table: Resource, metadata: dict[str, Any]
) -> None:
    """Raise ForbiddenError (403, audited as a denial of `action`) unless the table's roots are
    confined: recorded for it, clear of warehouse roots and namespace directories, overlapping
    no other object (`catalog.confinement.verify`). Credentials and signatures are scoped by
    those roots, so a table whose locations predate the rule and break it gets neither."""
    current = roots.object_roots(str(metadata["location"]), metadata.get("properties") or {})
    try:
        await confinement.verify(services(request).ctx, TABLE, str(metadata["table-uuid"]), current)
    except ForbiddenError as err:
        verdicts.refuse(request, action, str(table), {"reason": str(err)[:1024]})
        raise


def decide_file_access(
    request: web.Request, table: Resource, read_action: str, *, want_write: bool = True
) -> FileAccess:
    """What the request's principal may do with `table`'s files.

    `read_action` is `loadCredentials` or `signRequest`; when it is the request's own route, the
    pipeline has allowed it already (the handler would not run otherwise) and it is not decided
    twice. Write is decided only when read is allowed and `want_write` (a GET needs no write)."""
    decision = _route_decision(request, read_action) or _decide(request, read_action, table)
    if not decision.allowed:
        return FileAccess(False, False)
    restricted = not _unrestricted(request, decision)
    if restricted and not _trusted(request, table):
        return FileAccess(False, False, restricted=True)
    write = want_write and _decide(request, WRITE_ACTION, table).allowed
    return FileAccess(True, write, restricted=restricted, trusted=restricted)


def _unrestricted(request: web.Request, decision: Decision) -> bool:
    """Whether an Allow came from at least one permit without column/row restrictions (none, for
    a decision of a policy set no longer active: fail closed)."""
    return any(not rule.restricted for rule in security(request).policies.scan_rules(decision))


def _trusted(request: web.Request, table: Resource) -> bool:
    """Whether Cedar trusts the request's client to enforce `table`'s restrictions itself
    (`readRestrictedData`, decided and audited like every decision). An Allow that only
    restricted permits gave is refused, and audited as a denial saying so."""
    decision = _decide(request, TRUST_ACTION, table)
    if not decision.allowed:
        return False
    if _unrestricted(request, decision):
        return True
    # Refuses nothing by itself: the caller is then treated as untrusted (no files).
    verdicts.refuse(request, TRUST_ACTION, str(table), {"reason": _TRUST_ONLY_RESTRICTED}, status=None)
    return False


def _route_decision(request: web.Request, action: str) -> Decision | None:
    """The pipeline's decision of `action` when it is the request's own route."""
    route, verdict = route_of(request), request.get(VERDICT)
    if route is None or route.operation != action or not isinstance(verdict, Verdict):
        return None
    return verdict.decisions[0][1] if verdict.decisions else None


def _decide(request: web.Request, action: str, table: Resource) -> Decision:
    principal: Principal = request[PRINCIPAL]
    check = Check(action, table, RequestContext.of(principal, request.remote or ""))
    # A denial here withholds files (no credentials, no signature, no write) and is answered by
    # the caller's own refusal, if any: it is recorded without a status.
    return verdicts.decide(request, action, [check], denial_status=None).decisions[0][1]
