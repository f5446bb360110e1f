"""The audit trail cannot be lost silently: a real gateway whose audit file sits on a small real
filesystem that fills up, is covered by a read-only one, or loses the file.

While the audit destination cannot take records, every mutation fails closed (503 ErrorModel,
nothing changed), reads follow `audit.reads_when_failing`, /ready and the metrics name the
failing sink; when it recovers, recording resumes by itself and every acknowledged mutation has
its records.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from cedarberg.gateway.web.outcomes import APPLIED_NOT_RECORDED
from tests.support.audit import flushed_audit_log
from tests.support.gateway import GatewayProcess
from tests.support.s3 import moto_s3_server
from tests.support.tmpfs import SmallDisk

RETRY_SECONDS = 0.2
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    small = SmallDisk(tmp_path / "auditdisk", size_kib=128)
    yield small
    small.unmount()  # after the gateway (set up later, stopped first) has let go of its file


def _gateway(tmp_path: Path, audit_file: Path, reads: str = "serve") -> GatewayProcess:
    audit = {
        "destination": str(audit_file),
        "retry_interval_seconds": RETRY_SECONDS,
        "reads_when_failing": reads,
    }
    return GatewayProcess(tmp_path / "gw", config={"audit": audit})


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _create_namespace(gw: GatewayProcess, name: str) -> requests.Response:
    return requests.post(f"{gw.url}/v1/namespaces", json={"namespace": [name]}, timeout=30)


def _namespaces(gw: GatewayProcess) -> set[str]:
    answer = requests.get(f"{gw.url}/v1/namespaces", timeout=30)
    assert answer.status_code == 200, answer.text
    return {parts[0] for parts in answer.json()["namespaces"]}


def _commit(gw: GatewayProcess, value: str) -> requests.Response:
    change = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": value}}]}
    return requests.post(f"{gw.url}/v1/namespaces/base/tables/t", json=change, timeout=30)


def _table_properties(gw: GatewayProcess) -> dict[str, str]:
    answer = requests.get(f"{gw.url}/v1/namespaces/base/tables/t", timeout=30)
    assert answer.status_code == 200, answer.text
    properties: dict[str, str] = answer.json()["metadata"]["properties"]
    return properties


def _assert_refused(answer: requests.Response) -> None:
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error == {
        "message": "the audit log cannot record requests right now; nothing was done",
        "type": "ServiceUnavailableException",
        "code": 503,
    }


def _ready(gw: GatewayProcess) -> requests.Response:
    return requests.get(f"{gw.url}/ready", timeout=30)


def _metric(gw: GatewayProcess, name: str) -> float:
    text = requests.get(f"{gw.url}/metrics", timeout=30).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


def _assert_audit_unavailable(gw: GatewayProcess) -> None:
    ready = _ready(gw)
    assert ready.status_code == 503
    body = ready.json()
    assert body["checks"]["audit"] == "unavailable"
    assert body["error"]["message"] == "not ready: audit"
    assert _metric(gw, "cedarberg_audit_sink_up") == 0
    assert _metric(gw, "cedarberg_audit_write_failures_total") >= 1
    assert requests.get(f"{gw.url}/health", timeout=30).status_code == 200  # alive, not ready


def _recovered(gw: GatewayProcess) -> None:
    _wait_for(lambda: _ready(gw).status_code == 200, "/ready to recover by itself")
    assert _metric(gw, "cedarberg_audit_sink_up") == 1


def _assert_recorded(records: list[dict[str, Any]], request_id: str, action: str) -> None:
    """The request's allow decision is on record before its successful outcome."""
    mine = [r for r in records if r["request_id"] == request_id]
    kinds = [(r["event"], r["decision"], r["outcome"]) for r in mine]
    assert ("decision", "allow", None) in kinds, mine
    outcome = next(i for i, r in enumerate(mine) if r["event"] == "mutation")
    assert kinds[0] == ("decision", "allow", None)
    assert mine[outcome]["action"] == action
    assert mine[outcome]["outcome"] == "success"
    assert mine[outcome]["status"] in (200, 204)


