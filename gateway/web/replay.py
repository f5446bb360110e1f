"""Request plans: what the security pipeline decided for one request, replayed while still true.

The pipeline (`gateway.web.middlewares`) is the only path a request takes. For a read it may
record a *plan* of what it did: the principal the credential proved, every Cedar decision as the
audit line it wrote and the metric it counted, and the answer (status, body, ETag). The next
request with the same credential, method, path and query, from the same client address and TLS
subject, replays the plan instead of redoing the work — with exactly the same outcome, audit lines
and metrics — while everything the plan was derived from is unchanged. Every credential form
reaches this path alike: a gateway token, an API key as a bearer token or in `X-Api-Key`, an OIDC
token. Plans are keyed by a keyed digest of the credential headers (BLAKE2b under a per-process
key), so no plan holds a credential.

- the policy set's version;
- every registry entry the request read (through the registry's read cache; the same object means
  unchanged, `catalog.store.cache.RegistryCache.still_current`), so a changed grant, a commit (a
  new ETag) or a listing change ends the plan, and another process's change ends it within the
  cache's TTL, as it ends a cached read;
- the credential's validity (`Principal.valid_until`, `Principal.proof`, both set by
  `gateway.authn.bearer`): a token's expiry, and its API key's generation (a rotation or
  revocation ends every plan of the key and of its tokens; a stale key feed ends them all); for
  an OIDC token its signing key's lease (`gateway.authn.credential`: a key withdrawn from the
  JWKS, or a key set due for a refresh, ends the plan, in O(1)); for an API key the lease of its
  entry in the verified-key cache (`gateway.authn.key_guards`: the plan ends when that entry would
  no longer be a hit — its TTL, the key's expiry or the end of a previous secret's overlap — or
  leaves the cache, in O(1)), so a plan never answers a key that a fresh request would verify
  again;
- the plan's age (`max_age_seconds`: plans hold plaintext metadata, like the load-result cache).

What is never recorded: mutations and any request that is not a GET or HEAD of an operation the
operation table marks `replayable` (its answer derives only from registry reads made through the
cache, the settings and its decisions: not metrics, planning results or credentials);
requests asking for storage credentials (`X-Iceberg-Access-Delegation`) or answered `no-store`;
requests authenticated by a client certificate alone (its per-connection check is not plain
data); requests with a token bound to a client certificate
(`cnf.x5t#S256`: the binding is checked against each connection's certificate, not replayed);
any request that read the registry around its cache or was refused by a gateway rule outside
Cedar; answers other than 200, 204, 403 and 404.

Rate limits are never part of a plan: a replayed request spends its budgets like any other.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from cedarberg.catalog.documents import etag_matches
from cedarberg.catalog.store.cache import ReadLog
from cedarberg.catalog.store.cache import recording as recording_reads
from cedarberg.gateway.audit import AuditEvent, AuditTemplate
from cedarberg.gateway.authn.principal import AuthMethod, Principal
from cedarberg.gateway.byte_lru import ByteBoundedLru
from cedarberg.gateway.config.caches import DEFAULT_PLAN_MAX_BYTES, DEFAULT_PLAN_MAX_ENTRIES
from cedarberg.gateway.ratelimit import OperationClass, principal_key
from cedarberg.gateway.tls import peer_subject

if TYPE_CHECKING:
    from cedarberg.catalog.store.pool import Store
    from cedarberg.gateway.web.route import Route
    from cedarberg.gateway.web.security import Security

DEFAULT_MAX_ENTRIES = DEFAULT_PLAN_MAX_ENTRIES
DEFAULT_MAX_BYTES = DEFAULT_PLAN_MAX_BYTES
MAX_ENTRY_BYTES = 1024**2
DELEGATION_HEADER = "X-Iceberg-Access-Delegation"
_METHODS = frozenset({"GET", "HEAD"})
_AUTH_METHODS = frozenset(
    {AuthMethod.GATEWAY_TOKEN, AuthMethod.JWT, AuthMethod.API_KEY, AuthMethod.ANONYMOUS}
)
_TOKENS = frozenset({AuthMethod.GATEWAY_TOKEN, AuthMethod.JWT})
_STATUSES = frozenset({200, 204, 403, 404})
_KEPT_HEADERS = ("Content-Type", "ETag")
_PLAN_OVERHEAD_BYTES = 600  # the plan object, its tuples and the key's strings beyond their text

# (method, raw path and query, credential digest, client address, TLS subject)
PlanKey = tuple[str, str, bytes, str, str]
# Per process: a digest names a credential only here, and only for as long as the process lives.
# Keyed once; each digest copies the keyed state (cheaper than keying BLAKE2b per request).
_KEYED = hashlib.blake2b(key=secrets.token_bytes(32), digest_size=16)


def credential_digest(authorization: str, api_key: str) -> bytes:
    """A keyed digest of a request's credential headers (`Authorization`, `X-Api-Key`); empty
    when neither is sent. Injective in the pair (tagged by which headers are sent, the first
    length-prefixed when both are), so two requests share a digest only by presenting the same
    headers."""
    if not api_key:
        if not authorization:
            return b""
        text = b"a" + authorization.encode("utf-8", "surrogatepass")
    else:
        text = f"k{len(authorization)}:{authorization}{api_key}".encode("utf-8", "surrogatepass")
    digest = _KEYED.copy()
    digest.update(text)
    return digest.digest()


@dataclass(slots=True)
class Recording:
    """What one request's pipeline did, gathered while it runs (see `recording`)."""

    op_class: OperationClass
    route: Route | None
    principal: Principal | None = None  # set once authenticated
    reads: ReadLog = field(default_factory=ReadLog)
    decisions: list[tuple[AuditEvent, Any]] = field(default_factory=list)  # (audit event, metric)
    replayable: bool = True


