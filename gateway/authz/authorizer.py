"""Authorize an operation: plan its Cedar checks from the operation table, decide them, and say
whether a denial must look like absence.

    verdict = authorize(engine, principal, "renameTable", context, source, target=target)
    if not verdict.allowed:
        raise (NotFound(verdict.hidden_kind) if verdict.hidden else Forbidden())

Rules (from the operation table, `operations.py`):
- an operation is allowed only if every one of its checks is allowed (checks stop at the first deny);
- rename: renameX and dropX on the source, createX on the target;
- commitTransaction: commitTransaction and updateTable on every table;
- the effect of a planned change (`effect_checks`, `EFFECT_CHECKS`) is decided again, with the
  effect in the context, before anything is written; a change that creates its object (a staged
  create's commit, a rename's target) also needs the create action there;
- a denied caller who may not see the resource (or, for a create, its parent) gets `hidden=True`:
  answer 404 as if it did not exist. Visibility is the `*Exists` action of the kind
  (`VISIBILITY_ACTIONS`); listings keep only visible entries (`filter_visible`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, Unpack

from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.entities import (
    EntityType,
    Resource,
)
from cedarberg.gateway.authz.errors import ResourceError, UnknownOperationError
from cedarberg.gateway.authz.operations import (
    CREATE_ACTIONS,
    EFFECT_CHECKS,
    VISIBILITY_ACTIONS,
    Extra,
    OperationSpec,
    Scope,
    operation_spec,
)

if TYPE_CHECKING:  # annotations only: the engine is passed in, so deciding imports no Cedar
    from cedarberg.gateway.authz.engine import Decision, PolicyEngine

# The resource kinds each operation scope decides on.
SCOPE_KINDS: dict[Scope, frozenset[EntityType]] = {
    Scope.CATALOG: frozenset({EntityType.CATALOG}),
    Scope.WAREHOUSE: frozenset({EntityType.WAREHOUSE}),
    Scope.CONTAINER: frozenset({EntityType.WAREHOUSE, EntityType.NAMESPACE}),
    Scope.NAMESPACE: frozenset({EntityType.NAMESPACE}),
    Scope.TABLE: frozenset({EntityType.TABLE}),
    Scope.VIEW: frozenset({EntityType.VIEW}),
    Scope.API_KEY: frozenset({EntityType.API_KEY}),
}


@dataclass(frozen=True, slots=True)
class Check:
    action: str
    resource: Resource
    context: RequestContext


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of an operation. `decisions` lists every decision made, for the audit log."""

    operation: str
    allowed: bool
    decisions: tuple[tuple[Check, Decision], ...]
    denied: Check | None = None
    hidden: bool = False  # denied, and the caller may not know the resource exists: answer 404
    hidden_resource: Resource | None = None  # what to report absent (the parent, for a create)

    @property
    def hidden_kind(self) -> EntityType | None:
        return self.hidden_resource.kind if self.hidden and self.hidden_resource else None


def _require(spec: OperationSpec, resource: Resource | None, what: str = "resource") -> Resource:
    if resource is None:
        raise ResourceError(f"{spec.operation} needs a {what}")
    allowed = SCOPE_KINDS[spec.scope]
    if resource.kind not in allowed:
        kinds = ", ".join(sorted(k.value for k in allowed))
        raise ResourceError(f"{spec.operation} decides on a {kinds}, not {resource.uid}")
    return resource


def plan_checks(
    operation: str,
    context: RequestContext,
    resource: Resource | None = None,
    *,
    target: Resource | None = None,
    tables: Sequence[Resource] = (),
) -> list[Check]:
    """The Cedar checks `operation` needs. Raises `UnknownOperationError`, or `ResourceError` when the
    arguments do not fit the operation (a programming error, not a denial)."""
    spec = operation_spec(operation)
    if spec.action is None:
        return []
    if spec.extra is Extra.EACH_TABLE:
        if not tables:
            raise ResourceError(f"{operation} needs the tables of the transaction")
        checks: list[Check] = []
        for table in tables:
            checks.append(Check(spec.action, _require(spec, table), context))
            checks.append(Check("updateTable", table, context))
        return checks
    subject = _require(spec, resource)
    checks = [Check(spec.action, subject, context)]
    if spec.extra in (Extra.RENAME_TABLE, Extra.RENAME_VIEW):
        new = _require(spec, target, "target")
        kind = "Table" if spec.extra is Extra.RENAME_TABLE else "View"
        checks.append(Check(f"drop{kind}", subject, context))
        checks.append(Check(f"create{kind}", new, context))
    return checks


def effect_checks(operation: str, resource: Resource, context: RequestContext) -> list[Check]:
    """The checks of one effect of `operation` on `resource`; `context` carries the effect.
    Raises `UnknownOperationError` for an operation that submits no effects (a programming error)."""
    planned = EFFECT_CHECKS.get(operation)
    if planned is None:
        raise UnknownOperationError(f"operation {operation!r} has no effect checks")
    actions = planned.arriving if context.changes.creates else planned.existing
    return [Check(action, resource, context) for action in actions]


def is_visible(
    engine: PolicyEngine, principal: Principal, resource: Resource, context: RequestContext
) -> bool:
    """Whether `principal` may know that `resource` exists (the catalog root always exists)."""
    action = VISIBILITY_ACTIONS.get(resource.kind)
    if action is None:
        return True
    return engine.decide(principal, action, resource, context).allowed


def filter_visible(
    engine: PolicyEngine,
    principal: Principal,
    context: RequestContext,
    resources: Sequence[Resource],
) -> list[Resource]:
    """The resources `principal` may see, in their order (for listings: filter, never deny)."""
    checked = [(i, r) for i, r in enumerate(resources) if r.kind in VISIBILITY_ACTIONS]
    decisions = engine.decide_many(principal, [(VISIBILITY_ACTIONS[r.kind], r, context) for _, r in checked])
    hidden = {i for (i, _), d in zip(checked, decisions, strict=True) if not d.allowed}
    return [r for i, r in enumerate(resources) if i not in hidden]


class OtherSubjects(TypedDict, total=False):
    """What some operations decide on beside their resource (see `plan_checks`)."""

    target: Resource | None  # a rename's destination
    tables: Sequence[Resource]  # a transaction's tables


def authorize(
    engine: PolicyEngine,
    principal: Principal,
    operation: str,
    context: RequestContext,
    resource: Resource | None = None,
    **others: Unpack[OtherSubjects],
) -> Verdict:
    """Decide `operation` for `principal`.

    `resource` is what the operation's scope names (for a create: the new object, built with its
    parent chain); `target` is a rename's destination; `tables` are a transaction's tables.
    Public operations are allowed with no decision. Raises only for arguments that do not fit the
    operation (`plan_checks`).
    """
    return decide_checks(engine, principal, operation, plan_checks(operation, context, resource, **others))


def decide_checks(
    engine: PolicyEngine, principal: Principal, operation: str, checks: Sequence[Check]
) -> Verdict:
    """Decide `checks` in order, stopping at the first denial (see `Verdict`)."""
    made: list[tuple[Check, Decision]] = []
    for check in checks:
        decision = engine.decide(principal, check.action, check.resource, check.context)
        made.append((check, decision))
        if not decision.allowed:
            subject = check.resource.parent if check.action in CREATE_ACTIONS else check.resource
            hidden = subject is not None and not is_visible(engine, principal, subject, check.context)
            return Verdict(operation, False, tuple(made), check, hidden, subject if hidden else None)
    return Verdict(operation, True, tuple(made))
