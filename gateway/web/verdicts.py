"""What becomes of every decision a request is decided with: counted and audited."""

from __future__ import annotations

from aiohttp import web

from gateway.audit import Decision as AuditDecision
from gateway.authn.principal import Principal
from gateway.authz.authorizer import Verdict
from gateway.web.keys import metrics, request_id_of, security


def record_verdict(request: web.Request, principal: Principal, verdict: Verdict) -> None:
    """Count every decision of `verdict` and write it to the audit log."""
    stats, audit = metrics(request), security(request).audit
    for check, decision in verdict.decisions:
        stats.child(stats.decisions, check.action, "allow" if decision.allowed else "deny").inc()
        audit.record_decision(
            request_id=request_id_of(request),
            principal=principal,
            action=check.action,
            resource=str(check.resource),
            decision=AuditDecision.ALLOW if decision.allowed else AuditDecision.DENY,
            policy_ids=decision.policy_ids,
            policy_version=decision.version,
            client_address=request.remote,
        )
