"""Bounds on table metrics reports: what one report may be, and how long reports are kept.

A report is at most `MAX_REPORT_BYTES` of JSON, nested at most `MAX_DEPTH` levels and holding at
most `MAX_VALUES` values (objects, arrays and scalars, counted over the whole document). A larger
report is a DocumentTooLargeError (413), a deeper or busier one an InvalidRequestError (400); either
way nothing is stored. Real reports are far smaller: a Spark or pyiceberg scan report of a table
with hundreds of columns and a filter of dozens of predicates is a few KiB.

Reports are kept for a retention (`metrics_report_retention_seconds`); `sweep` deletes older ones.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from catalog import requests
from catalog.errors import DocumentTooLargeError, InvalidRequestError
from catalog.requests import MetricsReport
from catalog.store.sql import Store

MAX_REPORT_BYTES = 64 * 1024
MAX_DEPTH = 64  # a left-deep AND of many predicates nests one level per predicate
MAX_VALUES = 8192
SWEEP_BATCH = 1000


def parse_report(raw: bytes) -> MetricsReport:
    """A report from the raw request body, within the bounds. Raises DocumentTooLargeError for a
    body over MAX_REPORT_BYTES, InvalidRequestError for a malformed, too deep or too busy one."""
    if len(raw) > MAX_REPORT_BYTES:
        raise DocumentTooLargeError(f"metrics report is larger than {MAX_REPORT_BYTES} bytes")
    if not raw:
        raise InvalidRequestError("request body is required")
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequestError("request body is not valid JSON") from None
    _check_shape(document)
    return requests.parse(MetricsReport, document)


def _check_shape(document: Any) -> None:
    """Walk the document iteratively (no recursion to exhaust) counting values and depth."""
    pending: list[tuple[Any, int]] = [(document, 1)]
    values = 0
    while pending:
        value, depth = pending.pop()
        values += 1
        if values > MAX_VALUES:
            raise InvalidRequestError(f"metrics report holds more than {MAX_VALUES} values")
        if depth > MAX_DEPTH:
            raise InvalidRequestError(f"metrics report is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            pending.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)


async def sweep(store: Store, retention_seconds: float, now: float | None = None) -> int:
    """Delete reports received more than `retention_seconds` ago, in batches (short write
    transactions). Returns how many were deleted."""
    before_ms = int(((time.time() if now is None else now) - retention_seconds) * 1000)
    deleted = 0
    while True:
        async with store.write() as tx:
            count = await tx.delete_metrics_reports_before(before_ms, SWEEP_BATCH)
        deleted += count
        if count < SWEEP_BATCH:
            return deleted
