"""Reading the audit file back (gateway/audit_stream.py, gateway/audit_query.py): real files
written by the real audit log, rotated by renaming as logrotate does, read from the end with a
bounded budget, filtered exactly, and followed across a rotation; and the change preview's
reading of the newest records (`records_from_end`), the same reader.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cedarberg.gateway import audit_stream
from cedarberg.gateway.audit import AuditEvent, AuditLog, EventKind, Ruling
from cedarberg.gateway.audit_query import (
    ORIGIN,
    AuditFilter,
    AuditNotReadableError,
    AuditPage,
    ReadCounts,
    following,
    newest,
    records_from_end,
)
from cedarberg.gateway.audit_stream import BLOCK_BYTES, MAX_LINE_BYTES, AuditStream, Budget
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.config.audit import AuditSettings

ANALYST = Principal("key:analyst", PrincipalKind.USER, frozenset({"bi"}), AuthMethod.API_KEY)
ETL = Principal("key:etl", PrincipalKind.SERVICE, frozenset({"etl"}), AuthMethod.GATEWAY_TOKEN)
ORDERS = 'Cedarberg::Table::"default/shop/orders"'
AUDIT = AuditFilter()  # every record


@pytest.fixture
def destination(tmp_path: Path) -> Path:
    return tmp_path / "audit" / "audit.jsonl"


@pytest.fixture
def audit(destination: Path) -> Iterator[AuditLog]:
    log = AuditLog.open(AuditSettings(destination=str(destination), durability="write"))
    yield log
    log.close()


def _decide(audit: AuditLog, request_id: str, who: Principal = ANALYST, **fields: Any) -> None:
    event = {
        "request_id": request_id,
        "principal": who,
        "action": "loadTable",
        "resource": ORDERS,
        "decision": Ruling.ALLOW,
        "policy_ids": ["readers-read-granted"],
        "client_address": "127.0.0.1",
        **fields,
    }
    audit.record(AuditEvent(EventKind.DECISION, **event))


def _write(audit: AuditLog, count: int, prefix: str = "r", **fields: Any) -> list[str]:
    ids = [f"{prefix}{i:05d}" for i in range(count)]
    for request_id in ids:
        _decide(audit, request_id, **fields)
    assert audit.flush()
    return ids


def _ids(page: AuditPage) -> list[str]:
    return [record["request_id"] for record in page.records]


def _all_newest(destination: Path, query: AuditFilter, size: int, budget: int) -> list[str]:
    """Every matching record, newest first, page after page."""
    found: list[str] = []
    before = None
    for _ in range(10_000):
        page = newest(str(destination), query, before, size, budget)
        found += _ids(page)
        if page.older is None:
            return found
        before = page.older
    raise AssertionError("the pages never ended")


def _rotate(destination: Path, name: str) -> Path:
    rotated = destination.with_name(name)
    destination.rename(rotated)
    return rotated


def test_records_come_back_newest_first_as_written(audit: AuditLog, destination: Path) -> None:
    ids = _write(audit, 5)
    page = newest(str(destination), AUDIT, None, 100)
    assert _ids(page) == ids[::-1]
    written = [orjson.loads(line) for line in destination.read_bytes().splitlines()]
    assert page.records == written[::-1]  # as written: nothing added, nothing left out
    assert page.older is None


def test_pages_across_blocks_and_rotated_files_miss_and_repeat_nothing(
    audit: AuditLog, destination: Path
) -> None:
    # Three files, oldest first: a dated one, a numbered one, the live one; lines cross blocks.
    first = _write(audit, 400, "a")
    _rotate(destination, "audit.jsonl-20261126")
    time.sleep(0.02)  # distinct modification times
    second = _write(audit, 400, "b")
    _rotate(destination, "audit.jsonl.1")
    time.sleep(0.02)
    third = _write(audit, 400, "c")
    assert destination.stat().st_size > BLOCK_BYTES
    expected = (first + second + third)[::-1]
    # Pages of 7, and a read budget of about one block per call: every call makes progress.
    assert _all_newest(destination, AUDIT, 7, 10**9) == expected
    assert _all_newest(destination, AUDIT, 500, BLOCK_BYTES) == expected


def test_compressed_and_linked_neighbours_are_not_read(audit: AuditLog, destination: Path) -> None:
    ids = _write(audit, 3)
    (destination.parent / "audit.jsonl.2.gz").write_bytes(b"\x1f\x8b not json\n")
    (destination.parent / "audit.jsonl.3").symlink_to(destination)
    (destination.parent / "other.jsonl").write_bytes(destination.read_bytes())
    assert [s.path.name for s in AuditStream.open(destination).segments] == ["audit.jsonl"]
    assert _ids(newest(str(destination), AUDIT, None, 100)) == ids[::-1]


def test_a_line_still_being_written_is_not_read(audit: AuditLog, destination: Path) -> None:
    ids = _write(audit, 2)
    with destination.open("ab") as file:
        file.write(b'{"stream": "audit", "request_id": "half')
    page = newest(str(destination), AUDIT, None, 100)
    assert _ids(page) == ids[::-1]
    # Following from the end: the line is read once it is whole.
    with destination.open("ab") as file:
        file.write(b'"}\n')
    later = following(str(destination), AUDIT, page.newer, 100)
    assert _ids(later) == ["half"]


def test_lines_that_are_no_records_are_passed_over(audit: AuditLog, destination: Path) -> None:
    _write(audit, 1, "x")
    with destination.open("ab") as file:
        file.write(b'{"cut short by a full disk\n')  # what AuditFile leaves before a rewrite
        file.write(b"y" * (MAX_LINE_BYTES + 10) + b"\n")  # too long to keep
        file.write(b'{"stream": "log", "request_id": "not-audit"}\n')
    _write(audit, 1, "z")
    assert _ids(newest(str(destination), AUDIT, None, 100)) == ["z00000", "x00000"]
    assert _ids(following(str(destination), AUDIT, ORIGIN, 100)) == ["x00000", "z00000"]


def test_filters_match_exactly(audit: AuditLog, destination: Path) -> None:
    _decide(audit, "allowed")
    _decide(audit, "denied", decision=Ruling.DENY, status=404, policy_ids=[])
    _decide(audit, "etl-read", who=ETL)
    _decide(audit, "other-table", resource='Cedarberg::Table::"default/shop/orders_eu"')
    _decide(
        audit, "namespace", action="loadNamespaceMetadata", resource='Cedarberg::Namespace::"default/shop"'
    )
    _decide(audit, "own-read", action="readAuditLog", resource='Cedarberg::Catalog::"cedarberg"')
    audit.record(
        AuditEvent(
            EventKind.MUTATION, request_id="change", principal=ETL, action="createTable", resource=ORDERS
        )
    )
    assert audit.flush()

    def ids(**query: Any) -> list[str]:
        return _ids(newest(str(destination), AuditFilter(**query), None, 100))

    assert ids(principal="key:analyst", decision="deny") == ["denied"]
    assert ids(principal="key:etl") == ["change", "etl-read"]
    assert ids(principal="key:etl", event="decision") == ["etl-read"]
    assert ids(principal="key:analys") == []  # exact, not a substring
    assert ids(resource=ORDERS, principal="key:analyst") == ["denied", "allowed"]
    prefixed = ids(resource_prefix='Cedarberg::Table::"default/shop/orders')
    assert prefixed == ["change", "other-table", "etl-read", "denied", "allowed"]
    assert ids(resource_prefix="Cedarberg::Namespace::") == ["namespace"]
    assert ids(action="readAuditLog") == ["own-read"]
    assert ids(action="readAuditLog", hide_reads_of="key:analyst") == []
    assert ids(action="readAuditLog", hide_reads_of="key:etl") == ["own-read"]
    audit.record(
        AuditEvent(
            EventKind.MUTATION,
            request_id="own-read",
            principal=ANALYST,
            action="readAuditLog",
            resource='Cedarberg::Catalog::"cedarberg"',
            outcome="success",
            status=200,
        )
    )
    assert audit.flush()
    assert ids(action="readAuditLog") == ["own-read", "own-read"]  # its outcome, as for every admin operation
    assert ids(action="readAuditLog", hide_reads_of="key:analyst") == []


def test_since_and_until_compare_the_time_of_each_record(audit: AuditLog, destination: Path) -> None:
    _write(audit, 2, "early")
    records = newest(str(destination), AUDIT, None, 100).records
    cut = max(record["time"] for record in records)
    time.sleep(0.01)
    _write(audit, 2, "late")
    later = [
        r["time"] for r in newest(str(destination), AuditFilter(principal="key:analyst"), None, 2).records
    ]
    assert min(later) > cut
    assert _ids(newest(str(destination), AuditFilter(until=cut), None, 100)) == ["early00001", "early00000"]
    assert _ids(newest(str(destination), AuditFilter(since=min(later)), None, 100)) == [
        "late00001",
        "late00000",
    ]
    # A rotated file last written before `since` is not read at all.
    _rotate(destination, "audit.jsonl.1")
    old = destination.with_name("audit.jsonl.1")
    os.utime(old, ns=(0, 0))
    _write(audit, 1, "new")
    spent = Budget(10**9)
    lines = list(AuditStream.open(destination).backward(None, spent, AuditFilter(since=cut).since_ns()))
    assert len(lines) == 1
    assert spent.spent == destination.stat().st_size


def test_a_position_follows_its_file_through_a_rotation(audit: AuditLog, destination: Path) -> None:
    _write(audit, 3, "before")
    follow = newest(str(destination), AUDIT, None, 100).newer
    # Written to the old file just before it is renamed, and to the new one after.
    late = _write(audit, 2, "late")
    rotated = _rotate(destination, "audit.jsonl.1")
    fresh = _write(audit, 2, "fresh")  # the writer sees the rename and opens a new file
    assert rotated.exists()
    assert destination.exists()
    assert os.stat(rotated).st_ino != os.stat(destination).st_ino
    page = following(str(destination), AUDIT, follow, 100)
    assert _ids(page) == late + fresh
    assert _ids(following(str(destination), AUDIT, page.newer, 100)) == []
    # The same position read backwards: what came before it, in the rotated file.
    assert _ids(newest(str(destination), AUDIT, follow, 100)) == ["before00002", "before00001", "before00000"]


def test_a_position_in_a_removed_file_is_placed_by_time(audit: AuditLog, destination: Path) -> None:
    _write(audit, 2, "gone")
    follow = newest(str(destination), AUDIT, None, 100).newer
    destination.unlink()
    time.sleep(0.02)
    after = _write(audit, 2, "after")
    assert _ids(following(str(destination), AUDIT, follow, 100)) == after


def test_following_pages_are_bounded_and_continue(audit: AuditLog, destination: Path) -> None:
    ids = _write(audit, 50)
    seen: list[str] = []
    position = ORIGIN
    for _ in range(100):
        page = following(str(destination), AUDIT, position, 8)
        assert len(page.records) <= 8
        if not page.records:
            break
        seen += _ids(page)
        position = page.newer
    assert seen == ids


def test_a_copied_and_truncated_file_is_read_from_its_start(audit: AuditLog, destination: Path) -> None:
    _write(audit, 3, "old")
    follow = newest(str(destination), AUDIT, None, 100).newer
    os.truncate(destination, 0)  # logrotate's copytruncate: same file, emptied in place
    again = _write(audit, 1, "new")
    assert _ids(following(str(destination), AUDIT, follow, 100)) == again
    # What was before the position went with the truncation.
    assert _ids(newest(str(destination), AUDIT, follow, 100)) == []


def test_stdout_cannot_be_read_back() -> None:
    with pytest.raises(AuditNotReadableError, match=r"audit\.destination"):
        newest("stdout", AUDIT, None, 10)


# -- the newest records, for the change preview (`records_from_end`) ---------------------------------


def test_records_from_the_end_are_whole_newest_first_and_within_the_byte_bound(
    destination: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination.parent.mkdir(parents=True)
    lines = [orjson.dumps({"stream": "audit", "n": n, "pad": "y" * (n * 7 % 50)}) for n in range(40)]
    being_written = b'{"stream": "audit", "n": "being written'
    destination.write_bytes(b"\n".join(lines) + b"\n\n" + being_written)  # an unfinished last line
    for block in (1, 7, 64, 4096):
        monkeypatch.setattr(audit_stream, "BLOCK_BYTES", block)
        counts = ReadCounts()
        assert [r["n"] for r in records_from_end(destination, 10**6, counts)] == list(range(39, -1, -1))
        assert counts == ReadCounts(unreadable_lines=0, bound_reached=False)

    monkeypatch.setattr(audit_stream, "BLOCK_BYTES", 16)
    wanted = lines[-3:]
    bound = 1 + sum(len(line) + 1 for line in wanted) + 5  # the empty line, three lines, into the one before
    counts = ReadCounts()
    assert [r["n"] for r in records_from_end(destination, bound, counts)] == [39, 38, 37]
    assert counts.bound_reached
    assert destination.stat().st_size > bound
    # Read to the first line exactly: the bound did not cut anything off.
    everything = destination.stat().st_size - len(being_written)
    counts = ReadCounts()
    assert len(list(records_from_end(destination, everything, counts))) == 40
    assert not counts.bound_reached

    with destination.open("ab") as file:
        file.write(b"\nnot json\n")  # ends the unfinished line (not JSON: cut short) and adds text
        file.write(b'{"stream": "log", "n": "a process log line"}\n')
        file.write(b'{"stream": "audit", "n": "' + b"y" * MAX_LINE_BYTES + b'"}\n')  # too long to keep
    counts = ReadCounts()
    records = list(records_from_end(destination, 10**7, counts))
    assert [r["n"] for r in records] == list(range(39, -1, -1))
    assert counts == ReadCounts(unreadable_lines=4, bound_reached=False)


def test_records_from_the_end_go_on_into_rotated_files(audit: AuditLog, destination: Path) -> None:
    older = _write(audit, 3, "old")
    _rotate(destination, "audit.jsonl.1")
    time.sleep(0.02)
    newer = _write(audit, 2, "new")
    counts = ReadCounts()
    assert [r["request_id"] for r in records_from_end(destination, 10**6, counts)] == (older + newer)[::-1]
    assert counts == ReadCounts()
    # The current file rotated away and not yet recreated: the rotated ones are still read.
    _rotate(destination, "audit.jsonl.2")
    assert len(list(records_from_end(destination, 10**6))) == 5


def test_records_from_the_end_of_no_file_or_of_stdout_are_an_error(destination: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list(records_from_end(destination, 10**6))
    with pytest.raises(AuditNotReadableError):
        list(records_from_end("stdout", 10**6))
