"""How long table metrics reports are kept: `sweep` deletes those older than the retention
(`metrics_report_retention_seconds`). What one report may be is bounded where it is parsed
(`catalog.requests.MetricsReport` and its route's body limit): at most `MAX_REPORT_BYTES` of JSON
(larger: 413), `MAX_REPORT_DEPTH` levels and `MAX_REPORT_VALUES` values (more: 400); a refused
report stores nothing.
"""

from __future__ import annotations

import time

from cedarberg.catalog.store import metrics as metrics_rows
from cedarberg.catalog.store.pool import Store

SWEEP_BATCH = 1000


async def sweep(store: Store, retention_seconds: float, now: float | None = None) -> int:
    """Delete reports received more than `retention_seconds` ago, in batches (short write
    transactions). Returns how many were deleted."""
    before_ms = int(((time.time() if now is None else now) - retention_seconds) * 1000)
    deleted = 0
    while True:
        async with store.write() as tx:
            count = await metrics_rows.delete_metrics_reports_before(tx, before_ms, SWEEP_BATCH)
        deleted += count
        if count < SWEEP_BATCH:
            return deleted
