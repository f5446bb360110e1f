"""Access review: who may do what on a resource, and what one principal may do in a namespace.

The gateway decides "may P do A on R?" one request at a time; security teams ask the inverse. Two
answers, both made with the active policy set:

- `review_resource`: for a resource and its actions, (1) the **residuals** of a partial evaluation
  with the principal and the context unknown (`residuals.py`): the conditions under which *any*
  principal is allowed or forbidden, e.g. `principal.groups.containsAny(["etl"])` or a guard on
  `context.refs`; and (2) the **definite** answer for every known subject (`Subject`), decided
  concretely, exactly as the gateway decides a request (`PolicyEngine.decide_many`), with the
  determining policies and the scan restrictions each Allow carries (`restrictions.describe`).
- `review_principal`: for one principal (its groups given), every action allowed on each object
  given (a namespace and the tables and views in it), with determining policies and restrictions.

Known subjects (`known_subjects`), and what is not known:

- every principal of an active (unrevoked, unexpired) API key, with the key's kind and groups;
- the configured anonymous principal, if any;
- for every group named by a residual or held by one of those principals, a *member of only that
  group* (`member-of:<group>`), standing for every principal the gateway cannot enumerate (any OIDC
  subject) that carries the group and is not named by a policy; and a member of no group.
A policy naming one principal by id that no key holds (an OIDC subject) still shows as a residual
(`principal == Cedarberg::User::"oidc:..."`): nothing is left out silently.

Concrete decisions use one stated context (`ReviewContext`: authentication method, client address,
no change); whatever depends on the context is in the residuals (`context_dependent`), not guessed.
Work is bounded: at most `MAX_SUBJECTS` subjects and `MAX_OBJECTS` objects; beyond them the
answer says `truncated`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import cedarpy

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz.authorizer import SCOPE_KINDS
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.engine import Decision, PolicyEngine
from cedarberg.gateway.authz.entities import EntityType, EntityUid, Resource
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.operations import OPERATIONS
from cedarberg.gateway.authz.residuals import Residual, residuals_of
from cedarberg.gateway.authz.restrictions import describe

MAX_SUBJECTS = 2000  # principals and groups decided per review
MAX_OBJECTS = 500  # tables and views reviewed for one principal
GROUP_MEMBER_PREFIX = "member-of:"  # never a real principal id (those start key:, oidc:, anonymous:)
NO_GROUP_ID = "member-of-no-group"


def actions_for(kind: EntityType) -> list[str]:
    """Every Cedar action the gateway decides on a resource of `kind` (the operation table, which
    the schema must match: `contract.py`), in table order."""
    found: dict[str, None] = {}
    for spec in OPERATIONS.values():
        if spec.action is not None and kind in SCOPE_KINDS.get(spec.scope, frozenset()):
            found[spec.action] = None
    return list(found)


def chosen_actions(kind: EntityType, wanted: Sequence[str]) -> list[str]:
    """`wanted` (all of `kind`'s actions if empty), each checked to apply to `kind`. Raises
    `ResourceError` naming the ones that do not."""
    applicable = actions_for(kind)
    if not wanted:
        return applicable
    wrong = [action for action in wanted if action not in applicable]
    if wrong:
        raise ResourceError(
            f"{', '.join(wrong)} not decided on a {kind.value.lower()}; its actions: {', '.join(applicable)}"
        )
    return list(dict.fromkeys(wanted))


# -- subjects -------------------------------------------------------------------------------------


class SubjectSource(StrEnum):
    API_KEY = "api-key"  # the principal of an active API key
    ANONYMOUS = "anonymous"  # the configured anonymous principal
    STATED = "stated"  # given by the caller of the review
    GROUP = "group"  # any member of exactly this group, not named by a policy
    NO_GROUP = "no-group"  # any principal in no group, not named by a policy


@dataclass(frozen=True, slots=True)
class Subject:
    principal: Principal
    source: SubjectSource
    group: str | None = None  # for GROUP

    def to_json(self) -> dict[str, Any]:
        if self.source is SubjectSource.GROUP:
            return {"group": self.group}
        return {
            "id": self.principal.id,
            "kind": self.principal.kind.value,
            "groups": sorted(self.principal.groups),
            "source": self.source.value,
        }


@dataclass(frozen=True, slots=True)
class ReviewContext:
    """The context concrete decisions are made with (the same for every subject)."""

    auth_method: AuthMethod = AuthMethod.API_KEY
    client_address: str = "127.0.0.1"

    def request(self) -> RequestContext:
        """The Cedar context: this method and address, no change, no client certificate."""
        return RequestContext(self.auth_method.value, self.client_address)

    def to_json(self) -> dict[str, Any]:
        return {"auth_method": self.auth_method.value, "client_address": self.client_address}


def group_member(group: str) -> Subject:
    principal = Principal(GROUP_MEMBER_PREFIX + group, PrincipalKind.USER, frozenset({group}), AuthMethod.JWT)
    return Subject(principal, SubjectSource.GROUP, group)


def no_group_member() -> Subject:
    return Subject(
        Principal(NO_GROUP_ID, PrincipalKind.USER, frozenset(), AuthMethod.JWT), SubjectSource.NO_GROUP
    )


@dataclass(frozen=True, slots=True)
class KnownPrincipal:
    """A principal the gateway can enumerate (an API key's, the anonymous one, or a stated one)."""

    principal: Principal
    source: SubjectSource


@dataclass(frozen=True, slots=True)
class Audience:
    """The subjects a review decides, and whether their list was cut at its bound."""

    subjects: list[Subject]
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Listing:
    """The objects a principal review decides on, and whether their list was cut at its bound."""

    objects: list[Resource]
    truncated: bool = False


def known_subjects(
    principals: Iterable[KnownPrincipal], groups: Iterable[str], limit: int = MAX_SUBJECTS
) -> Audience:
    """The subjects to decide: each distinct principal (by id and groups), a member of each group
    named in `groups` or held by a principal, and a member of no group; at most `limit`."""
    subjects: dict[tuple[str, frozenset[str]], Subject] = {}
    all_groups: set[str] = set(groups)
    for known in principals:
        key = (known.principal.id, known.principal.groups)
        subjects.setdefault(key, Subject(known.principal, known.source))
        all_groups.update(known.principal.groups)
    found = [*subjects.values(), *(group_member(g) for g in sorted(all_groups)), no_group_member()]
    return Audience(found[:limit], len(found) > limit)


# -- reviewing a resource -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Allowed:
    """One subject allowed one action: the permits that allowed it and the restrictions they carry."""

    subject: Subject
    policy_ids: tuple[str, ...]
    restrictions: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {
            **self.subject.to_json(),
            "policy_ids": list(self.policy_ids),
            "restrictions": self.restrictions,
        }


@dataclass(frozen=True, slots=True)
class ActionReview:
    action: str
    everyone: bool  # allowed whoever the principal is (in the stated context)
    allowed: list[Allowed] = field(default_factory=list)
    residuals: list[Residual] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self, locations: Mapping[str, str]) -> dict[str, Any]:
        principals = [a.to_json() for a in self.allowed if a.subject.source is not SubjectSource.GROUP]
        return {
            "action": self.action,
            "everyone": self.everyone,
            "principals": [p for p in principals if p.get("source") != SubjectSource.NO_GROUP.value],
            "groups": [a.to_json() for a in self.allowed if a.subject.source is SubjectSource.GROUP],
            "members_of_no_group": any(a.subject.source is SubjectSource.NO_GROUP for a in self.allowed),
            "conditions": [r.to_json(locations.get(r.policy_id)) for r in self.residuals],
            "errors": self.errors,
        }


@dataclass(frozen=True, slots=True)
class ResourceReview:
    resource: Resource
    version: str
    context: ReviewContext
    actions: list[ActionReview]
    audience: Audience

    def to_json(self, locations: Mapping[str, str]) -> dict[str, Any]:
        return {
            "resource": str(self.resource.uid),
            "type": self.resource.kind.value.lower(),
            "version": self.version,
            "context": self.context.to_json(),
            "subjects_decided": len(self.audience.subjects),
            "truncated": self.audience.truncated,
            "actions": [a.to_json(locations) for a in self.actions],
        }


def partial(
    engine: PolicyEngine, action: str, resource: Resource, context: RequestContext | None
) -> cedarpy.PartialAuthzResult:
    """Cedar's partial evaluation of `action` on `resource` with the principal unknown (and the
    context too when `context` is None). Raises `ResourceError` when no policy set is active."""
    active = engine.active
    if active is None:
        raise ResourceError("no policy set is active")
    entities = cedarpy.Entities.from_json_str(resource.entities_json, active.schema)
    request: dict[str, Any] = {
        "action": str(EntityUid.action(action)),
        "resource": str(resource.uid),
        "context": context.to_cedar() if context is not None else None,
    }
    return cedarpy.is_authorized_partial(request, active.policies, entities, active.schema)


def review_resource(
    engine: PolicyEngine,
    resource: Resource,
    actions: Sequence[str],
    audience: Audience,
    context: ReviewContext = ReviewContext(),
) -> ResourceReview:
    """Who may perform each of `actions` on `resource`: the residual conditions for anyone, and
    the definite answer for each subject (decided as the gateway decides requests)."""
    version = engine.version
    by_action: dict[str, list[Allowed]] = {action: [] for action in actions}
    errors: dict[str, set[str]] = {action: set() for action in actions}
    checks = [(action, resource, context.request()) for action in actions]
    for subject in audience.subjects:
        decisions = engine.decide_many(subject.principal, checks)
        for decision in decisions:
            errors[decision.action].update(decision.errors)
            if decision.allowed and decision.version == version:
                by_action[decision.action].append(_allowed(engine, subject, decision))
    reviews = []
    for action in actions:
        anyone = partial(engine, action, resource, context.request())
        residual = residuals_of(partial(engine, action, resource, None))
        reviews.append(
            ActionReview(
                action=action,
                everyone=anyone.decision == cedarpy.Decision.Allow,
                allowed=by_action[action],
                residuals=residual,
                errors=sorted(errors[action] | set(anyone.diagnostics.errors)),
            )
        )
    return ResourceReview(resource, version, context, reviews, audience)


def residual_groups(engine: PolicyEngine, resource: Resource, actions: Sequence[str]) -> set[str]:
    """The groups the residuals of `actions` on `resource` name (to decide a member of each)."""
    groups: set[str] = set()
    for action in actions:
        for residual in residuals_of(partial(engine, action, resource, None)):
            groups |= residual.groups
    return groups


def _allowed(engine: PolicyEngine, subject: Subject, decision: Decision) -> Allowed:
    policy_ids, restrictions = determining(engine, decision)
    return Allowed(subject, policy_ids, restrictions)


def determining(engine: PolicyEngine, decision: Decision) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """An Allow's determining policies and the restrictions they carry, ordered by policy id: Cedar
    reports them in no fixed order, and a review is compared and diffed (the endpoint's with the
    command line's, this week's with last week's)."""
    restrictions = sorted(describe(engine.scan_rules(decision)), key=lambda rule: str(rule["policy_id"]))
    return tuple(sorted(decision.policy_ids)), restrictions


# -- reviewing a principal ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObjectAccess:
    """What one principal may do on one object."""

    resource: Resource
    allowed: list[tuple[str, tuple[str, ...], list[dict[str, Any]]]]  # action, policy ids, restrictions

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": str(self.resource.uid),
            "type": self.resource.kind.value.lower(),
            "name": self.resource.name,
            "actions": [
                {"action": action, "policy_ids": list(policy_ids), "restrictions": restrictions}
                for action, policy_ids, restrictions in self.allowed
            ],
        }