_RECORDING: ContextVar[Recording | None] = ContextVar("cedarberg_plan_recording", default=None)


@contextmanager
def recording(rec: Recording) -> Iterator[Recording]:
    """Record the current request's registry reads and decisions in `rec`."""
    token = _RECORDING.set(rec)
    try:
        with recording_reads(rec.reads):
            yield rec
    finally:
        _RECORDING.reset(token)


def note_decision(event: AuditEvent, metric: Any) -> None:
    """A decision was audited as `event` and counted in `metric` (called by `verdicts.decide`)."""
    rec = _RECORDING.get()
    if rec is not None:
        rec.decisions.append((event, metric))


def note_unreplayable() -> None:
    """Something happened that a plan cannot repeat (an audit line written outside `decide`)."""
    rec = _RECORDING.get()
    if rec is not None:
        rec.replayable = False


@dataclass(frozen=True, slots=True)
class Plan:
    route: Route  # the route the request was decided on (its method and path name it)
    principal: Principal
    budget_key: str  # the principal's rate-limit key
    op_class: OperationClass
    policy_version: str
    expires_at: float  # wall clock: the credential's expiry, or the plan's age limit
    reads: tuple[tuple[Hashable, Any], ...]
    audits: tuple[AuditTemplate, ...]
    metrics: tuple[Any, ...]
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]
    etag: str | None

    def answer(self, if_none_match: str | None) -> web.Response:
        """The recorded answer; a 304 when `if_none_match` names the recorded ETag."""
        if self.etag is not None and if_none_match is not None and etag_matches(if_none_match, self.etag):
            return web.Response(status=304, headers={"ETag": self.etag})
        return web.Response(status=self.status, body=self.body, headers=dict(self.headers))


