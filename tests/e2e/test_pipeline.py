"""The PySpark pipeline (``pipelines``) end to end, through a production-shaped gateway.

One gateway with TLS (the session CA, which the shared Spark JVM trusts), API keys required and
sealed metadata files (the embedded default). The admin creates namespace ``raw`` (PII: writers
``etl``, no readers) and ``analytics`` (writers ``etl``, readers ``analysts``), and one key each
for the service account and the analyst. The pipeline runs at a small scale (3,000 raw rows) in
this process, on the session's JVM: ``run_pipeline(config, spark=spark)``.

Why in-process and not ``cedarberg-pipeline`` as a subprocess: only one SparkContext can exist
per process, and the suite already has one (``spark`` fixture) whose JVM trusts ``session_pki``;
a subprocess would start a second JVM (~5 s and ~0.5 GB on a 2-core machine) for nothing the
pipeline does differently. The pipeline derives its own isolated sessions (``newSession()``) per
principal, so its credentials never reach the fixture's catalogs. The command line itself is
exercised by ``make demo`` and ``tests/pipelines``.

The checks use independent oracles: expected rows are computed here from the raw files the
pipeline generated, and tables are read back with pyiceberg as the admin (a third engine):

- row counts of bronze, silver and gold; silver has no duplicate ``event_id`` after the MERGE
  and holds exactly the newest delivery of every event;
- the evolved column ``channel`` holds batch 2's values and is null for batch-1-only events;
- the analyst's INSERT / DELETE / CREATE TABLE failed with ``ForbiddenException`` and left no
  trace (same gold snapshots, no new table), and ``raw`` was hidden from it;
- DuckDB, as the analyst, read the same gold rows (and per-country sums) as Spark;
- every metadata file in the warehouse is sealed.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest

from cedarberg.pipelines.config import ApiKey, PipelineConfig
from cedarberg.pipelines.generate import load_manifest
from cedarberg.pipelines.run import PipelineResult, run_pipeline
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog
    from pyspark.sql import SparkSession

    from tests.support.tls import TestPki

pytestmark = [pytest.mark.spark, pytest.mark.duckdb]

ROWS = 3_000
SEED = 7
WRITERS = "etl"
READERS = "analysts"
SEALED = b"\x00CBSEAL"


@dataclass
class Run:
    gateway: SecureGateway
    config: PipelineConfig
    result: PipelineResult
    output: str


@pytest.fixture(scope="module")
def run(spark: SparkSession, session_pki: TestPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The pipeline, run once against a fresh secure gateway; every test checks one aspect."""
    directory = tmp_path_factory.mktemp("pipeline")
    with pytest.MonkeyPatch.context() as env:
        for name in AMBIENT_CA_VARIABLES:  # pyiceberg/requests trust only the given CA
            env.delenv(name, raising=False)
        with SecureGateway(directory / "secure", pki=session_pki) as gw:
            gw.create_namespace("raw", writers=[WRITERS])
            gw.create_namespace("analytics", readers=[READERS], writers=[WRITERS])
            service_key = gw.create_key("pipeline-svc", [WRITERS])
            analyst_key = gw.create_key("ana", [READERS])
            config = PipelineConfig(
                uri=gw.url,
                service_key=ApiKey.parse(service_key, source="test"),
                analyst_key=ApiKey.parse(analyst_key, source="test"),
                work_dir=directory / "work",
                rows=ROWS,
                seed=SEED,
                ca_cert=gw.ca_cert,
            )
            out = io.StringIO()
            result = run_pipeline(config, spark=spark, out=out)
            print(out.getvalue())  # the pipeline's progress and summary, shown if a test fails
            yield Run(gw, config, result, out.getvalue())


@pytest.fixture(scope="module")
def admin(run: Run) -> Iterator[RestCatalog]:
    catalog = run.gateway.admin_catalog("pipeline-admin")
    yield catalog
    catalog.close()


@pytest.fixture(scope="module")
def expected(run: Run) -> Oracle:
    return Oracle.from_raw_files(run.config.raw_dir)


# -- the oracle ------------------------------------------------------------------------------------


