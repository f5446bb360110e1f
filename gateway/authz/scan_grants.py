"""The scan grants of an allowed verdict: which columns and rows the caller may scan.

Cedar allowed the route's action (planTableScan, ...) before the handler runs; the permits that
allowed it may carry `@columns` / `@row_filter` restrictions (`gateway.authz.restrictions`). Each
satisfied permit is one grant; one unrestricted permit makes the scan unrestricted. The catalog
enforces the grants (`catalog.planning.grants`).
"""

from __future__ import annotations

from cedarberg.catalog.planning.grants import ScanGrant
from cedarberg.gateway.authz.authorizer import Verdict
from cedarberg.gateway.authz.engine import PolicyEngine


def scan_grants(policies: PolicyEngine, verdict: Verdict | None) -> tuple[ScanGrant, ...]:
    """The ways the caller `verdict` was decided for may scan the table it names: empty (no scan
    allowed, fail closed) when there is no verdict or it did not allow."""
    if verdict is None or not verdict.allowed or not verdict.decisions:
        return ()
    _check, decision = verdict.decisions[0]  # the route's own action on the table
    rules = policies.scan_rules(decision)
    return tuple(ScanGrant(rule.columns, rule.expression) for rule in rules)
