"""The audit file read back as one stream of lines: the file at `audit.destination` and the files
rotated away beside it, in the order their lines were appended.

Public API (used by `gateway.audit_query`)::

    stream = AuditStream.open(Path(settings.audit.destination))  # the files now
    stream.end()                                  # the position after the last whole line
    for line in stream.backward(before, budget):  # newest first, from `before` (None: the end)
    for line in stream.forward(after, budget):    # oldest first, after `after`

How the file is shared and what order means (`gateway.audit_file`): every worker of a gateway
opens the file with ``O_APPEND`` and writes whole batches of lines, so the file's byte order is
the order in which lines reached it. A line's `time` is when it was recorded, which is earlier
than when it was written (a batch is written every few milliseconds; records kept while the file
failed are written when it recovers), so neighbouring lines of different workers may be a few
milliseconds out of `time` order. Positions are byte offsets: a line after a position was appended
after it, whichever worker wrote it.

Segments: the current file, and the *rotated* files beside it whose names are the current file's
name followed by ``.`` or ``-`` and anything not naming a compressed file (logrotate's
``audit.jsonl.1`` and ``audit.jsonl-20261127``; ``.gz``, ``.xz``, ``.zst``, ``.bz2`` and ``.zip``
are not read), regular files only (no symbolic links), at most `MAX_ROTATED_FILES`, ordered by
their modification time. A position names its segment by device and inode, so it stays valid
when the file is renamed by a rotation; if its segment is gone, it is placed by the segment's
modification time it recorded.

Bounds: every read goes through a `Budget` of bytes; a line longer than `MAX_LINE_BYTES` is
skipped whole (the gateway writes none: its strings are cut to 2,048 characters). Memory is one
block plus one line.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "BLOCK_BYTES",
    "MAX_LINE_BYTES",
    "MAX_ROTATED_FILES",
    "AuditStream",
    "Budget",
    "Line",
    "Position",
    "Segment",
]

BLOCK_BYTES: Final = 64 * 1024
MAX_LINE_BYTES: Final = 256 * 1024
MAX_ROTATED_FILES: Final = 366  # a year of daily rotations
_HEAD_BYTES: Final = 4096  # a segment is told by its first line (or this much of it)
_COMPRESSED: Final = (".gz", ".xz", ".zst", ".bz2", ".zip", ".lz4", ".z")


@dataclass(frozen=True, slots=True)
class Position:
    """A place between two lines of the stream: `offset` bytes into the segment `device`/`inode`
    whose first line hashes to `head` ('' while it had none: a file just created), and whose
    modification time was `mtime_ns` when the position was taken (to place it if that segment
    is gone). The head tells a file from a later one that reuses its inode number, and from the
    same file emptied in place (copy and truncate): either is another segment."""

    device: int
    inode: int
    head: str
    offset: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class Segment:
    """One file of the stream, as found when the stream was opened."""

    path: Path
    device: int
    inode: int
    size: int
    mtime_ns: int
    head: str

    def at(self, offset: int) -> Position:
        return Position(self.device, self.inode, self.head, offset, self.mtime_ns)

    def holds(self, position: Position) -> bool:
        if (self.device, self.inode) != (position.device, position.inode):
            return False
        return position.head in ("", self.head)


@dataclass(frozen=True, slots=True)
class Line:
    """A whole line of a segment (without its newline; None if it was longer than
    `MAX_LINE_BYTES`), and the positions before and after it."""

    text: bytes | None
    before: Position
    after: Position


class Budget:
    """Bytes a request may still read; reads stop once it is spent."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spent = 0

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit

    def take(self, wanted: int) -> int:
        """How many of `wanted` bytes may be read now (0 once the budget is spent)."""
        return max(0, min(wanted, self.limit - self.spent))


def _is_rotated_name(name: str, current: str) -> bool:
    if len(name) <= len(current) + 1 or not name.startswith(current) or name[len(current)] not in ".-":
        return False
    return not name.lower().endswith(_COMPRESSED)


