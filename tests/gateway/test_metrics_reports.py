"""Metrics reports are bounded in size and shape, and kept only for the configured retention.

Attack (issue 15, section 4): reports were accepted with any extra fields and kept forever. Now a
report over 64 KiB is a 413, one nested too deep or holding too many values a 400, nothing of
either is stored, fields outside the spec are dropped, and reports older than
`metrics_report_retention_seconds` are deleted by the periodic sweep. Control: scan and commit
reports as Spark (Iceberg's Java client) sends them are accepted and stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from cedarberg.catalog.requests import MAX_REPORT_BYTES, MAX_REPORT_DEPTH, MAX_REPORT_VALUES
from tests.gateway.test_bad_input import assert_error
from tests.support import registry
from tests.support.gateway import GatewayProcess

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
TIMEOUT = 30
RETENTION_SECONDS = 6


def _timer(nanos: int) -> dict[str, Any]:
    return {"count": 1, "time-unit": "nanoseconds", "total-duration": nanos}


def _counter(value: int, unit: str = "count") -> dict[str, Any]:
    return {"unit": unit, "value": value}


ENGINE = {"engine-name": "spark", "engine-version": "3.5.1", "app-id": "local-1", "iceberg-version": "1.5.2"}

# What Iceberg's Java client (Spark) sends: ScanReportParser / CommitReportParser.
SPARK_SCAN_REPORT: dict[str, Any] = {
    "report-type": "scan-report",
    "table-name": "rest.m.t",
    "snapshot-id": 8264837420931417000,
    "filter": {
        "type": "and",
        "left": {"type": "not-null", "term": "id"},
        "right": {"type": "gt", "term": "id", "value": 5},
    },
    "schema-id": 0,
    "projected-field-ids": [1],
    "projected-field-names": ["id"],
    "metrics": {
        "total-planning-duration": _timer(29_513_708),
        "result-data-files": _counter(1),
        "result-delete-files": _counter(0),
        "total-data-manifests": _counter(1),
        "total-delete-manifests": _counter(0),
        "scanned-data-manifests": _counter(1),
        "skipped-data-manifests": _counter(0),
        "total-file-size-in-bytes": _counter(612, "bytes"),
        "total-delete-file-size-in-bytes": _counter(0, "bytes"),
        "skipped-data-files": _counter(0),
        "skipped-delete-files": _counter(0),
        "scanned-delete-manifests": _counter(0),
        "skipped-delete-manifests": _counter(0),
        "indexed-delete-files": _counter(0),
        "equality-delete-files": _counter(0),
        "positional-delete-files": _counter(0),
    },
    "metadata": ENGINE,
}
SPARK_COMMIT_REPORT: dict[str, Any] = {
    "report-type": "commit-report",
    "table-name": "rest.m.t",
    "snapshot-id": 8264837420931417000,
    "sequence-number": 1,
    "operation": "append",
    "metrics": {
        "total-duration": _timer(141_093_292),
        "attempts": _counter(1),
        "added-data-files": _counter(1),
        "total-data-files": _counter(1),
        "total-delete-files": _counter(0),
        "added-records": _counter(3),
        "total-records": _counter(3),
        "added-files-size-in-bytes": _counter(612, "bytes"),
        "total-files-size-in-bytes": _counter(612, "bytes"),
        "total-positional-deletes": _counter(0),
        "total-equality-deletes": _counter(0),
    },
    "metadata": ENGINE,
}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None) -> Iterator[GatewayProcess]:
    """A gateway that keeps reports for 6 seconds and sweeps twice a second (each test reports
    to a table of its own and checks within a second)."""
    config = {"metrics_report_retention_seconds": RETENTION_SECONDS, "purge_interval_seconds": 0.5}
    directory = tmp_path_factory.mktemp("metrics") / "gw"
    with GatewayProcess(directory, store_url=module_store_url, config=config) as process:
        for namespace in ("ok", "bad", "extra", "old"):
            assert requests.post(
                f"{process.url}/v1/namespaces", json={"namespace": [namespace]}, timeout=TIMEOUT
            ).ok
            created = requests.post(
                f"{process.url}/v1/namespaces/{namespace}/tables",
                json={"name": "t", "schema": SCHEMA},
                timeout=TIMEOUT,
            )
            assert created.status_code == 200, created.text
        yield process


def _report(gw: GatewayProcess, body: bytes | dict[str, Any], namespace: str) -> requests.Response:
    url = f"{gw.url}/v1/namespaces/{namespace}/tables/t/metrics"
    if isinstance(body, bytes):
        return requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
    return requests.post(url, json=body, timeout=TIMEOUT)


def _stored(gw: GatewayProcess, namespace: str) -> list[tuple[str, int]]:
    """(type, sealed size) of the reports stored for the namespace's table `t`."""
    rows = registry.query(
        gw,
        "SELECT report_type, length(report) FROM metrics_reports WHERE namespace = ? ORDER BY id",
        namespace,
    )
    return [(str(kind), int(size)) for kind, size in rows]


