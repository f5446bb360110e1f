"""Cedar's `actAs` decision for the delegation grant, and the audit records of every outcome.

`CedarDelegationJudge` is the `gateway.authn.delegation.DelegationJudge` the token endpoint uses:

- `decide`: principal = the actor (the engine's API key principal, with its `tls_subject`),
  action `actAs`, resource = the user as a `Cedarberg::User` entity in its groups (so a policy can
  say `resource in Cedarberg::Group::"analysts"`), context = `DelegationContext` in the schema.
  Anything but Allow is a refusal. One decision record names the actor as principal and the user
  as resource, with the determining policies;
- `refuse`: a refusal before any decision (no or a bad actor, a bad subject, a user outside the
  directory) is recorded as a denial of `actAs` by the gateway's own rule, with the reason.

The records go to the audit log like every decision; neither method raises on a denial.
"""

from __future__ import annotations

from typing import Any

import orjson

from cedarberg.gateway.audit import AuditEvent, AuditLog, EventKind, Ruling
from cedarberg.gateway.authn.principal import Principal, PrincipalKind
from cedarberg.gateway.authn.subject_token import DelegationFacts
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import EntityType, EntityUid, principal_entities, principal_uid
from cedarberg.gateway.decision_record import decided_request
from cedarberg.gateway.logs import current_request_id

ACT_AS = "actAs"
_UNKNOWN_USER = "(not established)"


def delegation_context(
    actor: Principal, facts: DelegationFacts, client: str, refresh: bool
) -> dict[str, Any]:
    """The Cedar context of an `actAs` decision (`DelegationContext` in the schema)."""
    context: dict[str, Any] = {
        "auth_method": actor.auth_method.value,
        "client_address": client,
        "subject_token_type": facts.subject_token_type,
        "subject_issuer": facts.subject_issuer,
        "refresh": refresh,
    }
    tls_subject = actor.attributes.get("tls_subject")
    if tls_subject is not None:
        context["tls_subject"] = tls_subject
    for name in ("source", "trino_catalog", "trino_version"):
        value = getattr(facts, name)
        if value is not None:
            context[name] = value
    return context


def _user_uid(user: Principal) -> EntityUid:
    # A delegated user is decided on as a User whatever kind its issuer gave it: `actAs` applies
    # to User resources only.
    return EntityUid.of(EntityType.USER, user.id)


def _entities(actor: Principal, user: Principal) -> list[dict[str, Any]]:
    """The actor, the user (as a User resource) and their groups, each entity once."""
    as_user = Principal(user.id, PrincipalKind.USER, user.groups, user.auth_method, user.attributes)
    seen: set[str] = set()
    entities = []
    for entity in [*principal_entities(actor), *principal_entities(as_user)]:
        key = str(entity["uid"])
        if key not in seen:
            seen.add(key)
            entities.append(entity)
    return entities


class CedarDelegationJudge:
    """Decides `actAs` with the active policy set and audits every delegation outcome."""

    def __init__(self, policies: PolicyEngine, audit: AuditLog) -> None:
        self._policies = policies
        self._audit = audit

    def decide(
        self, actor: Principal, user: Principal, facts: DelegationFacts, client: str, refresh: bool
    ) -> bool:
        """Whether `actor` may act for `user`; the decision is audited."""
        resource = _user_uid(user)
        context = delegation_context(actor, facts, client, refresh)
        entities = _entities(actor, user)
        decision = self._policies.decide_request(principal_uid(actor), ACT_AS, resource, context, entities)
        detail: dict[str, Any] = {"refresh": refresh, "subject_issuer": facts.subject_issuer}
        if decision.errors:
            detail["errors"] = list(decision.errors)
        self._audit.record(
            AuditEvent(
                EventKind.DECISION,
                request_id=current_request_id(),
                principal=actor,
                action=ACT_AS,
                resource=str(resource),
                decision=Ruling.ALLOW if decision.allowed else Ruling.DENY,
                policy_ids=decision.policy_ids,
                policy_version=decision.version,
                client_address=client,
                detail=detail,
                # The entities as decided on: the actor's first, then the user's (deduplicated).
                cedar_request=decided_request(
                    principal_uid(actor),
                    self._policies.principal_json(actor),
                    resource,
                    orjson.dumps(entities[len(principal_entities(actor)) :]).decode(),
                    context,
                ),
            )
        )
        return decision.allowed

    def refuse(self, actor: Principal | None, user: str | None, reason: str, client: str) -> None:
        """Audit a delegation refused before any decision (the gateway's own rule)."""
        self._audit.record(
            AuditEvent(
                EventKind.DECISION,
                request_id=current_request_id(),
                principal=actor,
                action=ACT_AS,
                resource=str(EntityUid.of(EntityType.USER, user)) if user is not None else _UNKNOWN_USER,
                decision=Ruling.DENY,
                policy_version=self._policies.version,
                client_address=client,
                detail={"reason": reason},
            )
        )