@dataclass
class Oracle:
    """What the tables must hold, computed from the raw files alone."""

    deliveries: int
    batch_rows: dict[int, int]
    newest: dict[int, dict[str, Any]]  # event_id -> newest delivery (+ its batch)
    gold: list[tuple[Any, ...]]  # (day, country, events, purchases, buyers, revenue), sorted

    @classmethod
    def from_raw_files(cls, raw_dir: Path) -> Oracle:
        manifest = load_manifest(raw_dir)
        assert manifest.file_format == "json"
        newest: dict[int, dict[str, Any]] = {}
        batch_rows: dict[int, int] = {}
        for batch in manifest.batches:
            count = 0
            for name in batch.files:
                for line in (raw_dir / name).read_text().splitlines():
                    record = json.loads(line, parse_float=Decimal)
                    record["batch_id"] = batch.number
                    count += 1
                    known = newest.get(record["event_id"])
                    if known is None or record["seq"] > known["seq"]:
                        newest[record["event_id"]] = record
            batch_rows[batch.number] = count
        cells: dict[tuple[dt.date, str], dict[str, Any]] = defaultdict(
            lambda: {"events": 0, "purchases": 0, "buyers": set(), "revenue": Decimal("0.00")}
        )
        for record in newest.values():
            cell = cells[(dt.date.fromisoformat(record["event_time"][:10]), record["country"])]
            cell["events"] += 1
            amount = Decimal(record["amount"])
            if record["event_type"] == "purchase":
                cell["purchases"] += 1
                cell["buyers"].add(record["user_id"])
                cell["revenue"] += amount
            elif record["event_type"] == "refund":
                cell["revenue"] -= amount
        gold = [
            (
                day,
                country,
                c["events"],
                c["purchases"],
                len(c["buyers"]),
                c["revenue"].quantize(Decimal("0.01")),
            )
            for (day, country), c in sorted(cells.items())
        ]
        return cls(sum(batch_rows.values()), batch_rows, newest, gold)


def rows_of(catalog: RestCatalog, *identifier: str) -> list[dict[str, Any]]:
    return list(catalog.load_table(identifier).scan().to_arrow().to_pylist())


# -- tests -----------------------------------------------------------------------------------------


def test_every_stage_succeeded(run: Run) -> None:
    statuses = {stage.name: stage.status for stage in run.result.stages}
    assert statuses == dict.fromkeys(
        ["generate", "spark", "bronze", "silver", "gold", "maintain", "analyst", "duckdb"], "ok"
    ), run.output
    assert run.result.ok
    assert "pipeline OK" in run.output


def test_input_has_duplicates_and_corrections(expected: Oracle) -> None:
    # Otherwise the dedupe and the MERGE would prove nothing.
    assert expected.deliveries == ROWS
    assert len(expected.newest) < ROWS
    corrected = [r for r in expected.newest.values() if r["batch_id"] == 2 and r["event_id"] <= 1_800]
    assert corrected, "batch 2 corrects no batch-1 event"


def test_row_counts_per_table(run: Run, admin: RestCatalog, expected: Oracle) -> None:
    bronze = rows_of(admin, "raw", "events_bronze")
    assert len(bronze) == ROWS
    assert {b: sum(1 for r in bronze if r["batch_id"] == b) for b in (1, 2)} == expected.batch_rows
    assert len(rows_of(admin, "raw", "events")) == len(expected.newest)
    assert len(rows_of(admin, "analytics", "daily_revenue")) == len(expected.gold)
    reported = {t.name: t.rows for t in run.result.tables}
    assert reported == {
        "lake.raw.events_bronze": ROWS,
        "lake.raw.events": len(expected.newest),
        "lake.analytics.daily_revenue": len(expected.gold),
        "lake.analytics.revenue_by_country": len({country for _, country, *_ in expected.gold}),
    }


def test_merge_left_no_duplicate_keys_and_the_newest_delivery(admin: RestCatalog, expected: Oracle) -> None:
    silver = rows_of(admin, "raw", "events")
    ids = [r["event_id"] for r in silver]
    assert len(ids) == len(set(ids))
    got = {r["event_id"]: (r["seq"], r["event_type"], r["amount"], r["batch_id"]) for r in silver}
    want = {
        e: (r["seq"], r["event_type"], Decimal(r["amount"]).quantize(Decimal("0.01")), r["batch_id"])
        for e, r in expected.newest.items()
    }
    assert got == want