def test_full_audit_disk_refuses_mutations_and_recording_resumes(disk: SmallDisk, tmp_path: Path) -> None:
    audit_file = disk.root / "audit.jsonl"
    with _gateway(tmp_path, audit_file) as gw:
        acknowledged: list[tuple[str, str]] = []  # (request id, action)
        created = _create_namespace(gw, "base")
        assert created.status_code == 200, created.text
        acknowledged.append((created.headers["X-Request-ID"], "createNamespace"))
        table = requests.post(
            f"{gw.url}/v1/namespaces/base/tables", json={"name": "t", "schema": SCHEMA}, timeout=30
        )
        assert table.status_code == 200, table.text
        acknowledged.append((table.headers["X-Request-ID"], "createTable"))
        properties = _table_properties(gw)

        disk.fill()
        # The file's last page takes a few more records; the first mutation whose records do
        # not fit is refused, and so is every one after it.
        # The first mutation refused is either refused before anything changed or, when its
        # decision still fit and its outcome did not, applied and not acknowledged.
        created_while_filling: list[str] = []
        unacknowledged: str | None = None
        for n in range(60):
            answer = _create_namespace(gw, f"fill{n}")
            if answer.status_code == 200:
                acknowledged.append((answer.headers["X-Request-ID"], "createNamespace"))
                created_while_filling.append(f"fill{n}")
                continue
            if answer.json()["error"]["message"] == APPLIED_NOT_RECORDED:
                assert answer.status_code == 503
                unacknowledged = answer.headers["X-Request-ID"]
                created_while_filling.append(f"fill{n}")
            else:
                _assert_refused(answer)
            break
        else:
            raise AssertionError("a full audit disk kept taking mutations")
        refused = [f"refused{n}" for n in range(20)]
        for name in refused:
            _assert_refused(_create_namespace(gw, name))
        _assert_refused(_commit(gw, "during"))
        _assert_refused(requests.delete(f"{gw.url}/v1/namespaces/base/tables/t", timeout=30))

        # Reads are served (reads_when_failing = "serve") and show that nothing changed.
        listing = requests.get(f"{gw.url}/v1/namespaces", timeout=30)
        assert listing.status_code == 200
        read_during = listing.headers["X-Request-ID"]
        assert _namespaces(gw) == {"base", *created_while_filling}
        assert _table_properties(gw) == properties
        _assert_audit_unavailable(gw)

        disk.free()
        _recovered(gw)
        after = _create_namespace(gw, "after")
        assert after.status_code == 200, after.text
        acknowledged.append((after.headers["X-Request-ID"], "createNamespace"))
        committed = _commit(gw, "after")
        assert committed.status_code == 200, committed.text
        acknowledged.append((committed.headers["X-Request-ID"], "updateTable"))
        assert _table_properties(gw)["k"] == "after"
        records = flushed_audit_log(audit_file)

    for request_id, action in acknowledged:
        _assert_recorded(records, request_id, action)
    if unacknowledged is not None:  # its outcome was kept and written on recovery, saying so
        _assert_recorded(records, unacknowledged, "createNamespace")
        told = [r for r in records if r["request_id"] == unacknowledged and r["status"] == 503]
        assert [(r["event"], r["outcome"], r["detail"]) for r in told] == [
            ("mutation", "success", {"acknowledged": False, "reason": "audit log unavailable"})
        ]
    # The read made during the outage was kept and written on recovery.
    assert any(r["request_id"] == read_during and r["event"] == "decision" for r in records)
    # No refused mutation has an outcome: nothing was done.
    outcomes = {r["resource"] for r in records if r["event"] == "mutation"}
    assert not any(name in resource for resource in outcomes for name in refused)


def test_read_only_audit_destination_fails_closed_until_writable(disk: SmallDisk, tmp_path: Path) -> None:
    logs = disk.root / "logs"
    audit_file = logs / "audit.jsonl"
    with _gateway(tmp_path, audit_file) as gw:
        assert _create_namespace(gw, "before").status_code == 200
        disk.cover_read_only(logs)  # the file is out of reach at its path; nothing can be created
        try:
            _assert_refused(_create_namespace(gw, "during"))
            _assert_audit_unavailable(gw)
            assert _namespaces(gw) == {"before"}
        finally:
            disk.uncover()
        _recovered(gw)
        after = _create_namespace(gw, "after")
        assert after.status_code == 200, after.text
        records = flushed_audit_log(audit_file)
    _assert_recorded(records, after.headers["X-Request-ID"], "createNamespace")
    assert not [r for r in records if r["event"] == "mutation" and "during" in r["resource"]]


