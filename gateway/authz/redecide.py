"""Decide audited decisions again under two policy sets and list the ones that would flip.

    window = DecisionWindow(records, limit=500, deadline=time.monotonic() + 20)
    outcome = redecide(current, candidate, window)
    outcome.flips            # allow -> deny and deny -> allow, newest first, with both decisions
    outcome.tally            # re-decided, unchanged, flipped each way, not re-decidable (and why)

The window's `records` are decoded audit records, newest first (`audit_query.records_from_end`);
only policy decisions (`event` "decision") count towards `limit`, other lines are skipped. Each is
decided again from
its `cedar_request` (`gateway.decision_record`): the principal, the resource, the context and the
entities exactly as the gateway decided on them, so the only difference between the two decisions
is the policy set. A record that cannot be decided exactly as the gateway did is counted as not
re-decidable, with its reason, and never guessed at:

- it carries no `cedar_request` (written before records carried one, or a refusal by the
  gateway's own rule, which no policy made);
- the request was too large to record, or the scrubber removed something from it;
- its request is malformed.

Pure: reads nothing but its arguments, writes nothing; the engines decide with
`PolicyEngine.decide_request` (no cache), so neither engine's caches change. Bounded: at most
`limit` decisions, flips at most that many, memory one record at a time beside them; past the
window's `deadline` (a `clock()` value) it stops and says so (`complete` false).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from cedarberg.gateway.authz.engine import Decision, PolicyEngine
from cedarberg.gateway.authz.entities import EntityUid

NOT_RECORDED: Final = (
    "the record carries no Cedar request (written before records did, or a gateway rule refused)"
)
OMITTED: Final = "the Cedar request was too large to record"
SCRUBBED: Final = "the recorded Cedar request lost values to the secret scrubber"
MALFORMED: Final = "the recorded Cedar request is malformed"
DEADLINE: Final = "the time bound was reached"
# What the audit scrubber leaves where it took something away (`gateway.audit.scrub_text`,
# `gateway.decision_record`): a request holding one is not what the gateway decided on.
SCRUBBED_MARKS: Final = ("[REDACTED", "...[truncated]", "[nested too deep]")


@dataclass(frozen=True, slots=True)
class Ruled:
    """One side of a re-decision: the ruling, its determining policies and evaluation errors."""

    allowed: bool
    policy_ids: tuple[str, ...]
    errors: tuple[str, ...]

    @classmethod
    def of(cls, decision: Decision) -> Ruled:
        return cls(decision.allowed, decision.policy_ids, decision.errors)

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": "allow" if self.allowed else "deny",
            "policy_ids": list(self.policy_ids),
            "errors": list(self.errors),
        }


@dataclass(frozen=True, slots=True)
class Flip:
    """An audited decision whose ruling differs between the current and the candidate set."""

    time: str | None
    request_id: str | None
    principal: str | None
    action: str
    resource: str | None
    recorded: str | None  # the ruling the audit log holds ("allow" / "deny")
    current: Ruled
    candidate: Ruled

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "request_id": self.request_id,
            "principal": self.principal,
            "action": self.action,
            "resource": self.resource,
            "recorded": self.recorded,
            "current": self.current.to_json(),
            "candidate": self.candidate.to_json(),
        }


@dataclass(slots=True)
class Tally:
    """How the examined decisions came out (each examined decision is counted once)."""

    examined: int = 0  # decision records read, re-decidable or not
    re_decided: int = 0
    unchanged: int = 0  # same ruling under both sets
    policies_changed: int = 0  # of those, with other determining policies (restrictions may differ)
    allow_to_deny: int = 0
    deny_to_allow: int = 0
    current_differs_from_recorded: int = 0  # the current set rules otherwise than the record says
    not_re_decidable: Counter[str] = field(default_factory=Counter)

    def count(
        self, record: Mapping[str, Any], request: RecordedRequest, now: Ruled, then: Ruled
    ) -> Flip | None:
        """Count one re-decided `record` (`now`: under the current set, `then`: the candidate);
        the flip, if its ruling differs."""
        self.re_decided += 1
        recorded = _text(record, "decision")
        if recorded is not None and recorded != ("allow" if now.allowed else "deny"):
            self.current_differs_from_recorded += 1
        if now.allowed == then.allowed:
            self.unchanged += 1
            if sorted(now.policy_ids) != sorted(then.policy_ids):
                self.policies_changed += 1
            return None
        if now.allowed:
            self.allow_to_deny += 1
        else:
            self.deny_to_allow += 1
        return Flip(
            time=_text(record, "time"),
            request_id=_text(record, "request_id"),
            principal=_text(record, "principal"),
            action=request.action,
            resource=_text(record, "resource"),
            recorded=recorded,
            current=now,
            candidate=then,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "re_decided": self.re_decided,
            "unchanged": self.unchanged,
            "policies_changed": self.policies_changed,
            "allow_to_deny": self.allow_to_deny,
            "deny_to_allow": self.deny_to_allow,
            "current_differs_from_recorded": self.current_differs_from_recorded,
            "not_re_decidable": sum(self.not_re_decidable.values()),
            "not_re_decidable_reasons": dict(sorted(self.not_re_decidable.items())),
        }


@dataclass(frozen=True, slots=True)
class Redecision:
    tally: Tally
    flips: tuple[Flip, ...]
    complete: bool  # False: stopped early (`stopped` says why) before `limit` or the records ran out
    stopped: str | None = None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A decision record's Cedar request, ready to be decided again."""

    principal: EntityUid
    action: str
    resource: EntityUid
    context: Mapping[str, Any]
    entities: tuple[Mapping[str, Any], ...]