def _segment(path: Path, found: os.stat_result) -> Segment | None:
    """The segment of the file at `path` (None if it is gone or no longer the file found)."""
    fd = _open_checked(path, found.st_dev, found.st_ino)
    if fd is None:
        return None
    try:
        start = os.pread(fd, _HEAD_BYTES, 0)
    finally:
        os.close(fd)
    cut = start.find(b"\n")
    first = start[: cut + 1] if cut >= 0 else start if len(start) == _HEAD_BYTES else b""
    head = hashlib.blake2b(first, digest_size=8).hexdigest() if first else ""
    return Segment(path, found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, head)


class AuditStream:
    """The segments of the audit stream found at one moment, oldest first (the current file, if
    it exists, last)."""

    def __init__(self, segments: list[Segment]) -> None:
        self.segments = segments

    @classmethod
    def open(cls, destination: Path) -> AuditStream:
        """List the stream's segments now. Raises OSError if the directory cannot be read."""
        current: Segment | None = None
        try:
            found = os.stat(destination)
            if stat.S_ISREG(found.st_mode):
                current = _segment(destination, found)
        except FileNotFoundError:
            pass  # no record yet, or rotated away and not yet recreated
        rotated: list[tuple[int, str, os.stat_result]] = []  # modified, name, status
        seen = {(current.device, current.inode)} if current else set()
        try:
            entries = list(os.scandir(destination.parent))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            if not _is_rotated_name(entry.name, destination.name):
                continue
            try:
                found = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while we looked
            if stat.S_ISREG(found.st_mode) and (found.st_dev, found.st_ino) not in seen:
                seen.add((found.st_dev, found.st_ino))
                rotated.append((found.st_mtime_ns, entry.name, found))
        rotated.sort(key=lambda item: (item[0], item[1]))
        found_segments = [
            _segment(destination.with_name(name), status) for _, name, status in rotated[-MAX_ROTATED_FILES:]
        ]
        segments = [segment for segment in found_segments if segment is not None]
        if current is not None:
            segments.append(current)
        return cls(segments)

    # -- positions -----------------------------------------------------------------------------

    def end(self) -> Position | None:
        """The position after the last whole line of the newest segment (None: no segment).
        A line being written (no newline yet) is after it."""
        if not self.segments:
            return None
        last = self.segments[-1]
        return last.at(_last_boundary(last))

    def _place(self, position: Position) -> tuple[int, int | None]:
        """The index of the segment holding `position` and the offset in it; if that segment is
        gone, the index of the first segment modified after it was (offset None)."""
        for index, segment in enumerate(self.segments):
            if segment.holds(position):
                return index, position.offset
        for index, segment in enumerate(self.segments):
            if segment.mtime_ns >= position.mtime_ns:
                return index, None
        return len(self.segments), None

    # -- reading -------------------------------------------------------------------------------

    def backward(self, before: Position | None, budget: Budget, modified_from_ns: int = 0) -> Iterator[Line]:
        """The whole lines before `before` (None: the end), newest first, while `budget` lasts,
        stopping at the first segment last modified before `modified_from_ns` (its lines, and
        those of every older segment, were all written before then). A position inside a
        segment that shrank (copied and truncated) starts at its end."""
        if before is None:
            index, offset = len(self.segments) - 1, None
        else:
            index, offset = self._place(before)
            if offset is None:
                index -= 1  # the first segment before the gone one
        while index >= 0 and not budget.exhausted:
            segment = self.segments[index]
            if segment.mtime_ns < modified_from_ns:
                return
            end = _last_boundary(segment) if offset is None or offset > segment.size else offset
            yield from _lines_backward(segment, end, budget)
            index, offset = index - 1, None

    def forward(self, after: Position, budget: Budget, modified_from_ns: int = 0) -> Iterator[Line]:
        """The whole lines after `after`, oldest first, while `budget` lasts, skipping segments
        last modified before `modified_from_ns`. A position past the end of its segment (copied
        and truncated in place) resumes at its start."""
        index, offset = self._place(after)
        while index < len(self.segments) and not budget.exhausted:
            segment = self.segments[index]
            if segment.mtime_ns < modified_from_ns:
                index, offset = index + 1, None
                continue
            start = 0 if offset is None or offset > segment.size else offset
            yield from _lines_forward(segment, start, budget)
            index, offset = index + 1, None