def test_evolved_column_holds_its_values(admin: RestCatalog, expected: Oracle) -> None:
    table = admin.load_table(("raw", "events"))
    assert [f.name for f in table.schema().fields][-1] == "channel"  # added after batch_id
    channels = {r["event_id"]: r["channel"] for r in rows_of(admin, "raw", "events")}
    want = {e: r.get("channel") for e, r in expected.newest.items()}
    assert channels == want
    assert {c for c in channels.values() if c} == {"web", "app", "store"}
    assert None in channels.values()  # events only batch 1 delivered keep a null


def test_maintenance_left_one_snapshot(admin: RestCatalog) -> None:
    assert len(admin.load_table(("raw", "events")).snapshots()) == 1
    assert len(admin.load_table(("raw", "events_bronze")).snapshots()) == 2


def test_gold_equals_the_oracle(admin: RestCatalog, expected: Oracle) -> None:
    gold = sorted(
        (r["day"], r["country"], r["events"], r["purchases"], r["buyers"], r["revenue"])
        for r in rows_of(admin, "analytics", "daily_revenue")
    )
    assert gold == expected.gold


def test_analyst_writes_refused_without_trace(run: Run, admin: RestCatalog) -> None:
    analyst = run.result.analyst
    assert analyst is not None
    assert [operation for operation, _ in analyst.refused] == ["INSERT INTO", "DELETE FROM", "CREATE TABLE"]
    for _, error in analyst.refused:
        assert error.startswith("org.apache.iceberg.exceptions.ForbiddenException"), error
    snapshots = [s.snapshot_id for s in admin.load_table(("analytics", "daily_revenue")).snapshots()]
    assert analyst.gold_snapshots_before == analyst.gold_snapshots_after == snapshots
    assert not admin.table_exists(("analytics", "analyst_scratch"))
    denied = [d for d in run.result.decisions if d.outcome == "denied"]
    assert {d.principal for d in denied} == {"analyst"}
    assert len(denied) == 3
    assert "ForbiddenException" in run.output


def test_refused_writes_left_no_data_files(admin: RestCatalog) -> None:
    # The analyst's Spark writes data files before it asks to commit; a refused commit must
    # make it delete them again (Iceberg's abort), or the warehouse fills with orphans.
    table = admin.load_table(("analytics", "daily_revenue"))
    referenced = {urlparse(path).path for path in table.inspect.files().column("file_path").to_pylist()}
    on_disk = {str(p) for p in Path(urlparse(table.location()).path, "data").rglob("*.parquet")}
    assert referenced
    assert on_disk == referenced


def test_pii_namespace_hidden_from_the_analyst(run: Run) -> None:
    analyst = run.result.analyst
    assert analyst is not None
    hidden = dict(analyst.hidden)
    assert "'raw'" in hidden["SHOW NAMESPACES"]
    assert "TABLE_OR_VIEW_NOT_FOUND" in hidden["SELECT FROM lake.raw.events"]
    assert "Forbidden" not in json.dumps(hidden)  # 404, not 403: existence is not confirmed
    assert run.result.duckdb is not None
    assert "does not exist" in run.result.duckdb.pii_error or "not found" in run.result.duckdb.pii_error


def test_duckdb_reads_what_spark_reads(run: Run, expected: Oracle) -> None:
    assert run.result.analyst is not None
    assert run.result.duckdb is not None
    assert run.result.duckdb.gold == run.result.analyst.gold == expected.gold
    assert run.result.duckdb.by_country == run.result.analyst.by_country
    assert len(run.result.duckdb.by_country) == len({country for _, country, *_ in expected.gold})


def test_metadata_files_are_sealed(run: Run) -> None:
    files = sorted((run.gateway.process.data_dir / "warehouse").rglob("*.metadata.json"))
    assert files
    assert [f for f in files if not f.read_bytes().startswith(SEALED)] == []


def test_no_key_in_the_output_or_the_gateway_log(run: Run) -> None:
    for key in (run.config.service_key, run.config.analyst_key):
        assert key.secret not in run.output
        assert key.secret not in run.gateway.log_text()
