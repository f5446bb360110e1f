"""What a measurement produces (plain dataclasses, written to results.json as they are)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

OK = "ok"
FAILED = "failed"  # unexpected statuses or socket errors, or the preflight failed
UNSUPPORTED = "unsupported"  # the peer cannot do it (its preflight failed); not an error of ours


@dataclass
class Run:
    """One bounded wrk run."""

    duration_s: float
    requests: int  # completed responses, any status
    ok: int  # successful responses (2xx, or the expected 304)
    rps: float  # ok / duration
    p50_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    max_ms: float
    cpu_us_per_request: float  # server tree CPU (user+system) / completed responses
    rss_mb: float  # server tree resident memory at the end of the run
    client_cpu_us_per_request: float  # wrk's CPU time / completed responses
    background_cores: float  # busy CPU of everything else on the machine, in cores (interference)
    bytes_per_response: float
    statuses: dict[str, int]  # every status seen (writes); reads: {"error": n} for >399
    socket_errors: dict[str, int]
    problems: list[str]  # anything unexpected in this run


@dataclass
class Spread:
    median: float
    low: float
    high: float

    @staticmethod
    def of(values: list[float]) -> Spread:
        return Spread(statistics.median(values), min(values), max(values)) if values else Spread(0, 0, 0)


@dataclass
class Scenario:
    """One operation against one server variant, repeated ``len(runs)`` times."""

    system: str  # cedarberg, seaweedfs, ceiling
    variant: str  # http-1w, http-2w-pg, tls-1w, peer, bare-aiohttp
    operation: str
    title: str
    workers: int
    tls: bool
    connections: int
    status: str = OK
    error: str = ""
    runs: list[Run] = field(default_factory=list)
    # The peer: each time a run of this scenario crashed the server (which was then restarted).
    crashes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.system}/{self.variant}/{self.operation}"

    def spread(self, attribute: str) -> Spread:
        return Spread.of([float(getattr(run, attribute)) for run in self.runs])

    def median(self, attribute: str) -> float:
        return self.spread(attribute).median

    @property
    def usable(self) -> bool:
        return self.status == OK and bool(self.runs)


@dataclass
class Soak:
    seconds: float
    samples_mb: list[float]  # RSS once a second
    baseline_mb: float  # after the first 10 s
    final_mb: float
    requests: int
    rps: float
    problems: list[str]

    @property
    def drift(self) -> float:
        return (self.final_mb - self.baseline_mb) / self.baseline_mb if self.baseline_mb else 0.0


@dataclass
class Target:
    name: str
    verdict: str  # PASS, FAIL, SKIP
    measured: str
    required: str
    ratio: float | None  # measured / required bound (>= 1 is a pass for "at least" targets)
    detail: str = ""
    store: str = ""  # the registry of the Cedarberg variant measured (SQLite, PostgreSQL)
    # The Cedarberg variant the figure comes from, workers and store named, e.g.
    # "2 workers (one per core), PostgreSQL: http-2w-pg"; empty for targets over every scenario.
    variant: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a suite run measured, and how that compares with the targets."""

    scenarios: list[Scenario]
    soak: Soak | None
    targets: list[Target]
    # Per Cedarberg variant: what an acknowledged commit waited for (cedarberg.durability).
    durability: dict[str, dict[str, str]] = field(default_factory=dict)
