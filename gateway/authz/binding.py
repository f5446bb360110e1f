"""Where a column/row restriction cannot bind, and what binds instead.

A restricted permit (`@columns`, `@row_filter`, `@mask`: `restrictions.py`) narrows what the
gateway plans and tells a reader. It binds a principal only when

(a) no unrestricted permit also allows that principal the same read: Cedar's permits add up and
    the gateway reads the annotations of every permit that allowed (`restrictions.rules_of`), so
    one unrestricted permit (a namespace grant, the admins' permit) lifts the restriction; and
(b) the principal's engines cannot read the table's files directly: a `file://` warehouse is a
    directory any engine on a host that sees it reads whole, whatever the gateway plans; on an
    object store the gateway vends credentials or signs requests for a restricted principal only
    when Cedar trusts its client with `readRestrictedData` (`gateway.web.file_access`), and then
    that client, not the gateway, enforces the restriction.

This module finds every place a restricted permit falls short of that, as `Finding`s, each with one
sentence and what binds instead. It decides with the engine exactly as the gateway decides
requests (`PolicyEngine.decide_many`, determining policies), never by reading policy text alone:

- `Judge.decision`: an Allow of a read (explain): the principal's reads of that table, decided
  together with the grants and context of the explained request;
- `resource_findings` / `principal_findings`: the decisions of an access review (`review.py`),
  with the registry's live grants when the review has them;
- `binding_static.static_findings`: what is known without the registry, when a set loads (the
  loader's warnings, `policies validate`).

Warehouses are given as `locations` (name -> normalized location); None means not known (an
offline tool without settings): then only (a) is checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz import review
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.engine import Decision, PolicyEngine
from cedarberg.gateway.authz.entities import EntityType, Resource
from cedarberg.gateway.authz.restrictions import ScanRule
from cedarberg.gateway.config.settings import Settings

# The decisions whose determining permits decide what a reader gets: planning (scan grants),
# loadTable (read-restrictions) and file access (vending, signing).
READ_ACTIONS = ("loadTable", "planTableScan", "loadCredentials", "signRequest")
# The reads whose unrestricted Allow alone gives the data: an unrestricted plan, or the files.
DATA_ACTIONS = frozenset({"planTableScan", "loadCredentials", "signRequest"})
TRUST_ACTION = "readRestrictedData"


class FindingKind(StrEnum):
    LIFTED = "lifted"  # an unrestricted permit allows the same principals the same read
    LIFTED_IF_GRANTED = "lifted-if-granted"  # ... as soon as a namespace grant names their groups
    LOCAL_WAREHOUSE = "local-warehouse"  # the files are a local directory engines read directly
    TRUSTED_CLIENT = "trusted-client"  # the files go to a client Cedar trusts to enforce it


_BINDS_INSTEAD = {
    FindingKind.LIFTED: "grant these principals the read only through restricted permits: take them "
    "out of the unrestricted permit or grant (cedarberg.readers / cedarberg.writers)",
    FindingKind.LIFTED_IF_GRANTED: "never name these groups in cedarberg.readers or cedarberg.writers "
    "where this permit applies; grant them only through restricted permits",
    FindingKind.LOCAL_WAREHOUSE: "server-side scan planning for engines that cannot read the "
    "directory, or a trusted engine that enforces the restriction; on an s3:// warehouse restricted "
    "principals get no vended credentials and no signed requests",
    FindingKind.TRUSTED_CLIENT: "the trusted client, which must enforce the restriction on the whole "
    "files it receives; the gateway's plans and loadTable stay restricted",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One place a restricted permit does not bind: its kind, the restricted permit, the
    principals and resource concerned, the unrestricted permits that lift it (or trust the client),
    and the warehouse when the files are the way around it."""

    kind: FindingKind
    policy_id: str
    resource: str
    principals: tuple[str, ...]
    lifted_by: tuple[str, ...] = ()
    warehouse: str | None = None
    location: str | None = None

    @property
    def binds_instead(self) -> str:
        return _BINDS_INSTEAD[self.kind]

    @property
    def message(self) -> str:
        """The finding in one sentence, naming both policies (or the warehouse)."""
        who = ", ".join(self.principals)
        by = ", ".join(self.lifted_by) + (" allows" if len(self.lifted_by) == 1 else " allow")
        if self.kind is FindingKind.LIFTED:
            return (
                f"{self.policy_id} does not bind {who} on {self.resource}: {by} the read too, "
                "without restriction, so they read every column and row (permits add up)"
            )
        if self.kind is FindingKind.LIFTED_IF_GRANTED:
            return (
                f"{self.policy_id} is lifted for {who} on {self.resource} wherever a namespace grant "
                f"(cedarberg.readers or cedarberg.writers) names their group: {by} the read "
                "then, without restriction"
            )
        if self.kind is FindingKind.LOCAL_WAREHOUSE:
            return (
                f"{self.policy_id} does not bind engines of {who} that read warehouse {self.warehouse} "
                f"({self.location}) directly: it is a local directory, and any engine on a host that "
                "sees it reads every column and row of the files, whatever the gateway plans"
            )
        return (
            f"{self.policy_id} is enforced for {who} on {self.resource} by their client, not by the "
            f"gateway: {by} {TRUST_ACTION}, so the client receives vended credentials and "
            f"signed requests for the whole files of warehouse {self.warehouse}"
        )

    def key(self) -> tuple[str, str, str, str]:
        return (self.policy_id, self.kind.value, self.resource, self.warehouse or "")

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "policy_id": self.policy_id,
            "lifted_by": list(self.lifted_by),
            "principals": list(self.principals),
            "resource": self.resource,
            "warehouse": self.warehouse,
            "location": self.location,
            "binds_instead": self.binds_instead,
            "message": self.message,
        }


