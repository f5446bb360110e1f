"""The performance targets, evaluated on the scenarios of one run.

A target is PASS or FAIL; SKIP when what it compares was not measured (``--only``, ``--quick``
without soak) or the peer cannot do the operation. The reads compare the one-worker gateway on
SQLite (``http-1w``) with the one-process ceiling and with the peer. The writes compare the
gateway as a deployment on the run's cores runs it, one worker per core (``http-<N>w`` on SQLite,
``http-<N>w-pg`` on PostgreSQL), with the peer on the same cores, per store; the one-worker figure
of the same store is given beside it. Every Cedarberg scenario must also have run without an
unexpected status or socket error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from bench.cedarberg import POSTGRES, SQLITE, variant_name
from bench.credential_forms import FORMS as CREDENTIAL_FORMS
from bench.model import FAILED, OK, Scenario, Soak, Target

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
PEER = ("seaweedfs", "peer")
CEILING = ("ceiling", "bare-aiohttp")
SOAK_TOLERANCE = 0.10
# (operation, target): Cedarberg's successful writes/s >= the peer's, on each store.
WRITE_TARGETS = (
    ("commit_seq", "sequential commits on one table ≥ the peer"),
    ("commit_8x8", "commits, 8 writers on 8 tables ≥ the peer"),
    ("create_namespace", "namespace creation, sequential ≥ the peer"),
    ("create_namespace_8", "namespace creation, 8 concurrent ≥ the peer"),
)
TIMES = "\u00d7"


def gateway_at(workers: int, store: str) -> tuple[str, str]:
    """The (system, variant) of the plain-HTTP gateway with ``workers`` workers on ``store``."""
    return ("cedarberg", variant_name(tls=False, workers=workers, store=store))


MAIN = gateway_at(1, SQLITE)  # authenticated, TLS off, one worker, SQLite registry


def variant_label(workers: int, store: str, cores: int) -> str:
    """What the targets table names beside a figure, e.g. ``2 workers (one per core), SQLite:
    http-2w``."""
    plural = "" if workers == 1 else "s"
    per_core = " (one per core)" if workers == cores else ""
    return f"{workers} worker{plural}{per_core}, {store}: {gateway_at(workers, store)[1]}"


class _Runs:
    def __init__(self, scenarios: Iterable[Scenario]) -> None:
        self.by_key = {scenario.key: scenario for scenario in scenarios}

    def get(self, where: tuple[str, str], operation: str) -> Scenario | None:
        return self.by_key.get(f"{where[0]}/{where[1]}/{operation}")


def _missing(name: str, required: str, scenario: Scenario | None, what: str) -> Target | None:
    """A SKIP/FAIL target when ``scenario`` cannot be compared, else None."""
    if scenario is None:
        return Target(name, SKIP, "not measured", required, None, f"{what} was not run")
    if scenario.status == OK and scenario.runs:
        return None
    if scenario.system == "seaweedfs":
        return Target(name, SKIP, scenario.status, required, None, f"peer: {scenario.error}"[:600])
    return Target(name, FAIL, scenario.status, required, None, f"{scenario.key}: {scenario.error}")


def _at_least(
    name: str, ours: Scenario | None, theirs: Scenario | None, factor: float, strict: bool = False
) -> Target:
    """Our median throughput >= factor x theirs (> with ``strict``)."""
    relation = ">" if strict else "≥"
    required = f"{relation} {factor:g}{TIMES} {theirs.key if theirs else 'reference'}"
    for scenario, what in ((ours, "our scenario"), (theirs, "the reference")):
        problem = _missing(name, required, scenario, what)
        if problem is not None:
            return problem
    assert ours is not None
    assert theirs is not None
    mine, reference = ours.median("rps"), theirs.median("rps")
    bound = factor * reference
    ratio = mine / bound if bound else float("inf")
    relative = mine / reference if reference else float("inf")
    passed = mine > bound if strict else mine >= bound
    crashes = sum(len(s.crashes) for s in (ours, theirs))
    return Target(
        name,
        PASS if passed else FAIL,
        f"{mine:,.0f} vs {reference:,.0f} req/s ({TIMES}{relative:.2f})",
        f"{relation} {bound:,.0f} req/s",
        ratio,
        f"the peer crashed {crashes}{TIMES} in these runs, restarted (see its scenario)" if crashes else "",
    )


def _at_most(name: str, scenario: Scenario | None, attribute: str, bound_ms: float) -> Target:
    required = f"≤ {bound_ms:g} ms"
    problem = _missing(name, required, scenario, "the scenario")
    if problem is not None:
        return problem
    assert scenario is not None
    value = scenario.median(attribute)
    ratio = bound_ms / value if value else float("inf")
    verdict = PASS if value <= bound_ms else FAIL
    return Target(name, verdict, f"{value:.3f} ms", required, ratio)


def _soak(soak: Soak | None) -> Target:
    name = "soak: loadTable RSS flat (end vs after 10 s)"
    required = f"within ±{SOAK_TOLERANCE:.0%}"
    if soak is None:
        return Target(name, SKIP, "not run", required, None, "soak skipped (--quick or --soak-seconds 0)")
    if soak.problems or not soak.baseline_mb:
        return Target(name, FAIL, "errors", required, None, "; ".join(soak.problems) or "no samples")
    drift = soak.drift
    verdict = PASS if abs(drift) <= SOAK_TOLERANCE else FAIL
    measured = f"{soak.baseline_mb:.1f} → {soak.final_mb:.1f} MB ({drift:+.1%})"
    return Target(name, verdict, measured, required, None, f"{soak.rps:,.0f} req/s for {soak.seconds} s")


def _clean(scenarios: Iterable[Scenario]) -> Target:
    name = "every Cedarberg and ceiling scenario free of unexpected statuses and errors"
    failed = [s for s in scenarios if s.system != "seaweedfs" and s.status == FAILED]
    if not failed:
        return Target(name, PASS, "no errors", "no errors", None)
    detail = "; ".join(f"{s.key}: {s.error}" for s in failed)
    return Target(name, FAIL, f"{len(failed)} failed", "no errors", None, detail)


def _write_target(runs: _Runs, operation: str, name: str, store: str, cores: int) -> Target:
    """``operation`` at one worker per core on ``store`` >= the peer on the same cores; the
    one-worker figure of the same store in the detail."""
    per_core = runs.get(gateway_at(cores, store), operation)
    target = _at_least(name, per_core, runs.get(PEER, operation), 1)
    single = runs.get(gateway_at(1, store), operation)
    beside = ""
    if cores != 1 and single is not None and single.usable:
        beside = f"1 worker: {single.median('rps'):,.0f} req/s"
        theirs = runs.get(PEER, operation)
        if theirs is not None and theirs.usable and theirs.median("rps"):
            beside += f" ({TIMES}{single.median('rps') / theirs.median('rps'):.2f} the peer)"
    detail = "; ".join(part for part in (beside, target.detail) if part)
    return dataclasses.replace(target, store=store, variant=variant_label(cores, store, cores), detail=detail)


def evaluate(scenarios: list[Scenario], soak: Soak | None, cores: int) -> list[Target]:
    """The targets of a run whose one-worker-per-core variants ran ``cores`` workers."""
    runs = _Runs(scenarios)
    main_label = variant_label(1, SQLITE, cores)

    def main(operation: str) -> Scenario | None:
        return runs.get(MAIN, operation)

    def peer(operation: str) -> Scenario | None:
        return runs.get(PEER, operation)

    ceiling = runs.get(CEILING, "load_table")
    reads = [
        _at_least("loadTable ≥ 50% of the bare aiohttp ceiling", main("load_table"), ceiling, 0.5),
        # The same for every other credential form (bench/credential_forms.py).
        *(_at_least(f"loadTable with {form} ≥ 50% of the bare aiohttp ceiling", main(operation), ceiling, 0.5)
          for operation, form in CREDENTIAL_FORMS if operation != "load_table"),
        _at_least("loadTable ≥ 5x the peer", main("load_table"), peer("load_table"), 5),
        _at_least("list namespaces ≥ the peer", main("list_namespaces"), peer("list_namespaces"), 1),
        _at_least("list tables ≥ the peer", main("list_tables"), peer("list_tables"), 1),
        _at_most("loadTable p50 at 1 connection ≤ 0.5 ms", main("load_table_c1"), "p50_ms", 0.5),
        _at_most("loadTable p99 at 32 connections ≤ 10 ms", main("load_table"), "p99_ms", 10),
    ]  # fmt: skip
    targets = [dataclasses.replace(t, store=SQLITE, variant=main_label) for t in reads]
    for operation, name in WRITE_TARGETS:
        for store in (SQLITE, POSTGRES):
            targets.append(_write_target(runs, operation, name, store, cores))
    scaling = "commits on 8 tables: one worker per core > one worker"
    if cores == 1:
        scaled = Target(scaling, SKIP, "one core", "> 1 worker", None, "one core: a single variant")
    else:
        scaled = _at_least(scaling, runs.get(gateway_at(cores, SQLITE), "commit_8x8"),
                           main("commit_8x8"), 1, strict=True)  # fmt: skip
    targets += [
        dataclasses.replace(scaled, store=SQLITE, variant=variant_label(cores, SQLITE, cores)),
        dataclasses.replace(_soak(soak), store=SQLITE, variant=main_label),
        _clean(scenarios),
    ]
    return targets
