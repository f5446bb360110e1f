"""One pipeline run: generate -> bronze -> silver -> gold -> maintain -> analyst -> duckdb.

``run_pipeline(config)`` starts its own Spark JVM (and stops it); ``run_pipeline(config,
spark=existing)`` reuses a running SparkSession's JVM (one SparkContext per process), deriving
its own isolated sessions from it and leaving it running. Either way it returns a
`PipelineResult`; progress and the summary go to ``out``. A failed stage skips the later ones
and makes ``result.ok`` false; nothing is raised for a stage failure.
"""

# ruff: noqa: S608  (SQL text is built from PipelineConfig's identifiers, checked with isidentifier, and constants)

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from cedarberg.pipelines import stages
from cedarberg.pipelines.analyst import AnalystFindings, run_analyst
from cedarberg.pipelines.config import PipelineConfig
from cedarberg.pipelines.duckdb_check import DuckdbFindings, check_duckdb
from cedarberg.pipelines.generate import Manifest, generate
from cedarberg.pipelines.report import Decision, Report, StageResult, TableStats
from cedarberg.pipelines.spark import base_session, principal_session
from cedarberg.pipelines.tables import Tables, scalar, snapshot_ids

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PipelineResult", "run_pipeline"]


@dataclass
class PipelineResult:
    ok: bool = False
    manifest: Manifest | None = None
    stages: list[StageResult] = field(default_factory=list)
    tables: list[TableStats] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    analyst: AnalystFindings | None = None
    duckdb: DuckdbFindings | None = None


def run_pipeline(
    config: PipelineConfig, *, spark: SparkSession | None = None, out: TextIO | None = None
) -> PipelineResult:
    report = Report(out=out or sys.stdout)
    result = PipelineResult()
    tables = Tables.of(config)
    report.line(
        f"gateway {config.uri}, warehouse {config.warehouse!r} as Spark catalog {config.catalog!r}; "
        f"service account key {config.service_key.client_id}, analyst key {config.analyst_key.client_id}"
    )
    with report.stage("generate"):
        result.manifest = generate(
            config.raw_dir, rows=config.rows, seed=config.seed, file_format=config.file_format
        )
        for batch in result.manifest.batches:
            report.line(
                f"batch {batch.number}: {batch.rows:,} raw events, columns {', '.join(batch.columns)}"
            )
    base = None
    try:
        service = analyst = None
        if not report.failed:
            with report.stage("spark"):
                base = spark if spark is not None else base_session(config)
                service = principal_session(base, config, config.service_key)
                analyst = principal_session(base, config, config.analyst_key)
                report.line(
                    f"Spark {base.version}, {base.sparkContext.master}; one session per principal, "
                    "credential=<key id>:<secret> via OAuth2 client credentials"
                )
        if service is None or analyst is None or result.manifest is None:
            for name in ("bronze", "silver", "gold", "maintain", "analyst", "duckdb"):
                report.skip(name)
        else:
            _run_stages(_Run(config, tables, report, result), result.manifest, service, analyst)
            result.tables = _table_stats(service, tables)
    finally:
        result.stages = report.stages
        result.decisions = report.decisions
        result.ok = not report.failed
        report.summary(result.tables)
        if base is not None and spark is None:
            base.stop()
    return result


@dataclass(frozen=True, slots=True)
class _Run:
    """One pipeline run: its configuration, tables, the report it writes and the result it fills."""

    config: PipelineConfig
    tables: Tables
    report: Report
    result: PipelineResult


def _run_stages(run: _Run, manifest: Manifest, service: SparkSession, analyst: SparkSession) -> None:
    config, tables, report, result = run.config, run.tables, run.report, run.result
    steps: list[tuple[str, Callable[[], object]]] = [
        ("bronze", lambda: stages.ingest(service, config, tables, manifest, report)),
        ("silver", lambda: stages.refine(service, tables, manifest, report)),
        ("gold", lambda: stages.serve(service, tables, report)),
        ("maintain", lambda: stages.maintain(service, tables, report)),
    ]
    for name, step in steps:
        if report.failed:
            report.skip(name)
            continue
        with report.stage(name):
            step()
    if report.failed:
        report.skip("analyst")
    else:
        with report.stage("analyst"):
            result.analyst = run_analyst(analyst, service, tables, report)
    if not config.run_duckdb:
        report.skip("duckdb", "disabled")
    elif report.failed or result.analyst is None:
        report.skip("duckdb")
    else:
        with report.stage("duckdb"):
            result.duckdb = check_duckdb(config, tables, result.analyst, report)


def _table_stats(spark: SparkSession, tables: Tables) -> list[TableStats]:
    """Rows and snapshots of every output, as the service account (``None`` where unreadable)."""
    stats = []
    for name in (tables.bronze, tables.silver, tables.gold):
        try:
            rows = int(scalar(spark, f"SELECT count(*) FROM {name}"))
            snapshots: int | None = len(snapshot_ids(spark, name))
        except Exception:
            rows, snapshots = -1, None
        stats.append(TableStats(name, "table", rows if rows >= 0 else None, snapshots))
    try:
        view_rows: int | None = int(scalar(spark, f"SELECT count(*) FROM {tables.view}"))
    except Exception:
        view_rows = None
    stats.append(TableStats(tables.view, "view", view_rows, None))
    return stats
