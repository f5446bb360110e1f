"""The scan grants of an allowed verdict: which columns and rows the caller may scan.

Cedar allowed the route's action (planTableScan, loadTable, ...) before the handler runs; the
permits that allowed it may carry `@columns` / `@row_filter` / `@mask` restrictions
(`gateway.authz.restrictions`). Each satisfied permit is one grant; one unrestricted permit makes
the scan unrestricted. The catalog enforces the grants on planning (`catalog.planning.grants`)
and tells them to readers on loadTable (`catalog.planning.read_restrictions`).
"""

from __future__ import annotations

import hashlib

import orjson

from cedarberg.catalog.planning.grants import ScanGrant
from cedarberg.catalog.planning.read_restrictions import ReadView
from cedarberg.gateway.authz.authorizer import Verdict
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.restrictions import ScanRule


def scan_grants(policies: PolicyEngine, verdict: Verdict | None) -> tuple[ScanGrant, ...]:
    """The ways the caller `verdict` was decided for may scan the table it names: empty (no scan
    allowed, fail closed) when there is no verdict or it did not allow."""
    return tuple(ScanGrant(rule.columns, rule.expression, rule.masks) for rule in _rules(policies, verdict))


def read_view(policies: PolicyEngine, verdict: Verdict | None) -> ReadView | None:
    """The restricted view a load answers the caller with; None when a permit that allowed it
    carries no restriction (the caller reads the table as is). A verdict that gives no way to
    read at all (none, a denial, a policy set changed since) is a view with no grants: the
    catalog refuses it (fail closed)."""
    rules = _rules(policies, verdict)
    if rules and not any(rule.restricted for rule in rules):
        return None
    grants = tuple(ScanGrant(rule.columns, rule.expression, rule.masks) for rule in rules)
    return ReadView(grants, _content_key(rules))


def _rules(policies: PolicyEngine, verdict: Verdict | None) -> tuple[ScanRule, ...]:
    if verdict is None or not verdict.allowed or not verdict.decisions:
        return ()
    _check, decision = verdict.decisions[0]  # the route's own action on the table
    return policies.scan_rules(decision)


def _content_key(rules: tuple[ScanRule, ...]) -> str:
    """A digest of what the rules say (not which policies say it), the same in every process."""
    described = sorted(
        orjson.dumps(
            [sorted(rule.columns) if rule.columns is not None else None, rule.row_filter, rule.masks]
        )
        for rule in rules
    )
    return hashlib.sha256(b"\n".join(described)).hexdigest()[:32]
