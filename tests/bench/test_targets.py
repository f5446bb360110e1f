"""The benchmark's verdicts (bench/targets.py, bench/report.py) on made-up results: which variant
each target compares, and what the targets table and the writes table say.

Issue 32, part 1: the write targets compare the gateway as a deployment on the run's cores runs it
(one worker per core) with the peer on the same cores, on each store, and name the variant
(workers, store) beside the figure, the one-worker figure of the same store beside it. A target
that looked at the one-worker variant, or at the other store, would pass or fail here on the
wrong figures. Nothing is measured: the scenarios are built from a dict of req/s.
"""

from __future__ import annotations

from bench.credential_forms import FORMS as CREDENTIAL_FORMS
from bench.credential_forms import operations_for
from bench.model import OK, Run, Scenario, Target
from bench.report import DASH, TIMES, targets_table, writes_table
from bench.scenarios import WRITES
from bench.suite import MAIN_VARIANT, variants
from bench.targets import FAIL, PASS, SKIP, evaluate

WRITE_OPERATIONS = ("commit_seq", "commit_8x8", "create_namespace", "create_namespace_8")


def _run(rps: float) -> Run:
    return Run(
        duration_s=5,
        requests=int(rps * 5),
        ok=int(rps * 5),
        rps=rps,
        p50_ms=1,
        p99_ms=2,
        p999_ms=3,
        mean_ms=1,
        max_ms=4,
        cpu_us_per_request=1000,
        rss_mb=100,
        client_cpu_us_per_request=10,
        background_cores=0,
        bytes_per_response=100,
        statuses={"200": int(rps * 5)},
        socket_errors={},
        problems=[],
    )


def scenarios_from(results: dict[str, float]) -> list[Scenario]:
    """A measured scenario for each ``system/variant/operation`` key, at the given req/s."""
    scenarios = []
    for key, rps in results.items():
        system, variant, operation = key.split("/")
        workers = int(variant.split("-")[1].removesuffix("w")) if system == "cedarberg" else 1
        title = operations_for((operation,))[0].title
        scenario = Scenario(system, variant, operation, title, workers, False, 1)
        scenario.runs.append(_run(rps))
        scenario.status = OK
        scenarios.append(scenario)
    return scenarios


def _rows(targets: list[Target], name_part: str) -> dict[str, Target]:
    """The targets whose name contains ``name_part``, by store."""
    return {t.store: t for t in targets if name_part in t.name}


def test_write_targets_compare_one_worker_per_core_with_the_peer_on_each_store() -> None:
    """The attack on the comparison: one worker below the peer, one worker per core above it on
    SQLite and below on PostgreSQL. The verdicts follow the per-core figure of each store, and
    each row names its variant and gives the one-worker figure beside it."""
    results = {
        "seaweedfs/peer/commit_seq": 250,
        "cedarberg/http-1w/commit_seq": 200,  # one worker: below the peer
        "cedarberg/http-2w/commit_seq": 300,  # one worker per core: above it
        "cedarberg/http-1w-pg/commit_seq": 260,  # one worker on PostgreSQL: above the peer
        "cedarberg/http-2w-pg/commit_seq": 240,  # per core on PostgreSQL: below it
    }
    targets = evaluate(scenarios_from(results), None, cores=2)
    rows = _rows(targets, "sequential commits")
    assert set(rows) == {"SQLite", "PostgreSQL"}
    sqlite, postgres = rows["SQLite"], rows["PostgreSQL"]
    assert sqlite.verdict == PASS
    assert sqlite.measured == f"300 vs 250 req/s ({TIMES}1.20)"
    assert sqlite.variant == "2 workers (one per core), SQLite: http-2w"
    assert sqlite.detail == f"1 worker: 200 req/s ({TIMES}0.80 the peer)"
    assert postgres.verdict == FAIL
    assert postgres.measured == f"240 vs 250 req/s ({TIMES}0.96)"
    assert postgres.variant == "2 workers (one per core), PostgreSQL: http-2w-pg"
    assert postgres.detail == f"1 worker: 260 req/s ({TIMES}1.04 the peer)"


