"""The service account's stages: ingest -> bronze, refine -> silver, serve -> gold, maintain
(reported as stages `bronze`, `silver`, `gold` and `maintain`).

Every function takes the service account's session (`pipelines.spark.principal_session`), runs
its SQL through the gateway, prints progress through the `Report`, records each catalog request
it makes as an allowed decision, and raises `StageFailedError` when a result is not what the data
implies (so a run never reports success over wrong numbers).

- ``ingest``: (re)creates ``raw.events_bronze`` partitioned by ``days(event_time)`` and appends
  every batch as delivered (duplicates included), with ``batch_id`` and ``ingested_at``. A column
  the table lacks (``channel`` in batch 2) is added first (``ALTER TABLE ... ADD COLUMN``).
- ``refine``: per batch, keeps the newest delivery of each ``event_id`` (``row_number()`` over
  ``seq``) and ``MERGE INTO raw.events``: corrections update, new events insert; the schema of
  silver evolves the same way before the batch that brings the new column.
- ``serve``: ``analytics.daily_revenue`` (day x country: events, purchases, buyers, revenue =
  purchases - refunds) rebuilt with ``INSERT OVERWRITE``, and the view
  ``analytics.revenue_by_country`` over it.
- ``maintain``: ``rewrite_data_files`` (compaction) then ``expire_snapshots`` (keep the current
  one) on silver; its rows must not change.
"""

# ruff: noqa: S608  (SQL text is built from PipelineConfig's identifiers, checked with isidentifier, and constants)

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from cedarberg.pipelines.generate import BASE_COLUMNS, COLUMN_TYPES, Manifest
from cedarberg.pipelines.report import Report, StageFailedError
from cedarberg.pipelines.tables import Tables, last_summary, scalar, snapshot_ids

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cedarberg.pipelines.config import PipelineConfig

__all__ = ["SERVICE", "ingest", "maintain", "refine", "serve"]

SERVICE = "service-account"
PARTITIONING = "PARTITIONED BY (days(event_time))"


def _sql(spark: SparkSession, report: Report, operation: str, target: str, statement: str) -> DataFrame:
    frame = spark.sql(statement)
    report.decision(SERVICE, operation, target, "allowed")
    return frame


def _columns(spark: SparkSession, table: str) -> list[str]:
    return [field.name for field in spark.table(table).schema.fields]


def _evolve(spark: SparkSession, report: Report, table: str, wanted: list[str], why: str) -> None:
    """Add the event columns ``table`` lacks (schema evolution: metadata only, no rewrite)."""
    present = set(_columns(spark, table))
    for column in wanted:
        if column not in present:
            _sql(
                spark, report, "alter table (add column)", table,
                f"ALTER TABLE {table} ADD COLUMN {column} {COLUMN_TYPES[column]}",
            )  # fmt: skip
            report.line(f"schema evolution: {table} + {column} {COLUMN_TYPES[column]} ({why})")


def _read_batch(
    spark: SparkSession, config: PipelineConfig, files: list[str], columns: list[str]
) -> DataFrame:
    schema = ", ".join(f"{c} {COLUMN_TYPES[c]}" for c in columns)
    reader = spark.read.schema(schema).option("mode", "FAILFAST")
    paths = [str(config.raw_dir / f) for f in files]
    if config.file_format == "csv":
        return reader.option("header", "true").csv(paths)
    return reader.json(paths)


def setup(spark: SparkSession, config: PipelineConfig, tables: Tables, report: Report) -> None:
    """Check the namespaces exist (admins create them, with grants) and drop this pipeline's
    tables and view from an earlier run, so that every run rebuilds them from its input."""
    visible = {row[0] for row in _sql(spark, report, "list namespaces", tables.catalog,
                                      f"SHOW NAMESPACES IN {tables.catalog}").collect()}  # fmt: skip
    for namespace in (tables.raw, tables.analytics):
        if namespace not in visible:
            raise StageFailedError(
                f"namespace {namespace!r} is not visible to the service account: an admin creates it "
                "with cedarberg.writers naming the service account's group"
            )
    _sql(spark, report, "drop view", tables.view, f"DROP VIEW IF EXISTS {tables.view}")
    for table in (tables.gold, tables.silver, tables.bronze):
        _sql(spark, report, "drop table", table, f"DROP TABLE IF EXISTS {table} PURGE")
    report.line(f"namespaces {tables.raw} (PII) and {tables.analytics} found; earlier outputs dropped")


