"""What a policy set says about its restrictions without the registry, when it loads.

For each restricted permit (`binding`), the principals its scope names (the one it names, a member
of the group it names, or a member of each group its conditions name) are decided as the gateway
decides them, on a table its resource scope covers (the table it names, a representative table
`any-table` in the namespace it names, or in namespace `any-namespace` of the warehouse it names
or of every warehouse): with no grants (`lifted`), with a grant naming their groups
(`lifted-if-granted`), and against the warehouses those tables lie in. A permit whose conditions a
probe does not satisfy (they read the context or a name the probe does not have) is not reported
here; the access review, with real principals and objects, still decides it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz import entities, review
from cedarberg.gateway.authz.binding import (
    READ_ACTIONS,
    Finding,
    FindingKind,
    Judge,
    merged,
    subject_label,
    unrestricted_of,
)
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import READERS_PROPERTY, WRITERS_PROPERTY, Resource
from cedarberg.gateway.authz.errors import ResourceError

log = logging.getLogger("cedarberg.gateway.authz")

ANY_NAMESPACE = "any-namespace"  # the representative namespace and table of a probe
ANY_TABLE = "any-table"
_GROUP = "Cedarberg::Group"
_SERVICE = "Cedarberg::Service"


@dataclass(frozen=True, slots=True)
class _Probe:
    """A table a restricted permit's resource scope covers, built with no grants, and how to
    build it with a grant on its namespace."""

    label: str  # the scope, as findings name it
    warehouse: str
    levels: tuple[str, ...]
    name: str

    def table(self, grant: Mapping[str, str] | None = None) -> Resource:
        chain: list[dict[str, str]] = [{} for _ in self.levels[:-1]] + [dict(grant or {})]
        namespace = entities.namespace_resource(self.warehouse, self.levels, chain)
        return entities.child_table(namespace, self.name)


def static_findings(engine: PolicyEngine, locations: Mapping[str, str] | None) -> list[Finding]:
    """What the active set says without the registry: for each restricted permit, the principals
    its scope names, decided on the tables its scope names (see the module)."""
    active = engine.active
    if active is None:
        return []
    warehouses = sorted(locations) if locations else ["default"]
    judge = Judge(engine, review.ReviewContext().request(), locations)
    found: list[Finding] = []
    for policy_id, policy in sorted(active.restricted_policies.items()):
        for probe in _probes(policy.get("resource") or {}, warehouses):
            for label, principal in _subjects(policy):
                found += _probe_findings(judge, policy_id, probe, label, principal)
    return merged(found)


def _probe_findings(
    judge: Judge, policy_id: str, probe: _Probe, label: str, principal: Principal
) -> list[Finding]:
    """One restricted permit on one probe table for one principal: lifted with no grants, lifted
    once a grant names the principal's groups, or reachable through the warehouse."""
    engine, table = judge.engine, probe.table()
    checks = [(action, table, judge.context) for action in READ_ACTIONS]
    decisions = engine.decide_many(principal, checks)
    if engine.active is None or not any(d.allowed and policy_id in d.policy_ids for d in decisions):
        return []  # the probe does not satisfy this permit: nothing known here
    restrictions = engine.active.restrictions
    found = [
        replace(f, resource=probe.label)
        for f in judge.subject(label, principal, table)
        if f.policy_id == policy_id
    ]
    if any(f.kind is FindingKind.LIFTED for f in found) or not principal.groups:
        return found
    lifting: set[str] = set()
    groups = ",".join(sorted(principal.groups))
    for grant in (READERS_PROPERTY, WRITERS_PROPERTY):
        granted = engine.decide(principal, "planTableScan", probe.table({grant: groups}), judge.context)
        if granted.allowed:
            lifting.update(unrestricted_of(granted.policy_ids, restrictions))
    if lifting:
        found.append(
            Finding(FindingKind.LIFTED_IF_GRANTED, policy_id, probe.label, (label,), tuple(sorted(lifting)))
        )
    return found