@dataclass(frozen=True, slots=True)
class PrincipalReview:
    principal: Principal
    groups_from: str  # "request", "api-key" or "none"
    version: str
    context: ReviewContext
    objects: list[ObjectAccess]
    truncated: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "principal": self.principal.id,
            "kind": self.principal.kind.value,
            "groups": sorted(self.principal.groups),
            "groups_from": self.groups_from,
            "version": self.version,
            "context": self.context.to_json(),
            "truncated": self.truncated,
            "objects": [o.to_json() for o in self.objects],
        }


def review_principal(
    engine: PolicyEngine,
    principal: Principal,
    listing: Listing,
    context: ReviewContext = ReviewContext(),
    *,
    groups_from: str = "request",
) -> PrincipalReview:
    """Every action `principal` may perform on each of `objects` (a namespace, its tables and views),
    with the determining policies and restrictions of each Allow."""
    objects = listing.objects
    request_context = context.request()
    checks = [(action, obj, request_context) for obj in objects for action in actions_for(obj.kind)]
    decisions = iter(engine.decide_many(principal, checks))
    found = []
    for obj in objects:
        allowed = []
        for _action in actions_for(obj.kind):
            decision = next(decisions)
            if decision.allowed:
                allowed.append((decision.action, *determining(engine, decision)))
        found.append(ObjectAccess(obj, allowed))
    return PrincipalReview(principal, groups_from, engine.version, context, found, listing.truncated)
