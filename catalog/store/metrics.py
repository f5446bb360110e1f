"""Rows of `metrics_reports` (see `catalog.store.schema.metrics_reports`): the scan and commit
reports engines send for a table, kept until the table goes or the retention deletes them."""

from __future__ import annotations

from sqlalchemy import bindparam as param
from sqlalchemy import delete, insert, select

from cedarberg.catalog.store.schema import metrics_reports
from cedarberg.catalog.store.statements import LIMIT, Sql, values_of
from cedarberg.catalog.store.tx import StoreTx, now_ms

_met = metrics_reports.c
_INSERT_METRICS = Sql(
    insert(metrics_reports).values(
        values_of(
            metrics_reports, "warehouse", "namespace", "name", "report_type", "report", "received_at_ms"
        )
    )
)
_DELETE_METRICS = Sql(
    delete(metrics_reports).where(
        _met.warehouse == param("warehouse"),
        _met.namespace == param("namespace"),
        _met.name == param("name"),
    )
)
_DELETE_METRICS_BEFORE = Sql(
    delete(metrics_reports).where(
        _met.id.in_(
            select(_met.id)
            .where(_met.received_at_ms < param("before"))
            .order_by(_met.received_at_ms)
            .limit(LIMIT)
            .scalar_subquery()
        )
    )
)


async def insert_metrics_report(
    tx: StoreTx, warehouse: str, namespace: str, name: str, report_type: str, report: bytes
) -> None:
    """Keep one report of a table."""
    await tx.connection.execute(
        _INSERT_METRICS,
        {
            "warehouse": warehouse,
            "namespace": namespace,
            "name": name,
            "report_type": report_type,
            "report": report,
            "received_at_ms": now_ms(),
        },
    )


async def delete_metrics_reports(tx: StoreTx, warehouse: str, namespace: str, name: str) -> None:
    """Delete every report of a table (it is dropped)."""
    await tx.connection.execute(
        _DELETE_METRICS, {"warehouse": warehouse, "namespace": namespace, "name": name}
    )


async def delete_metrics_reports_before(tx: StoreTx, before_ms: int, limit: int) -> int:
    """Delete up to `limit` reports received before `before_ms` (oldest first, by the
    `ix_metrics_received` index); returns how many."""
    result = await tx.connection.execute(_DELETE_METRICS_BEFORE, {"before": before_ms, "limit": limit})
    return int(result.rowcount)