def warehouse_locations(settings: Settings) -> dict[str, str]:
    """The deployment's warehouses (the embedded default included) by name, as locations."""
    return {name: warehouse.location for name, warehouse in settings.effective_warehouses().items()}


def is_local(location: str) -> bool:
    """Whether a (normalized) warehouse location is a directory of this host's file system."""
    return location.startswith("file:")


def as_json(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    return [finding.to_json() for finding in findings]


# -- one decision ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Judge:
    """Decides findings with one engine, one request context and the deployment's warehouses
    (`locations`: name -> location; None when not known, so warehouses go unchecked)."""

    engine: PolicyEngine
    context: RequestContext
    locations: Mapping[str, str] | None

    def decision(self, decision: Decision, principal: Principal, resource: Resource) -> list[Finding]:
        """Where restrictions do not bind this principal on this table, for an Allow of one of its
        reads (explain). Nothing for a denial, or an action that is not a read (`READ_ACTIONS`:
        restrictions narrow reads only)."""
        if not decision.allowed or decision.action not in READ_ACTIONS:
            return []
        return merged(self.subject(principal.id, principal, resource))

    def subject(self, label: str, principal: Principal, resource: Resource) -> list[Finding]:
        """Where the restricted permits that allow `principal` (named `label` in findings) a read
        of the table `resource` do not bind it. Its reads are decided together (`READ_ACTIONS`):
        an unrestricted Allow of planning or of the files (`DATA_ACTIONS`), or an unrestricted
        permit beside a restricted one in the same Allow, lifts them."""
        active = self.engine.active
        if active is None or resource.kind is not EntityType.TABLE:
            return []
        restrictions = active.restrictions
        checks = [(action, resource, self.context) for action in READ_ACTIONS]
        allowed = [
            d for d in self.engine.decide_many(principal, checks) if d.allowed and d.version == active.version
        ]
        restricted = sorted(
            {p for d in allowed for p in d.policy_ids if p in restrictions and restrictions[p].restricted}
        )
        if not restricted:
            return []
        resource_id = str(resource.uid)
        lifting = sorted(
            {
                p
                for d in allowed
                if d.action in DATA_ACTIONS or any(p in restricted for p in d.policy_ids)
                for p in unrestricted_of(d.policy_ids, restrictions)
            }
        )
        if lifting:
            return [Finding(FindingKind.LIFTED, p, resource_id, (label,), tuple(lifting)) for p in restricted]
        warehouse = resource.warehouse
        location = (self.locations or {}).get(warehouse or "")
        if warehouse is None or location is None:
            return []
        if is_local(location):
            return [
                Finding(FindingKind.LOCAL_WAREHOUSE, p, resource_id, (label,), (), warehouse, location)
                for p in restricted
            ]
        trust = self.engine.decide(principal, TRUST_ACTION, resource, self.context)
        trusted_by = unrestricted_of(trust.policy_ids, restrictions) if trust.allowed else ()
        return [
            Finding(FindingKind.TRUSTED_CLIENT, p, resource_id, (label,), trusted_by, warehouse, location)
            for p in restricted
            if trusted_by
        ]


def unrestricted_of(policy_ids: Sequence[str], restrictions: Mapping[str, ScanRule]) -> tuple[str, ...]:
    return tuple(sorted(p for p in policy_ids if p not in restrictions or not restrictions[p].restricted))


def merged(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (policy, kind, resource, warehouse), its principals and lifting permits
    the union of the merged ones; ordered by policy id, kind, resource."""
    merged: dict[tuple[str, str, str, str], Finding] = {}
    for finding in findings:
        held = merged.get(finding.key())
        if held is None:
            merged[finding.key()] = finding
            continue
        principals = tuple(dict.fromkeys((*held.principals, *finding.principals)))
        lifted_by = tuple(sorted({*held.lifted_by, *finding.lifted_by}))
        merged[finding.key()] = Finding(
            held.kind, held.policy_id, held.resource, principals, lifted_by, held.warehouse, held.location
        )
    return [merged[key] for key in sorted(merged)]


# -- access reviews -------------------------------------------------------------------------------


def subject_label(subject: review.Subject) -> str:
    """How a review subject is named in a finding: a principal id, or the group it stands for."""
    if subject.source is review.SubjectSource.GROUP:
        return f"members of {subject.group}"
    if subject.source is review.SubjectSource.NO_GROUP:
        return "principals in no group"
    return subject.principal.id


def resource_findings(
    engine: PolicyEngine, reviewed: review.ResourceReview, locations: Mapping[str, str] | None
) -> list[Finding]:
    """Where restricted permits do not bind the subjects a resource review found allowed to read
    (each subject's reads decided together, `Judge.subject`)."""
    judge = Judge(engine, reviewed.context.request(), locations)
    readers: dict[tuple[str, frozenset[str]], review.Subject] = {}
    for action in reviewed.actions:
        if action.action in READ_ACTIONS:
            for allowed in action.allowed:
                who = allowed.subject.principal
                readers.setdefault((who.id, who.groups), allowed.subject)
    found: list[Finding] = []
    for subject in readers.values():
        found += judge.subject(subject_label(subject), subject.principal, reviewed.resource)
    return merged(found)


def principal_findings(
    engine: PolicyEngine, reviewed: review.PrincipalReview, locations: Mapping[str, str] | None
) -> list[Finding]:
    """Where restricted permits do not bind the reviewed principal on the tables of its review."""
    judge = Judge(engine, reviewed.context.request(), locations)
    who = reviewed.principal
    found: list[Finding] = []
    for obj in reviewed.objects:
        if any(action in READ_ACTIONS for action, _ids, _restrictions in obj.allowed):
            found += judge.subject(who.id, who, obj.resource)
    return merged(found)
