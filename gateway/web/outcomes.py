"""A mutation's outcome: audited, and acknowledged only once its record is durable.

The pipeline's `handle` stage (`middlewares.handle`) calls `acknowledge` after a mutation's
handler. Its decisions were made durable before the handler ran (and the effect gate's before the
catalog wrote); this is the other half: a change is answered 2xx only once the record of its outcome is
on disk (`AuditLog.durable`).
"""

from __future__ import annotations

import dataclasses

from aiohttp import web

from cedarberg.gateway.audit import AuditEvent, AuditUnavailableError, EventKind, Outcome
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.web.keys import AUDIT_DETAIL, request_id_of, security

APPLIED_NOT_RECORDED = (
    "the change was applied, but its audit record could not be written yet: it is not "
    "acknowledged; the record is kept and written when the audit log recovers"
)


async def acknowledge(
    request: web.Request,
    operation: str,
    principal: Principal,
    resource: str,
    response: web.StreamResponse,
) -> None:
    """Audit a mutation's outcome; acknowledge a change only once that record is durable.

    The record is kept whatever the destination's state (`keep`): the change is applied. If it
    cannot be made durable now, the answer is 503 (`AuditUnavailableError`, naming the change as
    applied and unacknowledged) and a second record says so; both are written on recovery.
    The record's detail is what the handler left under `keys.AUDIT_DETAIL`, if anything."""
    sec = security(request)
    event = AuditEvent(
        EventKind.MUTATION,
        request_id=request_id_of(request),
        principal=principal,
        action=operation,
        resource=resource,
        outcome=Outcome.SUCCESS if response.status < 400 else Outcome.FAILURE,
        status=response.status,
        policy_version=sec.policies.version,
        client_address=request.remote,
        # What the handler made that the decided resource cannot name (a created key's id).
        detail=request.get(AUDIT_DETAIL),
    )
    sec.audit.record(event, keep=True)
    if response.status >= 400:
        return
    try:
        await sec.audit.durable()
    except AuditUnavailableError:
        sec.audit.record(
            dataclasses.replace(
                event, status=503, detail={"acknowledged": False, "reason": "audit log unavailable"}
            ),
            keep=True,
        )
        raise AuditUnavailableError(APPLIED_NOT_RECORDED) from None
