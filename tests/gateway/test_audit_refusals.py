"""401/429 refusals aggregated into the audit log (gateway/audit_refusals.py): a real audit file,
floods of refusals, and the bounds that keep the tally's memory and the file small."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from cedarberg.gateway.audit import AuditLog, EventKind
from cedarberg.gateway.audit_refusals import (
    MAX_PART_CHARS,
    OVERFLOW_ADDRESS,
    OVERFLOW_REASON,
    RefusalTally,
    Source,
)
from cedarberg.gateway.config.audit import AuditSettings


def _open(tmp_path: Path) -> tuple[AuditLog, Path]:
    path = tmp_path / "audit.jsonl"
    return AuditLog.open(AuditSettings(destination=str(path))), path


def _records(audit: AuditLog, path: Path) -> list[dict[str, Any]]:
    assert audit.flush()
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def _failure(address: str, key_id: str | None = None) -> Source:
    return Source(EventKind.AUTH_FAILURE, address, "listNamespaces", "credential refused", key_id)


def test_a_flood_from_one_source_is_two_records_whose_counts_add_up(tmp_path: Path) -> None:
    audit, path = _open(tmp_path)
    tally = RefusalTally(audit, interval_seconds=60, max_sources=100)
    for n in range(1000):
        tally.note(_failure("198.51.100.7", "abcdefghijklmnop"), request_id=f"request-{n:04d}")
    first = _records(audit, path)
    assert len(first) == 1  # the first refusal, at once
    assert first[0]["request_id"] == "request-0000"
    assert first[0]["detail"] == {
        "reason": "credential refused",
        "count": 1,
        "window_seconds": 60,
        "first_in_window": True,
        "presented_key_id": "abcdefghijklmnop",
    }
    assert tally.flush() == 1
    records = _records(audit, path)
    assert len(records) == 2
    summary = records[1]
    assert (summary["event"], summary["status"], summary["client_address"]) == (
        "auth_failure",
        401,
        "198.51.100.7",
    )
    assert summary["detail"]["count"] == 999
    assert summary["detail"]["first_in_window"] is False
    assert summary["request_id"] is None
    # A new interval starts afresh: the next refusal is recorded at once again.
    tally.note(_failure("198.51.100.7", "abcdefghijklmnop"))
    assert tally.flush() == 0
    assert [r["detail"]["count"] for r in _records(audit, path)] == [1, 999, 1]
    audit.close()


def test_sources_are_bounded_and_the_rest_is_counted_under_one_overflow_source(tmp_path: Path) -> None:
    audit, path = _open(tmp_path)
    tally = RefusalTally(audit, interval_seconds=5, max_sources=10)
    for n in range(500):
        tally.note(_failure(f"203.0.113.{n % 250}"))
    assert tally.tracked == 11  # ten sources and the overflow
    tally.flush()
    records = _records(audit, path)
    assert sum(r["detail"]["count"] for r in records) == 500
    overflow = [r for r in records if r["client_address"] == OVERFLOW_ADDRESS]
    assert len(overflow) == 1
    assert overflow[0]["detail"]["reason"] == OVERFLOW_REASON
    assert overflow[0]["detail"]["count"] == 480  # all but the 20 refusals of the 10 tracked addresses
    assert len(records) == 21  # per tracked source: first + summary; one overflow summary
    assert tally.tracked == 0
    audit.close()


def test_every_part_of_a_source_is_bounded() -> None:
    source = Source(EventKind.THROTTLED, "a" * 10_000, "b" * 10_000, "c" * 10_000, None, "d" * 10_000)
    assert len(source.client_address) == MAX_PART_CHARS
    assert len(source.action) == MAX_PART_CHARS
    assert len(source.reason) == MAX_PART_CHARS
    assert source.principal_id is not None
    assert len(source.principal_id) == MAX_PART_CHARS


async def test_the_interval_clock_writes_summaries_and_stop_writes_the_last(tmp_path: Path) -> None:
    audit, path = _open(tmp_path)
    tally = RefusalTally(audit, interval_seconds=0.2, max_sources=10)
    tally.start()
    for _ in range(3):
        tally.note(Source(EventKind.THROTTLED, "192.0.2.1", "loadTable", "principal over its rate limit"))
    await asyncio.sleep(0.5)  # the clock has ended the interval
    assert [r["detail"]["count"] for r in _records(audit, path)] == [1, 2]
    for _ in range(4):
        tally.note(Source(EventKind.THROTTLED, "192.0.2.1", "loadTable", "principal over its rate limit"))
    await tally.stop()
    assert [r["detail"]["count"] for r in _records(audit, path)] == [1, 2, 1, 3]
    assert {r["status"] for r in _records(audit, path)} == {429}
    audit.close()
