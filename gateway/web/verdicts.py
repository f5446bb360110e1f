"""Every decision a request is decided with goes through `decide`: decided, counted, audited.

The pipeline (`middlewares.pipeline`), the effect gate, and the decisions on a table's files
(vended credentials, remote signing) all decide here, so no decision escapes the metrics or the
audit log. A refusal made without Cedar (a path outside the table, a table whose roots are not
confined) is audited as a denial through `refuse`. Both tell a request being recorded as a plan
(`gateway.web.replay`) what they wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aiohttp import web

from cedarberg.gateway.audit import AuditEvent, EventKind, Ruling
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz.authorizer import Check, Verdict, decide_checks
from cedarberg.gateway.web import replay
from cedarberg.gateway.web.keys import PRINCIPAL, metrics, request_id_of, security


def decide(request: web.Request, operation: str, checks: Sequence[Check]) -> Verdict:
    """Decide `checks` for the request's principal in order, stopping at the first denial
    (`authorizer.decide_checks`); count every decision made and write it to the audit log.
    Returns the verdict; raises nothing of its own (a denial is a verdict, not an error)."""
    principal: Principal = request[PRINCIPAL]
    sec = security(request)
    verdict = decide_checks(sec.policies, principal, operation, checks)
    stats = metrics(request)
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
            client_address=request.remote,
        )
        sec.audit.record(event)
        replay.note_decision(event, counter)
    return verdict


def refuse(request: web.Request, action: str, resource: str, detail: Mapping[str, str]) -> None:
    """Audit a denial of `action` on `resource` that no policy made (the gateway's own rule, said
    in `detail`). The caller raises the error it answers with; this raises nothing."""
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
            client_address=request.remote,
            detail=detail,
        )
    )
