"""The audit log's destination failing and recovering (gateway/audit_writer.py): nothing is lost,
nothing is acknowledged that is not on disk, and recording resumes by itself.

Disks are real: a small tmpfs filled to ENOSPC, a read-only filesystem mounted over the log's
directory, files removed and renamed under the writer.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cedarberg.gateway.audit import AuditLog, AuditUnavailableError
from cedarberg.gateway.audit_file import AuditFile
from cedarberg.gateway.config.audit import AuditSettings
from cedarberg.gateway.metrics import Metrics
from tests.support.audit import mutation_event
from tests.support.tmpfs import SmallDisk

RETRY_SECONDS = 0.05
RECOVERY_SECONDS = 10.0


def _records(path: Path) -> list[dict[str, Any]]:
    """Every line of the file, each of which must be one whole JSON record."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _ids(path: Path) -> list[str]:
    return [record["request_id"] for record in _records(path)]


def _metric(metrics: Metrics, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", metrics.exposition().decode(), re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


async def _until_healthy(log: AuditLog) -> None:
    deadline = time.monotonic() + RECOVERY_SECONDS
    while not log.healthy:
        assert time.monotonic() < deadline, "the audit log did not recover by itself"
        await asyncio.sleep(RETRY_SECONDS)


async def _fill_until_refused(log: AuditLog, disk: SmallDisk) -> list[str]:
    """Fill the disk, then record and wait for durability until it is refused (the file's last
    page takes a few lines first). The ids of the records that were made durable."""
    disk.fill()
    durable = []
    for n in range(100):
        log.record(mutation_event(f"full-{n}"))
        try:
            await log.durable()
        except AuditUnavailableError:
            return durable
        durable.append(f"full-{n}")
    raise AssertionError("a full disk kept taking audit records")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    small = SmallDisk(tmp_path / "disk", size_kib=64)
    yield small
    small.unmount()


def _settings(path: Path, **overrides: Any) -> AuditSettings:
    return AuditSettings(destination=str(path), retry_interval_seconds=RETRY_SECONDS, **overrides)


async def test_full_disk_refuses_durability_keeps_records_and_recovers(disk: SmallDisk) -> None:
    path = disk.root / "logs" / "audit.jsonl"
    log, metrics = AuditLog.open(_settings(path)), Metrics.create()
    log.observe(metrics)
    try:
        log.record(mutation_event("before"))
        await log.durable()
        assert _metric(metrics, "cedarberg_audit_sink_up") == 1
        durable = await _fill_until_refused(log, disk)
        refused = f"full-{len(durable)}"
        assert not log.healthy
        assert not await log.probe()
        assert _metric(metrics, "cedarberg_audit_sink_up") == 0
        assert _metric(metrics, "cedarberg_audit_write_failures_total") >= 1
        # While failing: durability is refused at once, and records are kept, not dropped.
        log.record(mutation_event("kept"))
        with pytest.raises(AuditUnavailableError):
            await log.durable()
        assert not log.flush()
        assert b'"kept"' not in path.read_bytes()  # its last line may be cut short meanwhile

        disk.free()
        await _until_healthy(log)
        assert log.flush()
        await log.durable()
        # Each record once, in order, whole: the line a full disk cut short was completed, not
        # split or repeated.
        assert _ids(path) == ["before", *durable, refused, "kept"]
        assert _metric(metrics, "cedarberg_audit_sink_up") == 1
        assert await log.probe()
    finally:
        log.close()


async def test_serve_keeps_at_most_queue_size_records_while_failing(disk: SmallDisk) -> None:
    path = disk.root / "audit.jsonl"
    log = AuditLog.open(_settings(path, queue_size=5, reads_when_failing="serve"))
    try:
        await _fill_until_refused(log, disk)
        accepted = []
        for n in range(5):
            try:
                log.record(mutation_event(f"read-{n}"))
            except AuditUnavailableError:
                break
            accepted.append(f"read-{n}")
        assert 0 < len(accepted) < 5  # the refused durable line counts against the bound
        with pytest.raises(AuditUnavailableError):
            log.record(mutation_event("one-too-many"))
        # The outcome of a change already applied is always kept.
        log.record(mutation_event("applied"), keep=True)
        disk.free()
        await _until_healthy(log)
        assert log.flush()
        ids = _ids(path)
        assert ids[-len(accepted) - 1 :] == [*accepted, "applied"]
    finally:
        log.close()


async def test_refuse_refuses_every_record_while_failing(disk: SmallDisk) -> None:
    path = disk.root / "audit.jsonl"
    log = AuditLog.open(_settings(path, reads_when_failing="refuse"))
    try:
        await _fill_until_refused(log, disk)
        with pytest.raises(AuditUnavailableError):
            log.record(mutation_event("read"))
        log.record(mutation_event("applied"), keep=True)
        disk.free()
        await _until_healthy(log)
        log.record(mutation_event("read-after"))
        assert log.flush()
        assert _ids(path)[-2:] == ["applied", "read-after"]
    finally:
        log.close()


async def test_read_only_destination_fails_closed_and_recovers(disk: SmallDisk) -> None:
    logs = disk.root / "logs"
    path = logs / "audit.jsonl"
    log = AuditLog.open(_settings(path))
    try:
        log.record(mutation_event("before"))
        await log.durable()
        disk.cover_read_only(logs)  # the file is out of reach at its path; nothing can be created
        log.record(mutation_event("during"))
        with pytest.raises(AuditUnavailableError):
            await log.durable()
        assert not log.healthy
        disk.uncover()
        await _until_healthy(log)
        await log.durable()
        assert _ids(path) == ["before", "during"]
    finally:
        log.close()


async def test_removed_or_rotated_file_is_reopened_at_its_path(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "audit.jsonl"
    log = AuditLog.open(_settings(path))
    try:
        log.record(mutation_event("first"))
        await log.durable()
        rotated = path.with_suffix(".1")
        path.rename(rotated)  # rotation without telling the gateway (no reopen)
        log.record(mutation_event("after-rotation"))
        await log.durable()
        assert _ids(rotated) == ["first"]
        assert _ids(path) == ["after-rotation"]
        path.unlink()  # removed: what comes next goes to a new file at the path
        log.record(mutation_event("after-removal"))
        await log.durable()
        assert _ids(path) == ["after-removal"]
        assert log.healthy
    finally:
        log.close()


async def test_concurrent_mutations_share_writes_and_all_are_durable(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog.open(_settings(path))

    async def mutation(n: int) -> None:
        log.record(mutation_event(f"m-{n}"))
        await log.durable()

    try:
        await asyncio.gather(*(mutation(n) for n in range(200)))
        # Durable means on disk now, not after a later flush.
        assert sorted(_ids(path)) == sorted(f"m-{n}" for n in range(200))
    finally:
        log.close()


async def test_durable_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    log = AuditLog.open(AuditSettings())
    try:
        log.record(mutation_event("to-stdout"))
        await log.durable()
        [line] = capsys.readouterr().out.splitlines()
        assert orjson.loads(line)["request_id"] == "to-stdout"
    finally:
        log.close()


def _line(name: str, size: int = 1000) -> bytes:
    """A JSON line of exactly `size` bytes (a page of 4096 never ends on a line boundary)."""
    head = orjson.dumps({"request_id": name, "pad": ""})[:-2]
    return head + b"x" * (size - len(head) - 3) + b'"}\n'


def _write_until_full(audit: AuditFile, lines: list[bytes]) -> None:
    for n in range(100):
        lines.append(_line(f"line-{n}"))
        try:
            audit.write(lines, sync=True)
        except OSError:
            return
        lines.clear()
    raise AssertionError("a full disk kept taking lines")


def test_a_line_cut_short_is_completed_in_place(disk: SmallDisk) -> None:
    path = disk.root / "audit.jsonl"
    audit = AuditFile(path, fsync=True)
    try:
        audit.write([_line("first")], sync=True)  # the file has its first page now
        disk.fill()
        pending: list[bytes] = []
        _write_until_full(audit, pending)
        assert not path.read_bytes().endswith(b"\n")  # the last line was cut short
        disk.free()
        pending.append(_line("later"))
        audit.write(pending, sync=True)
        names = [orjson.loads(line)["request_id"] for line in path.read_bytes().splitlines()]
        assert names == ["first", *(f"line-{n}" for n in range(len(names) - 2)), "later"]
    finally:
        audit.close()


def test_a_fragment_another_writer_appended_to_is_ended_and_the_line_written_whole(disk: SmallDisk) -> None:
    path = disk.root / "audit.jsonl"
    audit = AuditFile(path, fsync=True)
    try:
        audit.write([_line("first")], sync=True)
        disk.fill()
        pending: list[bytes] = []
        _write_until_full(audit, pending)
        cut = pending[-1]
        disk.free()
        other = AuditFile(path, fsync=True)  # a second worker appending to the same file
        other.write([_line("other-worker")], sync=True)
        other.close()
        audit.write(pending, sync=True)
        lines = path.read_bytes().splitlines(keepends=True)
        # Every record is whole, once: the other worker ended the fragment before its own line
        # (it saw the file end without a newline), and ours follows whole, with no empty line.
        assert lines[-1] == cut
        assert [line for line in lines if line == cut] == [cut]
        assert lines[-2] == _line("other-worker")
        fragment = lines[-3]
        assert fragment.endswith(b"\n")
        assert cut.startswith(fragment[:-1])
        assert b"\n" not in lines
    finally:
        audit.close()


def test_a_record_a_killed_process_cut_short_is_never_joined_to_the_next(tmp_path: Path) -> None:
    """Attack: SIGKILL can end a write to a regular file part way, leaving a record's first bytes
    without their newline; the next record (another worker's, or the restarted process's, and
    acknowledged) must not be glued to them, or no reader could parse it."""
    path = tmp_path / "audit.jsonl"
    whole = _line("before")
    path.write_bytes(whole + _line("killed")[:40])  # what the killed process got written
    audit = AuditFile(path, fsync=True)
    try:
        audit.write([_line("acknowledged")], sync=True)
        lines = path.read_bytes().splitlines(keepends=True)
        assert lines[0] == whole
        assert lines[1] == _line("killed")[:40] + b"\n"  # the fragment stands alone
        assert orjson.loads(lines[2])["request_id"] == "acknowledged"
        assert len(lines) == 3
    finally:
        audit.close()


def test_appends_to_a_whole_file_add_no_empty_line(tmp_path: Path) -> None:
    """Control: a file that ends with a newline gets its records as they are."""
    path = tmp_path / "audit.jsonl"
    first, second = AuditFile(path, fsync=False), AuditFile(path, fsync=False)
    try:
        for n in range(3):
            first.write([_line(f"first-{n}")], sync=False)
            second.write([_line(f"second-{n}"), _line(f"second-{n}b")], sync=False)
        names = [orjson.loads(line)["request_id"] for line in path.read_bytes().splitlines()]
        assert names == [name for n in range(3) for name in (f"first-{n}", f"second-{n}", f"second-{n}b")]
    finally:
        first.close()
        second.close()
