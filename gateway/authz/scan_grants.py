"""The scan grants of a request: which columns and rows the caller may scan.

Cedar allowed the route's action (planTableScan, ...) before the handler runs; the permits that
allowed it may carry `@columns` / `@row_filter` restrictions (`gateway.authz.restrictions`). Each
satisfied permit is one grant; one unrestricted permit makes the scan unrestricted. The catalog
enforces the grants (`catalog.planning.grants`).
"""

from __future__ import annotations

from aiohttp import web

from catalog.planning.grants import ScanGrant
from gateway.authz.authorizer import VERDICT, Verdict
from gateway.security import security


def scan_grants_for(request: web.Request) -> tuple[ScanGrant, ...]:
    """The ways the authenticated caller of `request` may scan the table it names: empty (no
    scan allowed, fail closed) when the request carries no allowed verdict."""
    verdict = request.get(VERDICT)
    if not isinstance(verdict, Verdict) or not verdict.allowed or not verdict.decisions:
        return ()
    _check, decision = verdict.decisions[0]  # the route's own action on the table
    rules = security(request).policies.scan_rules(decision)
    return tuple(ScanGrant(rule.columns, rule.expression) for rule in rules)