class PlanCache:
    """Plans by request key, bounded in entries and bytes. Used from the event loop only."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_seconds: float = 300.0,
    ) -> None:
        self.max_age_seconds = max_age_seconds
        self.replayed = 0  # requests answered from a plan
        self.recorded = 0  # plans kept
        self._plans: ByteBoundedLru[PlanKey, Plan] = ByteBoundedLru(max_entries, max_bytes, MAX_ENTRY_BYTES)

    def __len__(self) -> int:
        return len(self._plans)

    @property
    def estimated_bytes(self) -> int:
        return self._plans.estimated_bytes

    def key_of(self, request: web.Request) -> PlanKey | None:
        """The request's plan key; None when it may not be planned (see the module docstring;
        the pipeline records plans of read operations only)."""
        if not (self._plans.enabled and request.method in _METHODS):
            return None
        headers = request.headers
        if DELEGATION_HEADER in headers:
            return None
        return (
            request.method,
            request.raw_path,
            credential_digest(headers.get("Authorization", ""), headers.get("X-Api-Key", "")),
            request.remote or "",
            peer_subject(request.transport) or "",
        )

    def find(self, key: PlanKey, security: Security, registry: Store) -> Plan | None:
        """The plan recorded for `key`, if everything it was derived from is unchanged. An entry
        it read that is due for a refresh is refreshed in the background, as a read would."""
        plan = self._plans.get(key)
        if plan is None:
            return None
        if (
            time.time() >= plan.expires_at
            or plan.policy_version != security.policies.version
            or not security.api_keys.token_current(plan.principal)
            or (plan.principal.proof is not None and not plan.principal.proof.lease.current)
        ):
            self._plans.pop(key)
            return None
        cache = registry.cache
        for read_key, value in plan.reads:
            current, reload = cache.still_current(read_key, value)
            if not current:
                self._plans.pop(key)
                return None
            if reload is not None:
                registry.refresh_later(read_key, reload)
        self.replayed += 1
        return plan

    def keep(
        self,
        key: PlanKey,
        rec: Recording,
        security: Security,
        response: web.StreamResponse,
    ) -> None:
        """Keep the plan of a request that ran with `rec`, if it may be replayed."""
        reads, principal, route = rec.reads, rec.principal, rec.route
        if (
            principal is None
            or route is None
            or not rec.replayable
            or reads.opaque
            or principal.auth_method not in _AUTH_METHODS
            or (principal.proof is not None and principal.proof.certificate_sha256 is not None)
            or not isinstance(response, web.Response)
            or response.status not in _STATUSES
            or "no-store" in response.headers.get("Cache-Control", "")
        ):
            return
        body = response.body
        if not isinstance(body, bytes | bytearray | type(None)):
            return
        expires_at = time.time() + self.max_age_seconds
        if (principal.auth_method is AuthMethod.ANONYMOUS) != (key[2] == b""):
            return  # only the credential in the key may prove the plan's principal (not a cookie)
        proof, valid_until = principal.proof, principal.valid_until
        if principal.auth_method in _TOKENS and valid_until is None:
            return  # a token without a known expiry is decided afresh every time
        if principal.auth_method is AuthMethod.API_KEY and proof is None:
            return  # no cache entry's lease to end with: an API key lives by its cached verification
        if proof is not None and not proof.lease.current:
            return  # what the verification relied on ended while the request ran
        if valid_until is not None:
            expires_at = min(expires_at, valid_until)
        plan = Plan(
            route=route,
            principal=principal,
            budget_key=principal_key(principal),
            op_class=rec.op_class,
            policy_version=security.policies.version,
            expires_at=expires_at,
            reads=tuple(reads.reads),
            audits=tuple(security.audit.template(event) for event, _metric in rec.decisions),
            metrics=tuple(metric for _event, metric in rec.decisions),
            status=response.status,
            body=bytes(body or b""),
            headers=tuple(
                (name, response.headers[name]) for name in _KEPT_HEADERS if name in response.headers
            ),
            etag=response.headers.get("ETag"),
        )
        size = _PLAN_OVERHEAD_BYTES + len(plan.body) + sum(len(part) for part in key)
        size += sum(len(t.head) + len(t.middle) + len(t.tail) for t in plan.audits)
        if math.isfinite(expires_at) and expires_at > time.time() and self._plans.put(key, plan, size):
            self.recorded += 1

    def clear(self) -> None:
        self._plans.clear()
