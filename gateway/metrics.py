"""Prometheus metrics of one worker process, summed over all workers by `/metrics`.

`Metrics.create()` builds the families (names below) when the application starts, never at
import: a worker forked by the supervisor (`gateway.serve.supervisor`) must create them after the fork,
in multiprocess mode, so that each worker writes its own files under PROMETHEUS_MULTIPROC_DIR and
`/metrics` sums them whichever worker answers. Without that variable (one process) the families
live in a private registry, and the four families every request touches (requests, latency,
in-flight, decisions) are plain numbers read at scrape time (`gateway.plain_metrics`: no lock per
increment).

Families (labels):
    cedarberg_http_requests_total              operation, method, status
    cedarberg_http_request_duration_seconds    operation                    (histogram)
    cedarberg_http_requests_in_flight          -
    cedarberg_authz_decisions_total            action, outcome (allow|deny)
    cedarberg_commit_conflicts_total           operation
    cedarberg_kms_calls_total                  provider, op, outcome
    cedarberg_kms_data_key_cache_total         result (hit|miss)
    cedarberg_tokens_total                     grant_type, outcome (issued|refused)
    cedarberg_rate_limit_rejections_total      scope (address|auth_failures|principal), op_class
    cedarberg_store_pool_connections           state (checked_out|capacity)
    cedarberg_audit_sink_up                    -   (1: the audit destination takes records; min over workers)
    cedarberg_audit_write_failures_total       -   (failed attempts to write or sync audit records)
    cedarberg_policy_reload_failures_total     -   (reloads that refused the policy files they read)
    cedarberg_policy_set_refused               -   (1: the newest policy files are refused; max of workers)
    cedarberg_policy_set_info                  version (1 for the active set's version; max of workers)
Labels are bounded: operations and actions come from the route table, never from request paths,
principals or table names. The policy version label changes only when an operator changes the
policy files: one process shows one version at 1 (with several workers, a version a worker left
stays at 0 until that worker exits, as multiprocess files cannot drop a series).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)

from cedarberg.gateway.plain_metrics import PlainCollector, PlainCounter, PlainGauge, PlainHistogram

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_GRANT_TYPES = frozenset(
    {
        "client_credentials",
        "refresh_token",
        "urn:ietf:params:oauth:grant-type:token-exchange",
    }
)


def _multiprocess() -> bool:
    """True when PROMETHEUS_MULTIPROC_DIR is set now. prometheus_client picks its value class
    (in-memory or per-process files) when it is first imported, and a worker inherits the
    supervisor's import from before the variable was set: choose again, here, before any family
    of this process is created."""
    enabled = bool(os.environ.get(MULTIPROC_ENV))
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    return enabled


class CounterFamily(Protocol):
    """A labelled counter family: prometheus_client's, or a plain one (`gateway.plain_metrics`)."""

    def labels(self, *values: str) -> Any: ...


class GaugeLike(Protocol):
    def inc(self, amount: float = 1) -> None: ...

    def dec(self, amount: float = 1) -> None: ...


