"""The audit log's file: appended to at its configured path, whatever happens to that path.

`AuditFile.write(lines, sync)` appends `lines` (one JSON record each, newline-terminated) and,
when `sync`, syncs them to disk. It raises OSError when the file cannot take them; the caller
keeps the lines and passes them again (with any newer ones after them) until a call succeeds.

Invariants:

- **The file is the one at the path.** Before each write the path is checked: a file that was
  removed or replaced (rotated) is left for a new one opened (created, mode 0600, with its
  directories) at the path. Lines written to a file that was removed while they were written (its
  link count is 0) are written again to the new one; lines of a rotated file stay there.
- **No record is split or repeated within a file.** A write cut short (a full disk takes what fits)
  resumes where it stopped, if the file still ends there; if another process appended since (a
  second worker), the fragment is ended with a newline and the line written again whole. After a
  file change, the line cut short is written whole to the new file.
- **A record a killed process cut short stands alone.** SIGKILL can end a write to a regular file
  part way (the kernel stops between pages), leaving a fragment without its newline, never
  acknowledged. Appends to a regular file hold an exclusive `flock` (released by the kernel when
  its holder dies), and each batch first checks the file's last byte: a fragment is ended with a
  newline before the batch, so the next record, acknowledged or not, is never joined to it.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["AuditFile", "open_destination"]

_REWRITE_ATTEMPTS: Final = 3


def open_destination(path: Path) -> int:
    """Open the audit file at `path` for appending, creating it (mode 0600) and its parent
    directories if missing. Returns the descriptor; raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)


def _ends_a_line(reader: int) -> bool:
    """Whether the file open as `reader` is empty or ends with a newline."""
    size = os.fstat(reader).st_size
    return size == 0 or os.pread(reader, 1, size - 1) == b"\n"


def _line_start(lines: Sequence[bytes], offset: int) -> int:
    """The offset, in the concatenation of `lines`, of the line `offset` falls in."""
    start = 0
    for line in lines:
        if start + len(line) > offset:
            return start
        start += len(line)
    return start


class AuditFile:
    """The audit file at `path`; `fsync`: sync when asked (only a regular file is synced). Used
    by one thread. Raises OSError at construction if the file cannot be opened."""

    def __init__(self, path: Path, fsync: bool) -> None:
        self._path = path
        self._fsync = fsync
        self._sync = False  # set when opened: only a regular file can be synced
        self._fd: int | None = None
        self._reader: int | None = None  # a regular file's, to read its last byte
        self._identity: tuple[int, int] | None = None
        # How many bytes of the pending lines' concatenation the file has (a write cut short),
        # the file's size then, and whether a fragment must be ended before the next line.
        self._offset = 0
        self._file_end = 0
        self._end_fragment = False
        self._unsynced = False
        self._open()

    def write(self, lines: Sequence[bytes], sync: bool) -> None:
        """Append `lines` (and sync the file when `sync` and it has unsynced writes). Raises
        OSError; then pass the same lines again, newer ones after them."""
        self._ensure_file(lines)
        if lines:
            for _attempt in range(_REWRITE_ATTEMPTS):
                if not self._append(lines):
                    break
            else:
                raise OSError("the audit file kept being removed while it was written")
        if self._unsynced and sync and self._sync:
            assert self._fd is not None
            os.fsync(self._fd)
            self._unsynced = False

    def reopen(self, pending: Sequence[bytes] = ()) -> None:
        """Close the file and open the one at the path (after rotation). Raises OSError."""
        self._replace(pending)

    def close(self) -> None:
        """Close the file. Raises OSError."""
        fd, self._fd, self._identity = self._fd, None, None
        reader, self._reader = self._reader, None
        if reader is not None:
            os.close(reader)
        if fd is not None:
            os.close(fd)

    def _append(self, lines: Sequence[bytes]) -> bool:
        """Write `lines` from `_offset` on, holding the file's lock if it is a regular file. True
        if they must be written again: the file was removed while they were written (the new file
        is open then)."""
        fd = self._fd
        assert fd is not None
        if self._reader is None:
            return self._append_locked(fd, lines)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            return self._append_locked(fd, lines)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _append_locked(self, fd: int, lines: Sequence[bytes]) -> bool:
        start = _line_start(lines, self._offset)
        if start != self._offset and os.fstat(fd).st_size != self._file_end:
            self._offset, self._end_fragment = start, True  # someone appended after our fragment
        if self._reader is not None and self._offset == start:
            # Writing from a line's start: what the file ends with decides whether a fragment (ours,
            # or a killed process's) must be ended first.
            self._end_fragment = not _ends_a_line(self._reader)
        view = memoryview(b"".join(lines))[self._offset :]
        try:
            if self._end_fragment:
                self._write_some(fd, memoryview(b"\n"))
                self._end_fragment = False
            while view:  # a write may be partial (a full disk takes what fits)
                written = self._write_some(fd, view)
                self._offset += written
                view = view[written:]
        except OSError:
            self._file_end = os.fstat(fd).st_size  # where a line cut short would resume
            raise
        if os.fstat(fd).st_nlink == 0:
            self._replace(lines)
            return True
        self._offset = 0
        return False

    def _write_some(self, fd: int, data: memoryview) -> int:
        written = os.write(fd, data)
        if not written:
            raise OSError("audit log write made no progress")
        self._unsynced = True
        return written

    def _ensure_file(self, lines: Sequence[bytes]) -> None:
        """Have the file at the path open: reopen if it is missing or another file."""
        if self._fd is None:
            self._open()
            return
        try:
            found = os.stat(self._path)
        except FileNotFoundError:
            found = None
        if found is None or (found.st_dev, found.st_ino) != self._identity:
            self._replace(lines)

    def _replace(self, lines: Sequence[bytes]) -> None:
        """Leave the open file (removed or rotated) for the one at the path. The pending lines
        are written again whole: all of them if the old file is gone, else from the start of the
        line cut short."""
        fd = self._fd
        if fd is not None:
            removed = os.fstat(fd).st_nlink == 0
            if not removed and self._unsynced and self._sync:
                os.fsync(fd)  # what a rotated file holds stays
            self.close()
            self._offset = 0 if removed else _line_start(lines, self._offset)
            self._unsynced, self._end_fragment = False, False
        self._open()

    def _open(self) -> None:
        fd = open_destination(self._path)
        found = os.fstat(fd)
        self._fd, self._identity = fd, (found.st_dev, found.st_ino)
        regular = stat.S_ISREG(found.st_mode)
        self._sync = self._fsync and regular
        if regular:
            reader = os.open(self._path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            same = os.fstat(reader)
            if (same.st_dev, same.st_ino) == self._identity:
                self._reader = reader
            else:  # rotated in between: the next write's path check reopens both
                os.close(reader)