def ingest(
    spark: SparkSession, config: PipelineConfig, tables: Tables, manifest: Manifest, report: Report
) -> None:
    from pyspark.sql import functions as F

    setup(spark, config, tables, report)
    first = manifest.batches[0].columns
    definition = ", ".join(f"{c} {COLUMN_TYPES[c]}" for c in first)
    _sql(
        spark, report, "create table", tables.bronze,
        f"CREATE TABLE {tables.bronze} ({definition}, batch_id INT, ingested_at TIMESTAMP) "
        f"USING iceberg {PARTITIONING}",
    )  # fmt: skip
    report.line(f"created {tables.bronze}, partitioned by days(event_time)")
    for batch in manifest.batches:
        _evolve(spark, report, tables.bronze, list(batch.columns), f"first seen in batch {batch.number}")
        frame = _read_batch(spark, config, list(batch.files), list(batch.columns))
        frame = frame.withColumn("batch_id", F.lit(batch.number)).withColumn(
            "ingested_at", F.current_timestamp()
        )
        frame.writeTo(tables.bronze).append()
        report.decision(SERVICE, "append", tables.bronze, "allowed")
        added = int(last_summary(spark, tables.bronze).get("added-records", "0"))
        report.line(
            f"batch {batch.number}: {added:,} rows from {len(batch.files)} {manifest.file_format} files "
            f"-> {tables.bronze}"
        )
        if added != batch.rows:
            raise StageFailedError(f"batch {batch.number}: {batch.rows} rows delivered, {added} ingested")


def refine(spark: SparkSession, tables: Tables, manifest: Manifest, report: Report) -> None:
    # Keep every shuffle partition of the MERGE a writer of its own (adaptive execution would
    # merge them into one task for data this small): silver then gets several files per day.
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    first = [*BASE_COLUMNS]
    definition = ", ".join(f"{c} {COLUMN_TYPES[c]}" for c in first)
    _sql(
        spark, report, "create table", tables.silver,
        f"CREATE TABLE {tables.silver} ({definition}, batch_id INT) USING iceberg {PARTITIONING} "
        # No shuffle by partition before writing: each task writes its own file per day, as
        # streaming or unsorted writers do, so the maintenance stage has small files to compact.
        "TBLPROPERTIES ('write.merge.mode' = 'copy-on-write', 'write.distribution-mode' = 'none', "
        "'write.merge.distribution-mode' = 'none')",
    )  # fmt: skip
    for batch in manifest.batches:
        event_columns = [c for c in batch.columns if c in COLUMN_TYPES]
        _evolve(spark, report, tables.silver, event_columns, f"batch {batch.number} brings it")
        columns = [*event_columns, "batch_id"]
        cols = ", ".join(columns)
        delivered = spark.sql(f"SELECT {cols} FROM {tables.bronze} WHERE batch_id = {batch.number}")
        newest = spark.sql(
            f"SELECT {cols} FROM (SELECT {cols}, row_number() OVER "
            f"(PARTITION BY event_id ORDER BY seq DESC) AS delivery FROM {tables.bronze} "
            f"WHERE batch_id = {batch.number}) WHERE delivery = 1"
        )
        newest.createOrReplaceTempView("refine_source")
        raw_rows = delivered.count()
        unique = newest.count()
        known = int(
            scalar(spark, f"SELECT count(*) FROM refine_source s JOIN {tables.silver} t USING (event_id)")
        )
        updates = ", ".join(f"{c} = s.{c}" for c in columns if c != "event_id")
        _sql(
            spark, report, "merge into", tables.silver,
            f"MERGE INTO {tables.silver} t USING refine_source s ON t.event_id = s.event_id "
            f"WHEN MATCHED AND s.seq > t.seq THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({', '.join('s.' + c for c in columns)})",
        )  # fmt: skip
        total = int(scalar(spark, f"SELECT count(*) FROM {tables.silver}"))
        report.line(
            f"batch {batch.number}: {raw_rows:,} deliveries -> {unique:,} after dedupe -> MERGE: "
            f"{unique - known:,} new, {known:,} corrected; {tables.silver} has {total:,} rows"
        )
        duplicates = int(scalar(spark, f"SELECT count(*) - count(DISTINCT event_id) FROM {tables.silver}"))
        if duplicates:
            raise StageFailedError(f"{duplicates} duplicate event_id values in {tables.silver}")