def test_removed_audit_file_is_recreated_without_losing_records(tmp_path: Path) -> None:
    audit_file = tmp_path / "audit" / "audit.jsonl"
    with _gateway(tmp_path, audit_file) as gw:
        assert _create_namespace(gw, "before").status_code == 200
        flushed_audit_log(audit_file)
        audit_file.unlink()  # an operator removes the log under the running gateway
        listing = requests.get(f"{gw.url}/v1/namespaces", timeout=30)
        assert listing.status_code == 200
        after = _create_namespace(gw, "after")
        assert after.status_code == 200, after.text
        assert _ready(gw).status_code == 200
        records = flushed_audit_log(audit_file)
    # The new file at the configured path has everything since the removal.
    assert any(r["request_id"] == listing.headers["X-Request-ID"] for r in records)
    _assert_recorded(records, after.headers["X-Request-ID"], "createNamespace")


def test_refuse_setting_refuses_reads_while_the_audit_disk_is_full(disk: SmallDisk, tmp_path: Path) -> None:
    audit_file = disk.root / "audit.jsonl"
    with _gateway(tmp_path, audit_file, reads="refuse") as gw:
        assert _create_namespace(gw, "base").status_code == 200
        assert requests.get(f"{gw.url}/v1/namespaces/base", timeout=30).status_code == 200  # control
        disk.fill()
        for n in range(60):
            if _create_namespace(gw, f"fill{n}").status_code == 503:
                break
        else:
            raise AssertionError("a full audit disk kept taking mutations")
        _assert_refused(requests.get(f"{gw.url}/v1/namespaces/base", timeout=30))
        _assert_refused(requests.get(f"{gw.url}/v1/namespaces", timeout=30))
        disk.free()
        _wait_for(lambda: _ready(gw).status_code == 200, "/ready to recover by itself")
        assert requests.get(f"{gw.url}/v1/namespaces/base", timeout=30).status_code == 200


def test_write_credentials_are_not_vended_while_the_audit_disk_is_full(
    disk: SmallDisk, tmp_path: Path
) -> None:
    """Read-write credentials let the caller change the warehouse's files: a vending is a
    mutation of the warehouse and is held to the same rule (a real moto S3 + STS)."""
    audit_file = disk.root / "audit.jsonl"
    with moto_s3_server() as s3:
        config = {
            "default_warehouse": "lake",
            "warehouses": {"lake": s3.warehouse("lake", vending=True)},
            "audit": {"destination": str(audit_file), "retry_interval_seconds": RETRY_SECONDS},
        }
        with GatewayProcess(tmp_path / "gw", config=config) as gw:
            assert _create_namespace(gw, "base").status_code == 200
            table = requests.post(
                f"{gw.url}/v1/namespaces/base/tables", json={"name": "t", "schema": SCHEMA}, timeout=30
            )
            assert table.status_code == 200, table.text
            credentials = f"{gw.url}/v1/namespaces/base/tables/t/credentials"
            control = requests.get(credentials, timeout=30)  # the test admin may write: read-write
            assert control.status_code == 200, control.text
            disk.fill()
            for n in range(60):
                if _create_namespace(gw, f"fill{n}").status_code == 503:
                    break
            else:
                raise AssertionError("a full audit disk kept taking mutations")
            _assert_refused(requests.get(credentials, timeout=30))
            vended_load = requests.get(
                f"{gw.url}/v1/namespaces/base/tables/t",
                headers={"X-Iceberg-Access-Delegation": "vended-credentials"},
                timeout=30,
            )
            _assert_refused(vended_load)
            # A load without credentials is a read: served.
            assert requests.get(f"{gw.url}/v1/namespaces/base/tables/t", timeout=30).status_code == 200
            disk.free()
            _recovered(gw)
            after = requests.get(credentials, timeout=30)
            assert after.status_code == 200, after.text
            records = flushed_audit_log(audit_file)
    vendings = [r for r in records if r["action"] == "vendCredentials"]
    assert after.headers["X-Request-ID"] in {r["request_id"] for r in vendings}
    assert control.headers["X-Request-ID"] in {r["request_id"] for r in vendings}
