"""Every decision a request is decided with goes through `decide`: decided, counted, audited.

The pipeline (`middlewares.pipeline`), the effect gate, and the decisions on a table's files
(vended credentials, remote signing) all decide here, so no decision escapes the metrics or the
audit log. A refusal made without Cedar (a path outside the table, a table whose roots are not
confined) is audited as a denial through `refuse`. Both tell a request being recorded as a plan
(`gateway.web.replay`) what they wrote.

What a record says beyond the decision: a denial carries the status the client is answered with
(404 where the caller may not know the object exists, `hidden_error`; else 403; null for a
denial that withholds something without refusing the request, e.g. credentials not vended) and
its `reason`; an allowed load or scan plan that restricted permits narrowed carries its
`restrictions` (policy ids, columns kept, row filter, masks: `restrictions.describe`), the ones
the handler applies. Every record of a policy decision carries its `cedar_request`, the request
exactly as Cedar decided it (`gateway.decision_record`), so that a change preview can decide it
again. All are part of the decision's record, so a replayed read writes them too, at no extra
cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from cedarberg.catalog.errors import (
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    NoSuchWarehouseError,
    NotFoundError,
)
from cedarberg.gateway.audit import AuditEvent, EventKind, Ruling
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz.authorizer import Check, Verdict, decide_checks
from cedarberg.gateway.authz.entities import EntityType, principal_uid
from cedarberg.gateway.authz.restrictions import describe
from cedarberg.gateway.decision_record import decided_request
from cedarberg.gateway.web import replay
from cedarberg.gateway.web.keys import PRINCIPAL, metrics, request_id_of, security

if TYPE_CHECKING:
    from cedarberg.gateway.authz.engine import Decision, PolicyEngine

_HIDDEN: Final[dict[EntityType, type[NotFoundError]]] = {
    EntityType.WAREHOUSE: NoSuchWarehouseError,
    EntityType.NAMESPACE: NoSuchNamespaceError,
    EntityType.TABLE: NoSuchTableError,
    EntityType.VIEW: NoSuchViewError,
}
# The actions whose Allow the handlers narrow by the permits' restrictions (loadTable tells the
# caller its read-restrictions, planTableScan enforces them: `authz.scan_grants`).
_RESTRICTED_ACTIONS: Final = frozenset({"loadTable", "planTableScan"})
FORBIDDEN_STATUS: Final = 403
HIDDEN_STATUS: Final = 404


def hidden_error(verdict: Verdict) -> type[NotFoundError] | None:
    """The not-found error a denial is answered with when the caller may not know the object
    exists; None when it is answered 403 (or allowed)."""
    kind = verdict.hidden_kind
    return None if kind is None else _HIDDEN.get(kind)


def _denial_detail(decision: Decision) -> dict[str, Any]:
    if decision.errors:
        return {
            "reason": "the policies could not be evaluated (default deny)",
            "errors": list(decision.errors),
        }
    if decision.policy_ids:
        return {"reason": "a forbid policy applies"}
    return {"reason": "no policy permits it"}


def _allow_detail(policies: PolicyEngine, check: Check, decision: Decision) -> dict[str, Any] | None:
    if check.action not in _RESTRICTED_ACTIONS:
        return None
    described = describe(policies.scan_rules(decision))
    return {"restrictions": described} if described else None


def decide(
    request: web.Request,
    operation: str,
    checks: Sequence[Check],
    *,
    denial_status: int | None = FORBIDDEN_STATUS,
    hides: bool = False,
) -> Verdict:
    """Decide `checks` for the request's principal in order, stopping at the first denial
    (`authorizer.decide_checks`); count every decision made and write it to the audit log.
    A denial is recorded with the status the caller answers it with: 404 where the caller
    `hides` what it may not see (`hidden_error`, the pipeline), else `denial_status` (None: the
    denial refuses nothing by itself).
    Returns the verdict; raises nothing of its own (a denial is a verdict, not an error)."""
    principal: Principal = request[PRINCIPAL]
    sec = security(request)
    verdict = decide_checks(sec.policies, principal, operation, checks)
    stats = metrics(request)
    principal_json = sec.policies.principal_json(principal)  # rendered once per principal object
    if hides and not verdict.allowed and hidden_error(verdict) is not None:
        denial_status = HIDDEN_STATUS
    for check, decision in verdict.decisions:
        counter = stats.child(stats.decisions, check.action, "allow" if decision.allowed else "deny")
        counter.inc()
        event = AuditEvent(
            EventKind.DECISION,
            request_id=request_id_of(request),
            principal=principal,
            action=check.action,
            resource=str(check.resource),
            decision=Ruling.ALLOW if decision.allowed else Ruling.DENY,
            policy_ids=decision.policy_ids,
            policy_version=decision.version,
            status=None if decision.allowed else denial_status,
            client_address=request.remote,
            detail=_allow_detail(sec.policies, check, decision)
            if decision.allowed
            else _denial_detail(decision),
            cedar_request=decided_request(
                principal_uid(principal),
                principal_json,
                check.resource.uid,
                check.resource.entities_json,
                check.context.to_cedar(),
            ),
        )
        sec.audit.record(event)
        replay.note_decision(event, counter)
    return verdict


def refuse(
    request: web.Request,
    action: str,
    resource: str,
    detail: Mapping[str, str],
    status: int | None = FORBIDDEN_STATUS,
) -> None:
    """Audit a denial of `action` on `resource` that no policy made (the gateway's own rule, said
    in `detail`), answered with `status` (None: it refuses nothing by itself). The caller raises
    the error it answers with; this raises nothing."""
    sec = security(request)
    replay.note_unreplayable()
    sec.audit.record(
        AuditEvent(
            EventKind.DECISION,
            request_id=request_id_of(request),
            principal=request[PRINCIPAL],
            action=action,
            resource=resource,
            decision=Ruling.DENY,
            policy_version=sec.policies.version,
            status=status,
            client_address=request.remote,
            detail=detail,
        )
    )