def _open(segment: Segment) -> int | None:
    """A descriptor of the segment if the file at its path is still it; None otherwise."""
    return _open_checked(segment.path, segment.device, segment.inode)


def _open_checked(path: Path, device: int, inode: int) -> int | None:
    """A descriptor of the file at `path` if it is `device`/`inode`; None otherwise. Symbolic
    links are not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP):
            return None
        raise
    found = os.fstat(fd)
    if (found.st_dev, found.st_ino) != (device, inode):
        os.close(fd)
        return None
    return fd


def _last_boundary(segment: Segment) -> int:
    """The offset after the last newline at or before the segment's size when it was listed (0
    if none): a line still being written is not read."""
    fd = _open(segment)
    if fd is None:
        return 0
    try:
        end = segment.size
        while end > 0:
            start = max(0, end - BLOCK_BYTES)
            block = os.pread(fd, end - start, start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            if segment.size - start > MAX_LINE_BYTES:
                return start  # no writer leaves such a fragment: read up to it, skip what it is
            end = start
        return 0
    finally:
        os.close(fd)


def _lines_backward(segment: Segment, end: int, budget: Budget) -> Iterator[Line]:
    """Whole lines of `segment` ending at or before `end` (a line boundary), newest first."""
    fd = _open(segment)
    if fd is None:
        return
    try:
        # `buffer[:limit]` holds the bytes from `start` up to the end of the next line to yield
        # (its newline included): one block and one line at most.
        buffer, start, limit = b"", end, 0
        oversized_end: int | None = None  # the end of a line too long to keep, while its start is sought
        while True:
            if oversized_end is None and limit > 0:
                cut = buffer.rfind(b"\n", 0, limit - 1)
                if cut >= 0 or start == 0:
                    line_start = start + cut + 1
                    text = buffer[cut + 1 : limit - 1]
                    yield Line(text, segment.at(line_start), segment.at(start + limit))
                    limit = cut + 1
                    continue
                if limit > MAX_LINE_BYTES:
                    oversized_end, buffer, limit = start + limit, b"", 0
            if start == 0:
                if oversized_end is not None:
                    yield Line(None, segment.at(0), segment.at(oversized_end))
                return
            wanted = budget.take(min(BLOCK_BYTES, start))
            if wanted == 0:
                return
            block = os.pread(fd, wanted, start - wanted)
            budget.spent += wanted
            if len(block) != wanted:
                return  # the file shrank under us: what is left is gone
            start -= wanted
            if oversized_end is not None:
                cut = block.rfind(b"\n")
                if cut < 0 and start > 0:
                    continue
                yield Line(None, segment.at(start + cut + 1), segment.at(oversized_end))
                oversized_end, buffer, limit = None, block[: cut + 1], cut + 1
                continue
            buffer = block + buffer[:limit]
            limit = len(buffer)
    finally:
        os.close(fd)


def _lines_forward(segment: Segment, start: int, budget: Budget) -> Iterator[Line]:
    """Whole lines of `segment` from `start` (a line boundary) to its last newline, oldest first.
    The segment is read up to its size now: a live file keeps growing while it is read."""
    fd = _open(segment)
    if fd is None:
        return
    try:
        buffer, base = b"", start  # buffer holds the bytes from `base` not yet yielded
        skipped_from: int | None = None  # the start of a line too long to keep, while its end is sought
        while True:
            wanted = budget.take(BLOCK_BYTES)
            if wanted == 0:
                return
            block = os.pread(fd, wanted, base + len(buffer))
            budget.spent += len(block)
            if not block:
                return  # a line without its newline yet is left for the next read
            buffer += block
            at = 0
            while True:
                cut = buffer.find(b"\n", at)
                if cut < 0:
                    break
                if skipped_from is None:
                    yield Line(buffer[at:cut], segment.at(base + at), segment.at(base + cut + 1))
                else:
                    yield Line(None, segment.at(skipped_from), segment.at(base + cut + 1))
                    skipped_from = None
                at = cut + 1
            buffer, base = buffer[at:], base + at
            if len(buffer) > MAX_LINE_BYTES and skipped_from is None:
                skipped_from = base
            if skipped_from is not None:
                base, buffer = base + len(buffer), b""
    finally:
        os.close(fd)
