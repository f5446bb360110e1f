"""The performance targets, evaluated on the scenarios of one run.

A target is PASS or FAIL; SKIP when what it compares was not measured (``--only``, ``--quick``
without soak) or the peer cannot do the operation. The write targets hold for each registry
store: ``http-1w`` (SQLite) and ``http-1w-pg`` (PostgreSQL). Every Cedarberg scenario must also
have run without an unexpected status or socket error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from bench.credential_forms import FORMS as CREDENTIAL_FORMS
from bench.model import FAILED, OK, Scenario, Soak, Target

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
MAIN = ("cedarberg", "http-1w")  # authenticated, TLS off, one worker, SQLite registry
MAIN_POSTGRES = ("cedarberg", "http-1w-pg")  # the same on a PostgreSQL registry
STORES = ((MAIN, "SQLite"), (MAIN_POSTGRES, "PostgreSQL"))
TWO_WORKERS = ("cedarberg", "http-2w")
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


def evaluate(scenarios: list[Scenario], soak: Soak | None) -> list[Target]:
    runs = _Runs(scenarios)

    def main(operation: str) -> Scenario | None:
        return runs.get(MAIN, operation)

    def peer(operation: str) -> Scenario | None:
        return runs.get(PEER, operation)

    def two_workers(operation: str) -> Scenario | None:
        return runs.get(TWO_WORKERS, operation)

    ceiling = runs.get(CEILING, "load_table")
    targets = [
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
    targets = [dataclasses.replace(t, store="SQLite") for t in targets]
    for operation, name in WRITE_TARGETS:
        for where, store in STORES:
            target = _at_least(name, runs.get(where, operation), peer(operation), 1)
            targets.append(dataclasses.replace(target, store=store))
    targets += [
        dataclasses.replace(
            _at_least("commits on 8 tables: 2 workers > 1 worker", two_workers("commit_8x8"),
                      main("commit_8x8"), 1, strict=True),
            store="SQLite",
        ),
        dataclasses.replace(_soak(soak), store="SQLite"),
        _clean(scenarios),
    ]  # fmt: skip
    return targets
