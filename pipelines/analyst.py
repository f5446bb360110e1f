"""The analyst: a reader of ``analytics``, with no access to the PII namespace ``raw``.

As the analyst's own session (`pipelines.spark.principal_session` with the analyst's key):

1. reads gold and the view over it (allowed);
2. tries to write: ``INSERT INTO`` and ``DELETE FROM`` gold, ``CREATE TABLE`` in analytics: each
   must fail with Iceberg's ``ForbiddenException`` (HTTP 403), which is printed;
3. looks for the PII: ``raw`` is not listed, and its table and namespace answer "not found"
   (404: the gateway does not confirm that they exist);
4. checks that the refused writes left no trace: gold has the same snapshots and rows, and the
   table the analyst tried to create does not exist (checked as the service account).

A write that succeeds, a refusal for another reason, or a trace left behind raises
`StageFailedError`.
"""

# ruff: noqa: S608  (SQL text is built from PipelineConfig's identifiers, checked with isidentifier, and constants)

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cedarberg.pipelines.report import Report, StageFailedError
from cedarberg.pipelines.spark import iceberg_error
from cedarberg.pipelines.tables import GOLD_COLUMNS, Tables, snapshot_ids

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ANALYST", "AnalystFindings", "run_analyst"]

ANALYST = "analyst"
SCRATCH_TABLE = "analyst_scratch"
_HIDDEN_MARKERS = ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND", "NoSuchTableException", "NoSuchNamespace")


@dataclass
class AnalystFindings:
    gold: list[tuple[Any, ...]] = field(default_factory=list)  # ordered by day, country
    by_country: list[tuple[Any, ...]] = field(default_factory=list)  # the view, ordered by country
    refused: list[tuple[str, str]] = field(default_factory=list)  # (operation, Iceberg exception)
    hidden: list[tuple[str, str]] = field(default_factory=list)  # (what, error)
    gold_snapshots_before: list[int] = field(default_factory=list)
    gold_snapshots_after: list[int] = field(default_factory=list)
    gold_rows_before: int = 0
    gold_rows_after: int = 0
    scratch_table_exists: bool = False

    @property
    def left_no_trace(self) -> bool:
        return (
            self.gold_snapshots_before == self.gold_snapshots_after
            and self.gold_rows_before == self.gold_rows_after
            and not self.scratch_table_exists
        )


def run_analyst(
    analyst: SparkSession, service: SparkSession, tables: Tables, report: Report
) -> AnalystFindings:
    found = AnalystFindings()
    columns = ", ".join(GOLD_COLUMNS)
    found.gold = [
        tuple(r) for r in analyst.sql(f"SELECT {columns} FROM {tables.gold} ORDER BY day, country").collect()
    ]
    report.decision(ANALYST, "read", tables.gold, "allowed")
    found.by_country = [
        tuple(r) for r in analyst.sql(f"SELECT * FROM {tables.view} ORDER BY country").collect()
    ]
    report.decision(ANALYST, "read view", tables.view, "allowed")
    report.line(f"read {tables.gold} ({len(found.gold)} rows) and {tables.view} ({len(found.by_country)})")
    found.gold_snapshots_before = snapshot_ids(analyst, tables.gold)
    found.gold_rows_before = len(found.gold)

    _attempt_writes(analyst, tables, report, found)
    _probe_pii(analyst, tables, report, found)
    found.gold_snapshots_after = snapshot_ids(analyst, tables.gold)
    found.gold_rows_after = int(analyst.sql(f"SELECT count(*) FROM {tables.gold}").collect()[0][0])
    listed = service.sql(f"SHOW TABLES IN {tables.catalog}.{tables.analytics}").collect()
    found.scratch_table_exists = SCRATCH_TABLE in {row["tableName"] for row in listed}
    if not found.left_no_trace:
        raise StageFailedError(
            f"the refused writes left a trace: snapshots {found.gold_snapshots_before} -> "
            f"{found.gold_snapshots_after}, rows {found.gold_rows_before} -> {found.gold_rows_after}, "
            f"{SCRATCH_TABLE} exists: {found.scratch_table_exists}"
        )
    report.line(
        f"no trace: {tables.gold} still has {len(found.gold_snapshots_after)} snapshot(s) and "
        f"{found.gold_rows_after} rows; {SCRATCH_TABLE} does not exist"
    )
    return found


def _attempt_writes(analyst: SparkSession, tables: Tables, report: Report, found: AnalystFindings) -> None:
    attempts = {
        "INSERT INTO": (tables.gold, f"INSERT INTO {tables.gold} VALUES "
                        "(DATE '2026-01-01', 'ZZ', 1, 1, 1, CAST(1000000 AS DECIMAL(18,2)))"),
        "DELETE FROM": (tables.gold, f"DELETE FROM {tables.gold} WHERE country = 'ZA'"),
        "CREATE TABLE": (f"{tables.catalog}.{tables.analytics}.{SCRATCH_TABLE}",
                         f"CREATE TABLE {tables.catalog}.{tables.analytics}.{SCRATCH_TABLE} "
                         "(id BIGINT) USING iceberg"),
    }  # fmt: skip
    context = analyst.sparkContext
    for operation, (target, statement) in attempts.items():
        context.setLogLevel("OFF")  # Spark logs the aborted write job before raising it
        try:
            analyst.sql(statement).collect()
        except Exception as err:
            line = iceberg_error(err)
            if "ForbiddenException" not in line:
                raise StageFailedError(f"{operation} {target} failed, but not as forbidden: {line}") from err
            found.refused.append((operation, line))
            report.decision(ANALYST, operation, target, "denied", line)
            report.line(f"{operation} {target} refused: {line}")
        else:
            raise StageFailedError(f"the analyst's {operation} {target} was accepted")
        finally:
            context.setLogLevel("ERROR")


def _probe_pii(analyst: SparkSession, tables: Tables, report: Report, found: AnalystFindings) -> None:
    namespaces = {row[0] for row in analyst.sql(f"SHOW NAMESPACES IN {tables.catalog}").collect()}
    if tables.raw in namespaces or tables.analytics not in namespaces:
        raise StageFailedError(f"the analyst lists namespaces {sorted(namespaces)}")
    found.hidden.append(("SHOW NAMESPACES", f"lists {sorted(namespaces)}, not {tables.raw!r}"))
    report.decision(ANALYST, "list namespaces", tables.catalog, "hidden", f"{tables.raw!r} not listed")
    report.line(f"SHOW NAMESPACES IN {tables.catalog}: {sorted(namespaces)} ({tables.raw!r} is not listed)")
    probes = {
        f"SELECT FROM {tables.silver}": f"SELECT * FROM {tables.silver} LIMIT 1",
        f"SHOW TABLES IN {tables.catalog}.{tables.raw}": f"SHOW TABLES IN {tables.catalog}.{tables.raw}",
    }
    for what, statement in probes.items():
        try:
            analyst.sql(statement).collect()
        except Exception as err:
            line = iceberg_error(err)
            if not any(marker in line for marker in _HIDDEN_MARKERS):
                raise StageFailedError(f"{what}: expected 'not found', got {line}") from err
            found.hidden.append((what, line))
            report.decision(ANALYST, what.split(" ", 1)[0].lower(), what.rsplit(" ", 1)[1], "hidden", line)
            report.line(f"{what}: {line}")
        else:
            raise StageFailedError(f"the analyst could {what}")