def test_every_write_target_has_a_row_per_store_and_the_reads_stay_on_one_worker() -> None:
    """The control: a complete run gives each write target on both stores, all passing when the
    per-core figures are at the peer's; the read targets compare the one-worker SQLite gateway."""
    results: dict[str, float] = {
        "ceiling/bare-aiohttp/load_table": 20_000,
        "cedarberg/http-1w/load_table": 12_000,
        "cedarberg/http-2w/load_table": 18_000,
        "seaweedfs/peer/load_table": 2_000,
        # The other credential forms: one at the bound, one above it, one below it.
        "cedarberg/http-1w/load_table_api_key": 10_000,
        "cedarberg/http-1w/load_table_x_api_key": 11_000,
        "cedarberg/http-1w/load_table_oidc": 9_000,
    }
    for operation in WRITE_OPERATIONS:
        results[f"seaweedfs/peer/{operation}"] = 500
        for variant in ("http-1w", "http-2w", "http-1w-pg", "http-2w-pg"):
            results[f"cedarberg/{variant}/{operation}"] = 500 if "2w" in variant else 100
    targets = evaluate(scenarios_from(results), None, cores=2)
    for operation_name in ("sequential commits", "8 writers on 8 tables", "namespace creation, seq"):
        rows = _rows(targets, operation_name)
        assert {store: t.verdict for store, t in rows.items()} == {"SQLite": PASS, "PostgreSQL": PASS}
    eight = _rows(targets, "namespace creation, 8 concurrent")
    assert [t.variant for t in eight.values()] == [
        "2 workers (one per core), SQLite: http-2w",
        "2 workers (one per core), PostgreSQL: http-2w-pg",
    ]
    ceiling = _rows(targets, "loadTable ≥ 50% of the bare aiohttp ceiling")["SQLite"]
    assert (ceiling.verdict, ceiling.variant) == (PASS, "1 worker, SQLite: http-1w")
    assert ceiling.measured == f"12,000 vs 20,000 req/s ({TIMES}0.60)"
    by_form = {
        form: _rows(targets, f"loadTable with {form} ≥ 50%")["SQLite"] for _, form in CREDENTIAL_FORMS[1:]
    }
    assert {form: (t.verdict, t.measured) for form, t in by_form.items()} == {
        "API key as bearer": (PASS, f"10,000 vs 20,000 req/s ({TIMES}0.50)"),
        "API key in X-Api-Key": (PASS, f"11,000 vs 20,000 req/s ({TIMES}0.55)"),
        "OIDC token": (FAIL, f"9,000 vs 20,000 req/s ({TIMES}0.45)"),
    }
    peer_reads = _rows(targets, "loadTable ≥ 5x the peer")["SQLite"]
    assert (peer_reads.verdict, peer_reads.measured) == (PASS, f"12,000 vs 2,000 req/s ({TIMES}6.00)")
    scaling = _rows(targets, "one worker per core > one worker")["SQLite"]
    assert (scaling.verdict, scaling.measured) == (PASS, f"500 vs 100 req/s ({TIMES}5.00)")
    table = "\n".join(targets_table(targets))
    assert "| Target | Variant (workers, store) |" in table
    assert (
        "| commits, 8 writers on 8 tables ≥ the peer | 2 workers (one per core), PostgreSQL: http-2w-pg "
        f"| ≥ 500 req/s | 500 vs 500 req/s ({TIMES}1.00) | **PASS** |"
    ) in table


def test_a_write_target_whose_per_core_variant_did_not_run_is_skipped_not_judged_on_one_worker() -> None:
    """With only the one-worker figures (e.g. ``--only 'http-1w/'``), nothing stands in for the
    per-core variant: the write targets say it was not measured."""
    results = {"seaweedfs/peer/create_namespace": 900, "cedarberg/http-1w/create_namespace": 1_200}
    rows = _rows(evaluate(scenarios_from(results), None, cores=2), "namespace creation, sequential")
    assert {store: (t.verdict, t.measured) for store, t in rows.items()} == {
        "SQLite": (SKIP, "not measured"),
        "PostgreSQL": (SKIP, "not measured"),
    }


def test_on_one_core_the_per_core_variant_is_the_one_worker_variant() -> None:
    """``--cores 1``: one variant per store runs (every operation of both), the write targets
    compare it, and the scaling target has nothing to compare."""
    names = [variant.name for variant in variants(1)]
    assert names == ["http-1w", "tls-1w", "http-1w-pg"]
    assert set(WRITES) <= set(variants(1)[2].operations)
    results = {"seaweedfs/peer/commit_8x8": 400, "cedarberg/http-1w/commit_8x8": 450}
    targets = evaluate(scenarios_from(results), None, cores=1)
    sqlite = _rows(targets, "8 writers on 8 tables")["SQLite"]
    assert (sqlite.verdict, sqlite.variant, sqlite.detail) == (
        PASS,
        "1 worker (one per core), SQLite: http-1w",
        "",
    )
    assert _rows(targets, "one worker per core > one worker")["SQLite"].verdict == SKIP


def test_the_suite_runs_every_write_at_one_worker_and_one_per_core_on_both_stores() -> None:
    by_name = {variant.name: variant for variant in variants(2)}
    assert list(by_name) == ["http-1w", "http-2w", "tls-1w", "http-1w-pg", "http-2w-pg"]
    for name in ("http-1w", "http-2w", "http-1w-pg", "http-2w-pg"):
        assert set(WRITES) <= set(by_name[name].operations), name
    assert by_name["http-2w-pg"].workers == 2
    assert by_name["http-2w-pg"].store == "PostgreSQL"


def test_the_writes_table_puts_each_variant_beside_the_peer() -> None:
    results = {
        "seaweedfs/peer/create_table": 200,
        "cedarberg/http-1w/create_table": 100,
        "cedarberg/http-2w/create_table": 300,
        "cedarberg/http-2w-pg/create_table": 250,
    }
    lines = writes_table(scenarios_from(results), cores=2)
    assert lines[0] == "## Writes as deployed"
    assert (
        "| Operation | SeaweedFS (2 cores) | SQLite, 1 worker | SQLite, 2 workers | PostgreSQL, 1 worker "
        "| PostgreSQL, 2 workers |"
    ) in lines
    assert (
        f"| createTable, sequential | 200 | 100 ({TIMES}0.50) | 300 ({TIMES}1.50) | {DASH} "
        f"| 250 ({TIMES}1.25) |" in lines
    )
    assert not any(line.startswith("| commit") for line in lines)
    assert writes_table(scenarios_from({"cedarberg/http-1w/load_table": 1.0}), cores=2) == []


def test_the_main_variant_runs_the_soak_the_ceiling_body_and_every_credential_form() -> None:
    """The suite recognises its main variant (one worker, SQLite) among the merged variants: the
    soak, the ceiling's loadTable body and the credential forms' scenarios hang on it. A merge
    that dropped the credential forms' operations made it another variant, and a whole run went
    without the ceiling, the soak and the forms."""
    for cores in (1, 2):
        main = [variant for variant in variants(cores) if variant == MAIN_VARIANT]
        assert len(main) == 1, cores
        assert {operation for operation, _ in CREDENTIAL_FORMS} <= set(main[0].operations)