def _probes(scope: Mapping[str, Any], warehouses: Sequence[str]) -> list[_Probe]:
    """The tables a resource scope covers: the table it names, a table in the namespace or
    warehouse it names, or a table of each warehouse when it names none."""
    entity = scope.get("entity") if scope.get("op") in ("==", "in") else (scope.get("in") or {}).get("entity")
    if not isinstance(entity, Mapping):
        return [_Probe(f'Cedarberg::Warehouse::"{w}"', w, (ANY_NAMESPACE,), ANY_TABLE) for w in warehouses]
    kind, entity_id = str(entity.get("type", "")), str(entity.get("id", ""))
    label = f'{kind}::"{entity_id}"'
    try:
        warehouse, levels, name = entities.parse_path(entity_id)
    except ResourceError:
        return []
    if kind == "Cedarberg::Table" and levels and name is not None:
        return [_Probe(label, warehouse, levels, name)]
    if kind == "Cedarberg::Namespace" and levels and name is None:
        return [_Probe(label, warehouse, levels, ANY_TABLE)]
    if kind == "Cedarberg::Warehouse" and not levels:
        return [_Probe(label, warehouse, (ANY_NAMESPACE,), ANY_TABLE)]
    return []  # a view or the catalog: restrictions govern table scans only


def _subjects(policy: Mapping[str, Any]) -> list[tuple[str, Principal]]:
    """The principals a permit's principal scope names: the one it names, a member of the group
    it names, or a member of each group its conditions name (a principal in no group if none)."""
    scope: Mapping[str, Any] = policy.get("principal") or {}
    entity = scope.get("entity") if scope.get("op") in ("==", "in") else (scope.get("in") or {}).get("entity")
    kind = PrincipalKind.SERVICE if scope.get("entity_type") == _SERVICE else PrincipalKind.USER
    if isinstance(entity, Mapping):
        entity_id = str(entity.get("id", ""))
        if entity.get("type") == _GROUP:
            return [(f"members of {entity_id}", _member(entity_id, kind))]
        named = PrincipalKind.SERVICE if entity.get("type") == _SERVICE else PrincipalKind.USER
        return [(entity_id, Principal(entity_id, named, frozenset(), AuthMethod.API_KEY))]
    groups = sorted(_condition_groups(policy.get("conditions") or []))
    if not groups:
        subject = review.no_group_member()
        return [(subject_label(subject), subject.principal)]
    return [(f"members of {group}", _member(group, kind)) for group in groups]


def _member(group: str, kind: PrincipalKind) -> Principal:
    return Principal(review.GROUP_MEMBER_PREFIX + group, kind, frozenset({group}), AuthMethod.API_KEY)


def _condition_groups(expr: Any) -> set[str]:
    """The groups a condition names: `Cedarberg::Group` entities and the strings a membership test
    on `principal.groups` compares with."""
    found: set[str] = set()
    if isinstance(expr, list):
        for item in expr:
            found |= _condition_groups(item)
    elif isinstance(expr, Mapping):
        entity = expr.get("__entity")
        if isinstance(entity, Mapping) and entity.get("type") == _GROUP:
            found.add(str(entity.get("id")))
        for op in ("contains", "containsAny", "containsAll"):
            node = expr.get(op)
            if isinstance(node, Mapping) and _reads_groups(node.get("left")):
                found |= _strings(node.get("right"))
        for value in expr.values():
            found |= _condition_groups(value)
    return found


def _reads_groups(expr: Any) -> bool:
    node = expr.get(".") if isinstance(expr, Mapping) else None
    return isinstance(node, Mapping) and node.get("attr") == "groups"


def _strings(expr: Any) -> set[str]:
    if isinstance(expr, str):
        return {expr}
    if isinstance(expr, list):
        return {s for item in expr for s in _strings(item)}
    if isinstance(expr, Mapping):
        return {s for key in ("Value", "Set") for s in _strings(expr.get(key))}
    return set()


def log_static_findings(engine: PolicyEngine, locations: Mapping[str, str] | None) -> list[Finding]:
    """Log a WARNING per `static_findings` finding of the active set (with structured fields);
    returns them."""
    findings = static_findings(engine, locations)
    for finding in findings:
        log.warning(
            "restriction not binding: %s; binds instead: %s",
            finding.message,
            finding.binds_instead,
            extra={
                "finding": finding.kind.value,
                "policy_id": finding.policy_id,
                "lifted_by": list(finding.lifted_by),
                "principals": list(finding.principals),
                "resource": finding.resource,
                "warehouse": finding.warehouse,
                "policy_version": engine.version,
            },
        )
    return findings
