"""The policy engine: the active Cedar policy set and the decisions made with it.

    engine = PolicyEngine(Path("policies"))
    version = engine.load()                      # raises PolicyLoadError: nothing is active yet
    decision = engine.decide(principal, "loadTable", table, context)
    engine.reload()                              # never raises: LOADED, UNCHANGED or REFUSED

Invariants:
- Only a set that parses, validates against its schema, and satisfies the gateway's contract
  (`contract.py`) becomes active. A refused set leaves the last good set active; the refusal (its
  version and problems) is kept in `last_error` for the admin API and logged once per content.
- Decisions use pre-parsed handles: the policy set and schema are parsed once per load; the entity
  set of a (principal, resource) pair is parsed once and kept in a bounded LRU cache, which a load
  clears (entities are validated against the schema they were parsed with).
- Decisions are kept in a bounded LRU keyed by everything a decision depends on (policy-set
  version, principal entity JSON, action, context, and of the resource what the policies can see
  of it: `sight.py`), so a change to policies, group membership, grants or context is a different
  key, never a stale hit, while resources the policies cannot tell apart (a namespace being
  created under another new name) share one decision.
- Every cache here (decisions, parsed entity sets, rendered principals) is bounded in entries and
  in estimated bytes, and does not keep an entry larger than its entry cap (`gateway.byte_lru`):
  requests with large names, grants or context values are decided, just not remembered, so they
  cannot grow memory.
- Anything but Allow is deny: Deny, NoDecision, no active set, or entities that do not conform.
- Every `Decision` names the policy-set version it was made with.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, TypedDict, Unpack

import cedarpy
import orjson

from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.contract import contract_problems
from cedarberg.gateway.authz.entities import (
    EntityUid,
    Resource,
    principal_entities,
    principal_uid,
)
from cedarberg.gateway.authz.errors import PolicyLoadError, PolicyProblem
from cedarberg.gateway.authz.loader import (
    SCHEMA_FILE,
    CompiledPolicySet,
    compile_sources,
    content_version,
    read_directory,
)
from cedarberg.gateway.authz.restrictions import ScanRule, rules_of
from cedarberg.gateway.byte_lru import ByteBoundedLru

log = logging.getLogger("cedarberg.gateway.authz")

DEFAULT_ENTITY_CACHE_SIZE = 4096
DEFAULT_ENTITY_CACHE_BYTES = 64 * 1024**2
DEFAULT_DECISION_CACHE_SIZE = 65536
DEFAULT_DECISION_CACHE_BYTES = 64 * 1024**2
DEFAULT_CACHE_ENTRY_BYTES = 256 * 1024  # entry cap of the decision and entity caches
# A parsed entity set (Rust structures behind cedarpy) takes a few times its JSON; counted so.
_PARSED_ENTITIES_FACTOR = 4
_PRINCIPAL_CACHE_SIZE = 4096
_PRINCIPAL_CACHE_BYTES = 16 * 1024**2
_PRINCIPAL_ENTRY_BYTES = 256 * 1024
_DecisionKey = tuple[str, str, str, str, RequestContext]


@dataclass(frozen=True, slots=True)
class Decision:
    """One Cedar decision. `policy_ids` are the determining policies (the permits that allowed, or
    the forbids that denied; empty for the default deny)."""

    allowed: bool
    policy_ids: tuple[str, ...]
    version: str
    errors: tuple[str, ...]
    principal: str
    action: str
    resource: str


@dataclass(frozen=True, slots=True)
class RefusedPolicySet:
    version: str  # content hash of the refused files ("" if they could not be read)
    problems: tuple[PolicyProblem, ...]
    at: datetime


class PolicyObserver(Protocol):
    """Told the state of the policy set after every load attempt (`gateway.metrics.Metrics`)."""

    def policy_set_state(self, version: str, refused: bool) -> None:
        """`version` is active ("" for none); `refused`: the newest files were refused."""

    def policy_reload_refused(self) -> None:
        """A reload (watcher, SIGHUP) refused the files it read."""


class ReloadOutcome(StrEnum):
    LOADED = "loaded"
    UNCHANGED = "unchanged"
    REFUSED = "refused"


class CacheBounds(TypedDict, total=False):
    """The bounds of a PolicyEngine's caches, passed as keywords (0 entries: that cache is off)."""

    entity_cache_size: int  # parsed entity sets kept
    decision_cache_size: int  # decisions kept
    entity_cache_bytes: int
    decision_cache_bytes: int
    cache_entry_bytes: int  # the largest entry either cache keeps