class WatchedPool(Protocol):
    """A connection pool that reports checkouts and checkins (catalog.store.pool.Store)."""

    def watch_pool(self, checked_out: Callable[[], None], checked_in: Callable[[], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class Metrics:
    multiprocess: bool
    registry: CollectorRegistry | None  # None in multiprocess mode: families go to files
    # The families every request touches: plain numbers exported at scrape time in one process
    # (`gateway.plain_metrics`), prometheus_client's shared files across workers.
    requests: CounterFamily
    latency: CounterFamily
    in_flight: GaugeLike
    decisions: CounterFamily
    conflicts: Counter
    kms_calls: Counter
    data_key_cache: Counter
    tokens: Counter
    rate_limited: Counter
    pool: Gauge
    audit_sink: Gauge
    audit_write_failures: Counter
    policy_reload_failures: Counter
    policy_refused: Gauge
    policy_info: Gauge
    # The version `policy_info` shows at 1 ("" before the first report).
    _policy_version: list[str] = field(default_factory=lambda: [""])
    # Labelled children by (family, labels): `labels()` takes a lock and builds a key on every
    # call; label values here are bounded (operations, methods, statuses, actions, outcomes).
    _children: dict[tuple[int, tuple[str, ...]], Any] = field(default_factory=dict)

    def child(self, family: CounterFamily, *labels: str) -> Any:
        """`family.labels(*labels)`, looked up once per distinct label set."""
        key = (id(family), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = family.labels(*labels)
        return found

    @classmethod
    def create(cls) -> Metrics:
        multi = _multiprocess()
        registry = None if multi else CollectorRegistry(auto_describe=True)
        where: dict[str, Any] = {"registry": registry}
        requests_doc = "HTTP requests answered, by operation, method and status."
        latency_doc = "Time from receiving a request to its response, by operation."
        in_flight_doc = "Requests being served."
        decisions_doc = "Cedar authorization decisions, by action and outcome."
        requests: CounterFamily
        latency: CounterFamily
        in_flight: GaugeLike
        decisions: CounterFamily
        if registry is None:
            requests = Counter(
                "cedarberg_http_requests", requests_doc, ["operation", "method", "status"], **where
            )
            latency = Histogram(
                "cedarberg_http_request_duration_seconds",
                latency_doc,
                ["operation"],
                buckets=_LATENCY_BUCKETS,
                **where,
            )
            in_flight = Gauge(
                "cedarberg_http_requests_in_flight", in_flight_doc, multiprocess_mode="livesum", **where
            )
            decisions = Counter("cedarberg_authz_decisions", decisions_doc, ["action", "outcome"], **where)
        else:
            plain = (
                PlainCounter("cedarberg_http_requests", requests_doc, ["operation", "method", "status"]),
                PlainHistogram(
                    "cedarberg_http_request_duration_seconds", latency_doc, ["operation"], _LATENCY_BUCKETS
                ),
                PlainGauge("cedarberg_http_requests_in_flight", in_flight_doc),
                PlainCounter("cedarberg_authz_decisions", decisions_doc, ["action", "outcome"]),
            )
            registry.register(PlainCollector(plain))
            requests, latency, in_flight, decisions = plain
        return cls(
            multiprocess=multi,
            registry=registry,
            requests=requests,
            latency=latency,
            in_flight=in_flight,
            decisions=decisions,
            conflicts=Counter(
                "cedarberg_commit_conflicts",
                "Commits refused because their requirements no longer held (409), by operation.",
                ["operation"],
                **where,
            ),
            kms_calls=Counter(
                "cedarberg_kms_calls",
                "Calls to the key management service, by provider, operation and outcome.",
                ["provider", "op", "outcome"],
                **where,
            ),
            data_key_cache=Counter(
                "cedarberg_kms_data_key_cache",
                "Data key lookups, by result (hit: no KMS call).",
                ["result"],
                **where,
            ),
            tokens=Counter(
                "cedarberg_tokens",
                "Token requests at /v1/oauth/tokens, by grant type and outcome.",
                ["grant_type", "outcome"],
                **where,
            ),
            rate_limited=Counter(
                "cedarberg_rate_limit_rejections",
                "Requests refused with 429, by limit scope and operation class.",
                ["scope", "op_class"],
                **where,
            ),
            pool=Gauge(
                "cedarberg_store_pool_connections",
                "Registry connections checked out, and the pool's capacity.",
                ["state"],
                multiprocess_mode="livesum",
                **where,
            ),
            audit_sink=Gauge(
                "cedarberg_audit_sink_up",
                "1 while the audit log's destination takes records, 0 while it fails (mutations are "
                "refused then); the lowest of the workers.",
                multiprocess_mode="livemin",
                **where,
            ),
            audit_write_failures=Counter(
                "cedarberg_audit_write_failures",
                "Failed attempts to write or sync audit records (each retry counts).",
                **where,
            ),
            policy_reload_failures=Counter(
                "cedarberg_policy_reload_failures",
                "Policy reloads (watcher, SIGHUP) that refused the files they read; the last good "
                "set stays active. Summed over the workers (each one reloads).",
                **where,
            ),
            policy_refused=Gauge(
                "cedarberg_policy_set_refused",
                "1 while the newest policy files are refused (the last good set decides), else 0; "
                "the highest of the workers.",
                multiprocess_mode="livemax",
                **where,
            ),
            policy_info=Gauge(
                "cedarberg_policy_set_info",
                "1 for the version (sha256 of the files) of the active policy set.",
                ["version"],
                multiprocess_mode="livemax",
                **where,
            ),
        )

    # -- recording ---------------------------------------------------------------------------
    def kms_call(self, provider: str, op: str, outcome: str) -> None:
        self.kms_calls.labels(provider, op, outcome).inc()

    def cache_lookup(self, hit: bool) -> None:
        self.data_key_cache.labels("hit" if hit else "miss").inc()

    def token_request(self, grant_type: str | None, issued: bool) -> None:
        grant = grant_type if grant_type in _GRANT_TYPES else "other"
        self.tokens.labels(grant, "issued" if issued else "refused").inc()

    def audit_sink_up(self, up: bool) -> None:
        """The audit destination takes records (`gateway.audit_writer.AuditObserver`)."""
        self.audit_sink.set(1 if up else 0)

    def audit_write_failed(self) -> None:
        self.audit_write_failures.inc()

    def policy_set_state(self, version: str, refused: bool) -> None:
        """The policy engine's state after a load attempt (`gateway.authz.engine.PolicyObserver`)."""
        self.policy_refused.set(1 if refused else 0)
        shown = self._policy_version[0]
        if version == shown:
            return
        if shown:
            if self.multiprocess:  # a series cannot leave the workers' files: it drops to 0
                self.policy_info.labels(shown).set(0)
            else:
                self.policy_info.remove(shown)
        if version:
            self.policy_info.labels(version).set(1)
        self._policy_version[0] = version

    def policy_reload_refused(self) -> None:
        self.policy_reload_failures.inc()

    def watch_pool(self, pool: WatchedPool, capacity: int) -> None:
        """Count the registry's checked-out connections (the store's pool callbacks)."""
        self.pool.labels("capacity").set(capacity)
        checked_out = self.pool.labels("checked_out")
        checked_out.set(0)
        pool.watch_pool(checked_out.inc, checked_out.dec)

    # -- exposition --------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The text format of every family, summed over the workers in multiprocess mode."""
        if self.registry is not None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
