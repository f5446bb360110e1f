"""Deciding what a console page shows, as the signed-in principal, with the REST API's actions.

A page is a `useConsole` request (decided by the pipeline); everything it shows is decided here
with the same action the REST API decides for the same read: the namespaces of a warehouse are
`listNamespaces`, a table's page `loadTable`, and so on. As in the pipeline:

- `decide` writes each decision to the audit log and the metrics (`verdicts.decide`), and a
  denial on an object the principal may not know exists is told as its absence (404);
- `visible` keeps the entries of a listing the principal may see (their `*Exists` action,
  `authorizer.filter_visible`), as the REST API filters its listings: hidden objects are absent.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from cedarberg.gateway.authz.authorizer import Verdict, filter_visible, plan_checks
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.entities import Resource
from cedarberg.gateway.web import verdicts
from cedarberg.gateway.web.errors import ForbiddenError
from cedarberg.gateway.web.keys import PRINCIPAL, security


def _context(request: web.Request) -> RequestContext:
    return RequestContext.of(request[PRINCIPAL], request.remote or "")


def decide(request: web.Request, operation: str, resource: Resource, *, refuses: bool = False) -> Verdict:
    """`operation`'s decision on `resource` for the request's principal, audited and counted.
    A denial that `refuses` the page is recorded with the status it is answered with (404 where
    the principal may not know the object exists, else 403); one that only leaves a part of the
    page out, with none. Returns the verdict (allowed or not); raises nothing for a denial."""
    checks = plan_checks(operation, _context(request), resource)
    if refuses:
        return verdicts.decide(request, operation, checks, hides=True)
    return verdicts.decide(request, operation, checks, denial_status=None)


def require(request: web.Request, operation: str, resource: Resource) -> Verdict:
    """`decide`, raising on a denial as the pipeline does: the kind's not-found error where the
    principal may not know the object exists, else ForbiddenError."""
    verdict = decide(request, operation, resource, refuses=True)
    if verdict.allowed:
        return verdict
    hidden = verdicts.hidden_error(verdict)
    if hidden is not None and verdict.hidden_kind is not None:
        raise hidden(f"{verdict.hidden_kind.value} does not exist")
    raise ForbiddenError(f"Not allowed: {operation}")


def visible(request: web.Request, entries: Sequence[Resource]) -> list[Resource]:
    """The entries the principal may see, in order (a listing is filtered, never denied)."""
    return filter_visible(security(request).policies, request[PRINCIPAL], _context(request), entries)


def would_allow(request: web.Request, action: str, resource: Resource) -> bool:
    """Whether `action` on `resource` would be allowed, to decide whether to offer a link or a
    form (not audited: following it is decided, and audited, as its own request)."""
    decision = security(request).policies.decide(request[PRINCIPAL], action, resource, _context(request))
    return decision.allowed
