"""The lake's tables: names, and the small queries every stage uses to look at them."""

# ruff: noqa: S608  (SQL text is built from PipelineConfig's identifiers, checked with isidentifier, and constants)

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cedarberg.pipelines.config import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["GOLD_COLUMNS", "Tables", "current_snapshot", "last_summary", "scalar", "snapshot_ids"]

GOLD_COLUMNS = ("day", "country", "events", "purchases", "buyers", "revenue")


@dataclass(frozen=True)
class Tables:
    """Fully qualified names (``catalog.namespace.table``) of what the pipeline writes."""

    catalog: str
    raw: str
    analytics: str

    @classmethod
    def of(cls, config: PipelineConfig) -> Tables:
        return cls(config.catalog, config.raw_namespace, config.analytics_namespace)

    @property
    def bronze(self) -> str:
        return f"{self.catalog}.{self.raw}.events_bronze"

    @property
    def silver(self) -> str:
        return f"{self.catalog}.{self.raw}.events"

    @property
    def gold(self) -> str:
        return f"{self.catalog}.{self.analytics}.daily_revenue"

    @property
    def view(self) -> str:
        return f"{self.catalog}.{self.analytics}.revenue_by_country"

    def in_catalog(self, name: str) -> str:
        """``raw.events`` for ``lake.raw.events`` (procedures take names inside their catalog)."""
        return name.split(".", 1)[1]


def scalar(spark: SparkSession, sql: str) -> Any:
    """The first column of the first row of ``sql``."""
    return spark.sql(sql).collect()[0][0]


def snapshot_ids(spark: SparkSession, table: str) -> list[int]:
    """Snapshot ids of ``table``, oldest first (its ``.snapshots`` metadata table)."""
    rows = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect()
    return [int(row[0]) for row in rows]


def current_snapshot(spark: SparkSession, table: str) -> int | None:
    rows = spark.sql(
        f"SELECT snapshot_id FROM {table}.history WHERE is_current_ancestor ORDER BY made_current_at DESC"
    ).collect()
    return int(rows[0][0]) if rows else None


def last_summary(spark: SparkSession, table: str) -> dict[str, str]:
    """The newest snapshot's summary (``added-records``, ``deleted-records``, ...)."""
    rows = spark.sql(f"SELECT summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()
    return dict(rows[0][0]) if rows else {}