def _uid(value: object) -> EntityUid:
    if (
        not isinstance(value, Mapping)
        or not isinstance(value.get("type"), str)
        or not isinstance(value.get("id"), str)
    ):
        raise TypeError("not an entity uid")
    return EntityUid(value["type"], value["id"])


def _entities(groups: object) -> tuple[Mapping[str, Any], ...]:
    """The recorded entity lists, flattened; an entity listed twice is kept once (the first), as
    the gateway merged them."""
    if not isinstance(groups, list) or not all(isinstance(group, list) for group in groups):
        raise TypeError("entities must be lists of entities")
    seen: set[tuple[str, str]] = set()
    out: list[Mapping[str, Any]] = []
    for group in groups:
        for entity in group:
            if not isinstance(entity, Mapping):
                raise TypeError("an entity must be an object")
            uid = _uid(entity.get("uid"))
            if (uid.type, uid.id) not in seen:
                seen.add((uid.type, uid.id))
                out.append(entity)
    return tuple(out)


def recorded_request(record: Mapping[str, Any]) -> RecordedRequest | str:
    """The Cedar request a decision record carries, or why it cannot be decided again exactly."""
    request = record.get("cedar_request")
    if request is None:
        return NOT_RECORDED
    if not isinstance(request, Mapping):
        return MALFORMED
    if "omitted" in request:
        return OMITTED
    if any(mark in orjson.dumps(request).decode() for mark in SCRUBBED_MARKS):
        return SCRUBBED
    action, context = record.get("action"), request.get("context")
    if not isinstance(action, str) or not isinstance(context, Mapping):
        return MALFORMED
    try:
        return RecordedRequest(
            _uid(request.get("principal")),
            action,
            _uid(request.get("resource")),
            context,
            _entities(request.get("entities")),
        )
    except TypeError:
        return MALFORMED


def _decide(engine: PolicyEngine, request: RecordedRequest) -> Ruled:
    return Ruled.of(
        engine.decide_request(
            request.principal, request.action, request.resource, request.context, request.entities
        )
    )


def _text(record: Mapping[str, Any], key: str) -> str | None:
    value = record.get(key)
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class DecisionWindow:
    """The audited decisions to decide again: decoded audit `records`, newest first, of which the
    first `limit` decisions count; decided until `deadline` (a `clock()` value; None: no bound)."""

    records: Iterable[Mapping[str, Any]]
    limit: int
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic


def redecide(current: PolicyEngine, candidate: PolicyEngine, window: DecisionWindow) -> Redecision:
    """Decide the newest `window.limit` policy decisions among `window.records` under `current`
    and `candidate`; see the module docstring. Raises nothing for any record's content."""
    tally = Tally()
    flips: list[Flip] = []
    if window.limit <= 0:
        return Redecision(tally, (), True)
    for record in window.records:
        if record.get("event") != "decision":
            continue
        if window.deadline is not None and window.clock() > window.deadline:
            return Redecision(tally, tuple(flips), False, DEADLINE)
        tally.examined += 1
        request = recorded_request(record)
        if isinstance(request, str):
            tally.not_re_decidable[request] += 1
        else:
            flip = tally.count(record, request, _decide(current, request), _decide(candidate, request))
            if flip is not None:
                flips.append(flip)
        if tally.examined >= window.limit:
            break
    return Redecision(tally, tuple(flips), True)
