"""Questions to the audit file: which records match a filter, one bounded page at a time.

Public API (used by the admin endpoint `GET /admin/v1/audit`, `gateway.web.routes.audit_trail`)::

    query = AuditFilter(principal="key:analyst", decision="deny", since="2026-11-27T00:00:00.000Z")
    page = newest(destination, query, before=None, page_size=100)  # newest first
    page = following(destination, query, after=page.newer, page_size=100)  # written after, oldest first
    AuditNotReadableError                     # the destination is stdout: nothing to read back

    counts = ReadCounts()                     # the change preview (`gateway.authz.preview`):
    for record in records_from_end(destination, max_bytes=64 * 1024**2, counts=counts):
        ...                                   # every audit record, newest first, lazily

This module is the one reader of the audit file: both the audit API and the change preview read
it through `gateway.audit_stream` (whole lines only, rotation-safe, bounded by a byte budget).

Promises:

- **Records as written.** A record is the JSON object of its line, parsed and nothing else; the
  file holds no secret (`gateway.audit` scrubs every record before it is written) and nothing
  here adds one.
- **Bounded.** One call reads at most `SCAN_BUDGET_BYTES` of the files and answers at most
  `page_size` records (at most `MAX_PAGE_SIZE`) of at most `MAX_ANSWER_BYTES` together; when the
  budget runs out first the page is shorter and its cursor continues where the reading stopped.
  Memory is a block, a line and the page. Lines that are not audit records (a fragment a full
  disk cut short, a line too long) are passed over.
- **Records from the end** (`records_from_end`): every audit record of the stream, newest first,
  across rotated files, read lazily (a caller that stops early reads no further) within
  `max_bytes`; lines that are not audit records are counted in `ReadCounts.unreadable_lines`,
  and `ReadCounts.bound_reached` says whether the bound, not the stream's start, ended them.
- **Exact filters.** Every filter compares a record field with the value given exactly
  (`resource_prefix`: the start of `resource`); `since`/`until` compare `time` at millisecond
  precision, both ends included. A line is only parsed if it contains every exact value as its
  JSON text, so a selective filter reads the file at the speed of a substring search.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from cedarberg.gateway.audit_stream import AuditStream, Budget, Line, Position

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_ANSWER_BYTES",
    "MAX_PAGE_SIZE",
    "MAX_WAIT_SECONDS",
    "ORIGIN",
    "READ_ACTION",
    "SCAN_BUDGET_BYTES",
    "AuditFilter",
    "AuditNotReadableError",
    "AuditPage",
    "ReadCounts",
    "check_readable",
    "destination_state",
    "following",
    "newest",
    "record_time",
    "records_from_end",
]

DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 500
SCAN_BUDGET_BYTES: Final = 32 * 1024 * 1024
MAX_WAIT_SECONDS: Final = 30  # how long one request may wait for a record to follow
MAX_ANSWER_BYTES: Final = 8 * 1024 * 1024
# The action of reading the audit log: whose own allowed reads a follower leaves out.
READ_ACTION: Final = "readAuditLog"
# Before every segment: following from here reads the stream from its first line.
ORIGIN: Final = Position(0, 0, "", 0, 0)
# A file's modification time may trail the clock records are timed with by a few milliseconds
# (coarse file-system timestamps): segments are skipped by `since` only with this margin.
_MTIME_SLACK_NS: Final = 1_000_000_000


class AuditNotReadableError(Exception):
    """The audit log is not a file this gateway can read back (`audit.destination` is stdout)."""


def record_time(moment: datetime) -> str:
    """`moment` (with a time zone) as audit records write `time`: UTC, milliseconds, ``Z``."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _json_text(name: str, value: str) -> bytes:
    """How `"name": value` appears in a line the audit log wrote (orjson, no spaces)."""
    return orjson.dumps(name) + b":" + orjson.dumps(value)


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which records a query wants; None: any. `since`/`until` are `record_time` strings.
    `hide_reads_of`: a principal whose own allowed `readAuditLog` requests (their decision and
    outcome records) are left out: a follower's polling would otherwise answer itself."""

    principal: str | None = None
    action: str | None = None
    resource: str | None = None
    resource_prefix: str | None = None
    decision: str | None = None
    event: str | None = None
    since: str | None = None
    until: str | None = None
    hide_reads_of: str | None = None
    _needles: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        exact = {
            "event": self.event,
            "principal": self.principal,
            "action": self.action,
            "resource": self.resource,
            "decision": self.decision,
        }
        needles = [_json_text(name, value) for name, value in exact.items() if value is not None]
        if self.resource_prefix is not None:
            needles.append(_json_text("resource", self.resource_prefix)[:-1])  # without the closing quote
        object.__setattr__(self, "_needles", tuple(needles))

    def since_ns(self) -> int:
        """Segments last modified before this hold no record from `since` on."""
        if self.since is None:
            return 0
        moment = datetime.strptime(self.since, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        return int(moment.timestamp()) * 1_000_000_000 - _MTIME_SLACK_NS

    def matches(self, record: Mapping[str, Any]) -> bool:
        if self.event is not None and record.get("event") != self.event:
            return False
        if self.principal is not None and record.get("principal") != self.principal:
            return False
        if self.action is not None and record.get("action") != self.action:
            return False
        if self.decision is not None and record.get("decision") != self.decision:
            return False
        resource = record.get("resource")
        if self.resource is not None and resource != self.resource:
            return False
        if self.resource_prefix is not None and not (
            isinstance(resource, str) and resource.startswith(self.resource_prefix)
        ):
            return False
        if self.since is not None or self.until is not None:
            time = record.get("time")
            if not isinstance(time, str):
                return False
            if (self.since is not None and time < self.since) or (
                self.until is not None and time > self.until
            ):
                return False
        return not self._hidden(record)

    def _hidden(self, record: Mapping[str, Any]) -> bool:
        return (
            self.hide_reads_of is not None
            and record.get("principal") == self.hide_reads_of
            and record.get("action") == READ_ACTION
            and record.get("decision") == "allow"
        )

    def record_of(self, text: bytes) -> dict[str, Any] | None:
        """The record of line `text` if it is an audit record this filter wants."""
        for needle in self._needles:
            if needle not in text:
                return None
        record = _audit_record(text)
        return record if record is not None and self.matches(record) else None


@dataclass(frozen=True, slots=True)
class AuditPage:
    """Matching records, and where to read on: `older` (newest-first pages; None: no older line
    is left) and `newer` (the position after everything this page covered: follow from there)."""

    records: list[dict[str, Any]]
    older: Position | None
    newer: Position


@dataclass(slots=True)
class _Collected:
    records: list[dict[str, Any]] = field(default_factory=list)
    last: Line | None = None  # the last line read
    full: bool = False  # the page filled up before the lines ran out


def _collect(lines: Iterator[Line], query: AuditFilter, page_size: int) -> _Collected:
    """Records of `lines` matching `query` until the page is full."""
    found = _Collected()
    size = 0
    for line in lines:
        found.last = line
        if line.text is None:
            continue
        record = query.record_of(line.text)
        if record is None:
            continue
        found.records.append(record)
        size += len(line.text)
        if len(found.records) >= page_size or size >= MAX_ANSWER_BYTES:
            found.full = True
            break
    return found


def check_readable(destination: str) -> None:
    """Raise AuditNotReadableError unless `destination` is a file (not stdout)."""
    if destination == "stdout":
        raise AuditNotReadableError(
            'the audit log is written to stdout (audit.destination = "stdout"), which this gateway '
            "cannot read back: set audit.destination to a file path to query it here"
        )


def _stream(destination: str) -> AuditStream:
    check_readable(destination)
    return AuditStream.open(Path(destination))


def newest(
    destination: str,
    query: AuditFilter,
    before: Position | None,
    page_size: int,
    budget: int = SCAN_BUDGET_BYTES,
) -> AuditPage:
    """The newest records matching `query` written before `before` (None: the end), newest
    first. Raises AuditNotReadableError (stdout) and OSError (the directory cannot be read)."""
    stream = _stream(destination)
    newer = stream.end() or ORIGIN
    spent = Budget(budget)
    found = _collect(stream.backward(before, spent, query.since_ns()), query, page_size)
    older: Position | None = None  # the lines ran out: nothing older is left
    if found.full or spent.exhausted:  # stopped early: go on from the last line read
        older = before if found.last is None else found.last.before
    return AuditPage(found.records, older, newer)


def following(
    destination: str, query: AuditFilter, after: Position, page_size: int, budget: int = SCAN_BUDGET_BYTES
) -> AuditPage:
    """The records matching `query` written after `after`, oldest first; `newer` is where to
    follow on. Raises AuditNotReadableError (stdout) and OSError (the directory cannot be read)."""
    stream = _stream(destination)
    found = _collect(stream.forward(after, Budget(budget), query.since_ns()), query, page_size)
    return AuditPage(found.records, None, after if found.last is None else found.last.after)


@dataclass(slots=True)
class ReadCounts:
    """What reading from the end met: lines that were not audit records (a fragment a full disk
    cut short, a line too long, something else's line), and whether reading stopped at its byte
    bound before the stream's first line."""

    unreadable_lines: int = 0
    bound_reached: bool = False


def records_from_end(
    destination: str | Path, max_bytes: int, counts: ReadCounts | None = None
) -> Iterator[dict[str, Any]]:
    """The audit records of the stream at `destination` (the file and those rotated beside it),
    newest first, as written; at most `max_bytes` are read. A line still being written and the
    line the bound cuts are never yielded. `counts` (if given) counts the lines passed over and,
    once the records are read to their end, whether the bound ended them.

    Raises AuditNotReadableError (stdout), FileNotFoundError (no audit file yet, nor a rotated
    one), OSError (the directory or a file cannot be read)."""
    stream = _stream(str(destination))
    if not stream.segments:
        raise FileNotFoundError(errno.ENOENT, "no audit file yet", str(destination))
    budget = Budget(max_bytes)
    last: Line | None = None
    for line in stream.backward(None, budget):
        last = line
        if line.text == b"":
            continue  # an empty line holds nothing to count
        record = None if line.text is None else _audit_record(line.text)
        if record is not None:
            yield record
        elif counts is not None:
            counts.unreadable_lines += 1
    if counts is not None:
        start = stream.segments[0].at(0)
        counts.bound_reached = budget.exhausted and (last is None or last.before != start)


def _audit_record(text: bytes) -> dict[str, Any] | None:
    """The audit record of line `text`; None if it is none (not JSON, not an audit line)."""
    try:
        record = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict) or record.get("stream") != "audit":
        return None
    return record


def destination_state(destination: str) -> tuple[int, int, int] | None:
    """The current file's device, inode and size (None: missing): what a follower polls, O(1)."""
    try:
        found = Path(destination).stat()
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino, found.st_size