def serve(spark: SparkSession, tables: Tables, report: Report) -> None:
    _sql(
        spark, report, "create table", tables.gold,
        f"CREATE TABLE {tables.gold} (day DATE, country STRING, events BIGINT, purchases BIGINT, "
        "buyers BIGINT, revenue DECIMAL(18,2)) USING iceberg",
    )  # fmt: skip
    _sql(
        spark, report, "insert overwrite", tables.gold,
        f"""INSERT OVERWRITE {tables.gold}
            SELECT to_date(event_time) AS day, country,
                   count(*) AS events,
                   count_if(event_type = 'purchase') AS purchases,
                   count(DISTINCT CASE WHEN event_type = 'purchase' THEN user_id END) AS buyers,
                   CAST(sum(CASE event_type WHEN 'purchase' THEN amount
                                            WHEN 'refund' THEN -amount ELSE 0 END) AS DECIMAL(18,2))
                     AS revenue
            FROM {tables.silver}
            GROUP BY to_date(event_time), country""",
    )  # fmt: skip
    rows = int(scalar(spark, f"SELECT count(*) FROM {tables.gold}"))
    report.line(f"{tables.gold}: {rows:,} rows (day x country) from {tables.silver}")
    # The view names the catalog: whoever reads it resolves `lake` to their own credentials.
    _sql(
        spark, report, "create view", tables.view,
        f"""CREATE OR REPLACE VIEW {tables.view} AS
            SELECT country, sum(events) AS events, sum(purchases) AS purchases,
                   sum(revenue) AS revenue
            FROM {tables.gold} GROUP BY country""",
    )  # fmt: skip
    countries = int(scalar(spark, f"SELECT count(*) FROM {tables.view}"))
    report.line(f"view {tables.view}: {countries} countries")


def maintain(spark: SparkSession, tables: Tables, report: Report) -> None:
    silver = tables.silver
    rows_before = int(scalar(spark, f"SELECT count(*) FROM {silver}"))
    files_before = int(scalar(spark, f"SELECT count(*) FROM {silver}.files"))
    name = tables.in_catalog(silver)
    rewrite = _sql(
        spark, report, "rewrite_data_files", silver,
        f"CALL {tables.catalog}.system.rewrite_data_files(table => '{name}', "
        "options => map('min-input-files', '2'))",
    ).collect()[0]  # fmt: skip
    report.line(
        f"rewrite_data_files: {rewrite['rewritten_data_files_count']} files rewritten into "
        f"{rewrite['added_data_files_count']}"
    )
    snapshots_before = len(snapshot_ids(spark, silver))
    cutoff = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    expired = _sql(
        spark, report, "expire_snapshots", silver,
        f"CALL {tables.catalog}.system.expire_snapshots(table => '{name}', "
        f"older_than => TIMESTAMP '{cutoff}', retain_last => 1)",
    ).collect()[0]  # fmt: skip
    snapshots_after = len(snapshot_ids(spark, silver))
    files_after = int(scalar(spark, f"SELECT count(*) FROM {silver}.files"))
    rows_after = int(scalar(spark, f"SELECT count(*) FROM {silver}"))
    report.line(
        f"expire_snapshots: snapshots {snapshots_before} -> {snapshots_after}, "
        f"{expired['deleted_data_files_count']} data files and "
        f"{expired['deleted_manifest_lists_count']} manifest lists deleted; "
        f"live data files {files_before} -> {files_after}"
    )
    if rows_after != rows_before:
        raise StageFailedError(f"maintenance changed {silver}: {rows_before} rows -> {rows_after}")
    if snapshots_after != 1:
        raise StageFailedError(f"{silver} kept {snapshots_after} snapshots after expire_snapshots")
