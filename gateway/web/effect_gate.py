"""The effect gate: Cedar decides what a planned change does before the catalog writes it.

The pipeline decides a request on its operation (may this caller commit to this table at all?).
For changes, that is not enough: the same end state can be asked for in many ways. So the catalog
plans each change (requirements checked, updates applied), derives its effect
(`catalog.effects.Effect`) and hands every effect of the operation to the gate built here before
anything is written. The gate decides each effect with the operation's effect checks
(`gateway.authz.operations.EFFECT_CHECKS`) on the object's resource, built from the registry's
current grants, with the effect as the context; a multi-table transaction is written only if
every table's effect is allowed. Every decision is audited and counted like the pipeline's, and
its record is durable before the catalog writes (`AuditLog.durable`).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from cedarberg.catalog.effects import Effect, EffectGate
from cedarberg.catalog.lookups import VIEW
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz.authorizer import Check, effect_checks
from cedarberg.gateway.authz.context import ChangeSummary, RequestContext
from cedarberg.gateway.web import http, resources, verdicts
from cedarberg.gateway.web.errors import ForbiddenError
from cedarberg.gateway.web.keys import PRINCIPAL, route_of, security, services


def effect_gate(request: web.Request) -> EffectGate:
    """The gate for the changes of `request`'s operation (the route's operation id)."""
    route = route_of(request)
    if route is None:
        raise TypeError(f"{request.path} has no route: no operation to decide effects for")
    operation = route.operation

    async def gate(effects: Sequence[Effect]) -> None:
        svc = services(request)
        principal: Principal = request[PRINCIPAL]
        base = RequestContext.of(principal, request.remote or "")
        warehouse = http.prefix(request) or svc.ctx.default_warehouse
        checks: list[Check] = []
        for effect in effects:
            # On the grants as they are in the database: read here, or by the catalog with the
            # version it planned on (the same statement as its pointer, in this request).
            view = effect.kind == VIEW
            if effect.namespaces_read is None:
                resource = await resources.object_of(svc, warehouse, effect.identifier, view, fresh=True)
            else:
                read = resources.ChainRead(
                    warehouse, effect.identifier.namespace.levels, effect.namespaces_read
                )
                resource = await resources.object_on_read(svc, read, effect.identifier, view)
            context = base.with_changes(ChangeSummary.of_effect(effect))
            checks += effect_checks(operation, resource, context)
        verdict = verdicts.decide(request, operation, checks)
        if not verdict.allowed and verdict.denied is not None:
            denied = verdict.denied
            raise ForbiddenError(
                f"Not allowed: {operation}: {denied.action} on {denied.resource.uid.id} "
                f"({_describe(denied.context.changes)})"
            )
        # The decisions that allow these effects are on record before the catalog writes
        # anything; if they cannot be, AuditUnavailableError (503) and nothing is written.
        await security(request).audit.durable()

    return gate


def _describe(changes: ChangeSummary) -> str:
    """The effect that was refused, for the caller's error message (its own change: no secret)."""
    parts = [", ".join(sorted(changes.update_kinds)) or "no content change"]
    if changes.refs:
        parts.append("refs " + ", ".join(sorted(changes.refs)))
    if changes.creates:
        parts.append("creates the object")
    return "; ".join(parts)