class PolicyEngine:
    """Holds the active policy set of one directory and decides requests with it. Thread-safe."""

    def __init__(self, directory: Path, **bounds: Unpack[CacheBounds]) -> None:
        """An engine for the policies in `directory` (loaded by `load`), its caches bounded by
        `bounds` (each absent bound takes its DEFAULT_*)."""
        entity_cache_size = bounds.get("entity_cache_size", DEFAULT_ENTITY_CACHE_SIZE)
        decision_cache_size = bounds.get("decision_cache_size", DEFAULT_DECISION_CACHE_SIZE)
        entity_cache_bytes = bounds.get("entity_cache_bytes", DEFAULT_ENTITY_CACHE_BYTES)
        decision_cache_bytes = bounds.get("decision_cache_bytes", DEFAULT_DECISION_CACHE_BYTES)
        cache_entry_bytes = bounds.get("cache_entry_bytes", DEFAULT_CACHE_ENTRY_BYTES)
        self._directory = Path(directory)
        self._active: CompiledPolicySet | None = None
        self._last_error: RefusedPolicySet | None = None
        self._observer: PolicyObserver | None = None
        self._load_lock = threading.Lock()
        self._cache: ByteBoundedLru[tuple[str, str, str], cedarpy.Entities] = ByteBoundedLru(
            entity_cache_size, entity_cache_bytes, cache_entry_bytes
        )
        self._cache_lock = threading.Lock()
        self._decisions: ByteBoundedLru[_DecisionKey, Decision] = ByteBoundedLru(
            decision_cache_size, decision_cache_bytes, cache_entry_bytes
        )
        self.decision_hits = 0
        self._principals: ByteBoundedLru[int, tuple[Principal, str]] = ByteBoundedLru(
            _PRINCIPAL_CACHE_SIZE, _PRINCIPAL_CACHE_BYTES, _PRINCIPAL_ENTRY_BYTES
        )
        self._load_listeners: list[Callable[[PolicyEngine], object]] = []

    def on_loaded(self, listener: Callable[[PolicyEngine], object]) -> None:
        """Call `listener(engine)` each time a new set becomes active (after it is, in the loading
        thread), e.g. to report what the set cannot enforce (`binding.log_static_findings`). A
        listener that raises is logged; the set stays active."""
        self._load_listeners.append(listener)

    # -- the policy set ---------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def active(self) -> CompiledPolicySet | None:
        return self._active

    @property
    def version(self) -> str:
        """The active set's version, or "" when none has loaded."""
        return self._active.version if self._active else ""

    @property
    def last_error(self) -> RefusedPolicySet | None:
        """Why the most recent load was refused; None once a load succeeds."""
        return self._last_error

    def status(self) -> dict[str, Any]:
        """The active set and the last refusal, JSON-ready (for the admin API's policy view)."""
        active, refused = self._active, self._last_error
        return {
            "directory": str(self._directory),
            "version": active.version if active else None,
            "files": dict(active.sources) if active else {},
            "policies": dict(active.locations) if active else {},
            "refused": None
            if refused is None
            else {
                "version": refused.version,
                "at": refused.at.isoformat(),
                "problems": [str(p) for p in refused.problems],
            },
        }

    def observe(self, observer: PolicyObserver) -> None:
        """Tell `observer` the set's state now and after every load attempt (the metrics). The
        observer is called under the load lock: one report at a time, in the order of the loads."""
        with self._load_lock:
            self._observer = observer
            self._notify()

    def _notify(self) -> None:
        if self._observer is not None:
            self._observer.policy_set_state(self.version, self._last_error is not None)

    def load(self, directory: Path | None = None) -> str:
        """Load the directory (and remember it, if given) and make it active; returns its version.

        Loading contents identical to the active set changes nothing. Raises `PolicyLoadError` when
        the set is refused; the previously active set (if any) stays active.
        """
        with self._load_lock:
            if directory is not None:
                self._directory = Path(directory)
            try:
                version, sources = read_directory(self._directory)
            except PolicyLoadError as err:
                self._refused("", err)
                raise
            return self._activate(version, sources)

    def load_sources(self, sources: Mapping[str, str]) -> str:
        """Make `sources` (file name -> text, as a policy directory holds them: `schema.cedarschema`
        and `*.cedar` files) the active set, checked as `load` checks a directory's files; returns
        its version. For a set that exists nowhere on disk (a change preview's candidate). Raises
        `PolicyLoadError` (a missing schema is one of its problems); the active set stays."""
        with self._load_lock:
            if SCHEMA_FILE not in sources:
                error = PolicyLoadError([PolicyProblem(SCHEMA_FILE, 0, "missing")])
                self._refused(content_version(sources), error)
                raise error
            return self._activate(content_version(sources), dict(sources), announce=False)

    def _refused(self, version: str, err: PolicyLoadError) -> None:
        self._last_error = RefusedPolicySet(version, err.problems, datetime.now(UTC))
        self._notify()

    def _activate(self, version: str, sources: dict[str, str], announce: bool = True) -> str:
        """Compile `sources` and make them active (under the load lock); `announce`: log it (a
        candidate set, which decides no request, is not). Raises PolicyLoadError."""
        if self._active is not None and self._active.version == version:
            self._last_error = None
            self._notify()
            return version
        try:
            compiled = self._compile(version, sources)
        except PolicyLoadError as err:
            self._refused(version, err)
            raise
        self._active = compiled
        self._last_error = None
        with self._cache_lock:
            self._cache.clear()
            self._decisions.clear()
        self._notify()
        if announce:
            self._announce(compiled)
        for listener in self._load_listeners:
            try:
                listener(self)
            except Exception:  # a report must not undo a load that succeeded
                log.exception("a policy-load listener failed", extra={"policy_version": version})
        return version

    def _announce(self, compiled: CompiledPolicySet) -> None:
        version = compiled.version
        log.info(
            "policy set %s loaded from %s (%d files)",
            version[:12],
            self._directory,
            len(compiled.sources),
            extra={
                "policy_version": version,
                "policy_dir": str(self._directory),
                "policy_files": sorted(compiled.sources),
            },
        )

    def _compile(self, version: str, sources: dict[str, str]) -> CompiledPolicySet:
        compiled = compile_sources(self._directory, version, sources)
        problems = contract_problems(compiled.schema, compiled.policies)
        if problems:
            raise PolicyLoadError(problems)
        return compiled

    def reload(self) -> ReloadOutcome:
        """Load the directory again if its contents changed (for the watcher and SIGHUP).

        Never raises: a refused set is logged (once per distinct content) and kept in `last_error`.
        """
        before = self.version
        previous_error = self._last_error
        try:
            version = self.load()
        except PolicyLoadError as err:
            if self._observer is not None:
                self._observer.policy_reload_refused()
            refused = self._last_error
            if previous_error is None or refused is None or previous_error.version != refused.version:
                self._log_refusal(before, refused.version if refused else "", err.problems)
            return ReloadOutcome.REFUSED
        return ReloadOutcome.UNCHANGED if version == before else ReloadOutcome.LOADED

    def _log_refusal(self, active: str, refused: str, problems: Sequence[PolicyProblem]) -> None:
        """One line that says what to fix: each problem as FILE:LINE: message, where, and which
        version keeps deciding."""
        stays = f"version {active[:12]} stays active" if active else "no set is active"
        log.error(
            "policy set refused in %s (%d problem%s, first %s); %s",
            self._directory,
            len(problems),
            "" if len(problems) == 1 else "s",
            problems[0] if problems else "-",
            stays,
            extra={
                "policy_dir": str(self._directory),
                "policy_version": active,
                "refused_version": refused,
                "problems": [str(p) for p in problems],
            },
        )

    # -- decisions --------------------------------------------------------------------------------

    def decide(
        self, principal: Principal, action: str, resource: Resource, context: RequestContext
    ) -> Decision:
        """Decide whether `principal` may perform `action` on `resource`."""
        return self.decide_many(principal, [(action, resource, context)])[0]

    def scan_rules(self, decision: Decision) -> tuple[ScanRule, ...]:
        """The ways to scan an Allow gives (`restrictions.rules_of`): read from the policy set the
        decision was made with. None for a denial, or when the set changed since (fail closed;
        the client's retry is decided and restricted by the new set)."""
        active = self._active
        if not decision.allowed or active is None or active.version != decision.version:
            return ()
        return rules_of(decision.policy_ids, active.restrictions)

    def decide_many(
        self, principal: Principal, checks: Sequence[tuple[str, Resource, RequestContext]]
    ) -> list[Decision]:
        """Decide several requests of one principal in one call (e.g. to filter a listing)."""
        if not checks:
            return []
        p_uid = principal_uid(principal)
        active = self._active
        if active is None:
            return [self._deny(p_uid, action, r, "no policy set is active") for action, r, _ in checks]
        p_json = self.principal_json(principal)
        if not self._decisions.enabled:
            return self._decide_uncached(active, p_uid, p_json, checks)
        sight = active.sight
        keys = [
            (active.version, p_json, action, sight.decision_key(r), context) for action, r, context in checks
        ]
        with self._cache_lock:
            found = [self._decisions.get(key) for key in keys]
            self.decision_hits += sum(decision is not None for decision in found)
        missing: dict[_DecisionKey, list[int]] = {}
        for i, decision in enumerate(found):
            if decision is None:
                missing.setdefault(keys[i], []).append(i)
        if missing:
            # One evaluation per key: the resources of a listing that the policies cannot tell
            # apart share it.
            shared = list(missing.values())
            made = self._decide_uncached(active, p_uid, p_json, [checks[indices[0]] for indices in shared])
            sizes = [
                _decision_bytes(keys[indices[0]], decision)
                for indices, decision in zip(shared, made, strict=True)
            ]
            with self._cache_lock:
                for indices, decision, size in zip(shared, made, sizes, strict=True):
                    for i in indices:
                        found[i] = decision
                    if not decision.errors:  # a failed evaluation is decided again next time
                        self._decisions.put(keys[indices[0]], decision, size)
        # A shared decision was made for one of the resources of its key: each names its own.
        return [
            decision
            if decision.resource == (named := str(resource.uid))
            else replace(decision, resource=named)
            for decision, (_, resource, _) in zip(found, checks, strict=True)
            if decision is not None
        ]

    @property
    def cache_bytes(self) -> int:
        """Estimated bytes held by the decision, entity and principal caches together."""
        with self._cache_lock:
            return (
                self._decisions.estimated_bytes
                + self._cache.estimated_bytes
                + self._principals.estimated_bytes
            )

    def principal_json(self, principal: Principal) -> str:
        """The principal's entities as Cedar JSON, rendered once per principal object (the
        authenticators hand out the same object for every request of a cached credential): what
        its decisions are made on, and what their audit records carry (`decision_record`)."""
        with self._cache_lock:
            held = self._principals.get(id(principal))
            if held is not None and held[0] is principal:
                return held[1]
        rendered = orjson.dumps(principal_entities(principal)).decode()
        with self._cache_lock:
            # The entry keeps the principal alive, so its id cannot be reused while cached. The
            # principal's own strings are about as large as their rendering: counted twice.
            self._principals.put(id(principal), (principal, rendered), 2 * len(rendered))
        return rendered

    def _decide_uncached(
        self,
        active: CompiledPolicySet,
        p_uid: EntityUid,
        p_json: str,
        checks: Sequence[tuple[str, Resource, RequestContext]],
    ) -> list[Decision]:
        resources_json = {r.entities_json: r for _, r, _ in checks}
        try:
            if len(resources_json) == 1:
                entities = self._entities(active, p_json, next(iter(resources_json)))
            else:
                entities = self._merged_entities(active, p_json, list(resources_json.values()))
        except ValueError as err:
            message = f"entities do not conform to the schema: {err}"
            return [self._deny(p_uid, action, r, message) for action, r, _ in checks]
        requests = [
            {
                "principal": p_uid.to_json(),
                "action": EntityUid.action(action).to_json(),
                "resource": resource.uid.to_json(),
                "context": context.to_cedar(),
            }
            for action, resource, context in checks
        ]
        results = cedarpy.is_authorized_batch(requests, active.policies, entities, active.schema)
        return [
            self._decision(active.version, result, str(p_uid), action, str(resource.uid))
            for (action, resource, _), result in zip(checks, results, strict=True)
        ]

    def decide_request(
        self,
        principal: EntityUid,
        action: str | EntityUid,
        resource: EntityUid,
        context: Mapping[str, Any],
        entities: Sequence[Mapping[str, Any]],
    ) -> Decision:
        """Decide a raw Cedar request (fixtures, explain): entities are Cedar JSON, not cached."""
        action_uid = action if isinstance(action, EntityUid) else EntityUid.action(action)
        active = self._active
        if active is None:
            return self._deny(principal, action_uid.id, resource, "no policy set is active")
        try:
            parsed = cedarpy.Entities.from_json_str(orjson.dumps(list(entities)).decode(), active.schema)
        except ValueError as err:
            return self._deny(principal, action_uid.id, resource, f"entities do not conform: {err}")
        request = {
            "principal": principal.to_json(),
            "action": action_uid.to_json(),
            "resource": resource.to_json(),
            "context": dict(context),
        }
        result = cedarpy.is_authorized(request, active.policies, parsed, active.schema)
        return self._decision(active.version, result, str(principal), action_uid.id, str(resource))

    # -- internals --------------------------------------------------------------------------------

    def _deny(
        self, principal: EntityUid, action: str, resource: Resource | EntityUid, error: str
    ) -> Decision:
        return Decision(False, (), self.version, (error,), str(principal), action, str(resource))

    @staticmethod
    def _decision(
        version: str, result: cedarpy.AuthzResult, principal: str, action: str, resource: str
    ) -> Decision:
        allowed = result.decision == cedarpy.Decision.Allow
        return Decision(
            allowed=allowed,
            policy_ids=tuple(result.diagnostics.reasons)
            if result.decision != cedarpy.Decision.NoDecision
            else (),
            version=version,
            errors=tuple(result.diagnostics.errors),
            principal=principal,
            action=action,
            resource=resource,
        )

    def _entities(self, active: CompiledPolicySet, p_json: str, r_json: str) -> cedarpy.Entities:
        # The version is part of the key: handles are validated against the schema of that version.
        key = (active.version, p_json, r_json)
        with self._cache_lock:
            cached = self._cache.get(key)
            if cached is not None:
                return cached
        parsed = cedarpy.Entities.from_json_str(f"[{p_json[1:-1]},{r_json[1:-1]}]", active.schema)
        size = (1 + _PARSED_ENTITIES_FACTOR) * (len(p_json) + len(r_json)) + len(active.version)
        with self._cache_lock:
            self._cache.put(key, parsed, size)
        return parsed

    @staticmethod
    def _merged_entities(
        active: CompiledPolicySet, p_json: str, resources: Sequence[Resource]
    ) -> cedarpy.Entities:
        merged: dict[str, Any] = {}
        for resource in resources:
            for entity in resource.entities:
                merged.setdefault(f"{entity['uid']['type']}\0{entity['uid']['id']}", entity)
        r_json = orjson.dumps(list(merged.values())).decode()
        return cedarpy.Entities.from_json_str(f"[{p_json[1:-1]},{r_json[1:-1]}]", active.schema)


def _decision_bytes(key: _DecisionKey, decision: Decision) -> int:
    """Estimated bytes of a decision cache entry: its key (the principal's and resource's entity
    JSON, the context as Cedar sees it) and the decision's strings."""
    version, p_json, action, r_json, context = key
    return (
        len(version)
        + len(p_json)
        + len(action)
        + len(r_json)
        + 2 * len(orjson.dumps(context.to_cedar()))  # the context object and its sets
        + sum(map(len, decision.policy_ids))
        + len(decision.principal)
        + len(decision.resource)
        + len(decision.action)
    )