def _nested(depth: int) -> Any:
    value: Any = {"type": "not-null", "term": "id"}
    for _ in range(depth):
        value = {"type": "not", "child": value}
    return value


def test_spark_shaped_scan_and_commit_reports_are_stored(gw: GatewayProcess) -> None:
    assert _report(gw, SPARK_SCAN_REPORT, "ok").status_code == 204
    assert _report(gw, SPARK_COMMIT_REPORT, "ok").status_code == 204
    # A wide table's scan report: hundreds of projected columns and a long conjunction.
    wide = {
        **SPARK_SCAN_REPORT,
        "filter": _nested(40),
        "projected-field-ids": list(range(1, 501)),
        "projected-field-names": [f"column_{i}" for i in range(1, 501)],
    }
    assert _report(gw, wide, "ok").status_code == 204
    assert [kind for kind, _ in _stored(gw, "ok")] == [
        "scan-report",
        "commit-report",
        "scan-report",
    ]


def test_oversized_deep_or_busy_reports_are_refused_and_not_stored(gw: GatewayProcess) -> None:
    oversized = {**SPARK_SCAN_REPORT, "metadata": {"padding": "x" * MAX_REPORT_BYTES}}
    assert_error(_report(gw, oversized, "bad"), 413, "RequestTooLargeException")
    assert_error(
        _report(gw, {**SPARK_SCAN_REPORT, "filter": _nested(MAX_REPORT_DEPTH + 1)}, "bad"),
        400,
        "BadRequestException",
    )
    busy = {**SPARK_SCAN_REPORT, "projected-field-ids": [0] * (MAX_REPORT_VALUES + 1)}
    assert_error(_report(gw, busy, "bad"), 400, "BadRequestException")
    assert_error(_report(gw, b"{" * 5000, "bad"), 400, "BadRequestException")
    assert _stored(gw, "bad") == []


def test_fields_outside_the_spec_are_dropped(gw: GatewayProcess) -> None:
    padded = {**SPARK_COMMIT_REPORT, "x-anything": "y" * (MAX_REPORT_BYTES - 4096)}
    assert _report(gw, padded, "extra").status_code == 204
    [(_, size)] = _stored(gw, "extra")
    assert size < 4096  # the padding was not kept


def test_reports_older_than_the_retention_are_deleted(gw: GatewayProcess) -> None:
    sent = time.monotonic()
    assert _report(gw, SPARK_SCAN_REPORT, namespace="old").status_code == 204
    assert len(_stored(gw, "old")) == 1
    while _stored(gw, "old") and time.monotonic() < sent + 30:
        time.sleep(0.25)
    assert _stored(gw, "old") == []
    assert time.monotonic() - sent >= RETENTION_SECONDS - 0.5  # kept for the retention, not less
    # A fresh report is kept until it ages out in turn.
    assert _report(gw, SPARK_COMMIT_REPORT, namespace="old").status_code == 204
    assert len(_stored(gw, "old")) == 1
