"""The audit log's writer: one thread that hands JSON lines to the destination, and knows whether
it can.

Public API (used by `gateway.audit.AuditLog`)::

    writer = AuditWriter(settings)          # opens the destination; raises OSError if it cannot
    writer.put(line, keep=False)            # any thread; raises AuditUnavailableError (see below)
    await writer.durable()                  # everything put before is written (and synced)
    await writer.probe()                    # is the destination usable? (for /ready)
    writer.flush(timeout) / writer.reopen() / writer.close()
    writer.healthy; writer.observe(observer)

Invariants:

- **Nothing is dropped.** Lines the destination did not take stay in a backlog, in order, and
  are written when it takes them again; the writer retries every `retry_interval_seconds`. A
  write cut short (a full disk) resumes where it stopped, so no line is split or repeated in one
  file. While failing, `put` keeps at most `queue_size` lines and refuses more with
  `AuditUnavailableError` (and refuses every line under ``reads_when_failing = "refuse"``),
  except lines put with ``keep=True`` (the outcome of a change already applied), which are
  always kept.
- **Durable hand-off, group commit.** `durable` returns once every line put before it is
  written and, under ``durability = "fsync"``, synced; it raises `AuditUnavailableError` at once
  while the destination is failing, or when the write or sync fails. All waiters of one batch
  share one write and one sync. Reads never call it: their lines are written in batches.
- **The destination is the path.** Before each batch the path is checked: a file that was
  removed or replaced (rotated) is reopened at the configured path. Lines written to a file
  that was removed meanwhile (its link count is 0) are written again to the new one; lines of a
  rotated file stay there (only a line cut short is written again, whole, to the new file).
- Recording never blocks the event loop on I/O: `put` appends to a deque (atomic under the
  interpreter lock); back-pressure waits only when the writer is `queue_size` lines behind a
  working destination.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from cedarberg.gateway.config.audit import AuditSettings

__all__ = ["AuditObserver", "AuditUnavailableError", "AuditWriter", "open_destination"]

log = logging.getLogger("cedarberg.audit")

_BATCH_PAUSE_SECONDS: Final = 0.01
# A destination that hangs (a stuck network disk) fails the request rather than holding it forever.
DURABLE_TIMEOUT_SECONDS: Final = 10.0
_REWRITE_ATTEMPTS: Final = 3
_STOP: Final = object()
_REOPEN: Final = object()

NOT_RECORDED = "the audit log cannot record requests right now; nothing was done"


class AuditUnavailableError(Exception):
    """The audit log cannot take (or durably write) a record now: the request fails with 503."""

    def __init__(self, message: str = NOT_RECORDED) -> None:
        super().__init__(message)


class AuditObserver(Protocol):
    """Told (from the writer thread) when the destination fails or recovers, and of each failed
    attempt (`gateway.metrics.Metrics`)."""

    def audit_sink_up(self, up: bool) -> None: ...

    def audit_write_failed(self) -> None: ...


@dataclass(slots=True)
class _Waiter:
    """A request waiting for the lines before it: `durable` (sync) or `probe` (no sync)."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[bool]
    sync: bool


@dataclass(slots=True)
class _Flush:
    done: threading.Event = field(default_factory=threading.Event)
    written: bool = False


def _settle(future: asyncio.Future[bool], ok: bool) -> None:
    if not future.done():  # its waiter may have timed out
        future.set_result(ok)


def open_destination(path: Path) -> int:
    """Open the audit file at `path` for appending, creating it (mode 0600) and its parent
    directories if missing. Returns the descriptor; raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)


class AuditWriter:
    """Writes lines to the destination from a background thread. Thread-safe."""

    def __init__(self, settings: AuditSettings) -> None:
        self._settings = settings
        self._to_file = settings.destination != "stdout"
        self._path = Path(settings.destination)
        self._sync = False  # set when the file is opened
        # Lines and markers in order; drained by the writer.
        self._pending: collections.deque[object] = collections.deque()
        self._wake = threading.Event()  # set by a producer that finds the writer idle
        self._sync_wanted = threading.Event()  # set by a waiter: no batch pause
        self._writer_idle = False
        self._closed = False
        self._lock = threading.Lock()
        # Writer-owned: lines not yet taken by the destination, and how many bytes of their
        # concatenation the current file already has (a write cut short).
        self._backlog: list[bytes] = []
        self._backlog_len = 0  # read by producers (an int: a consistent enough snapshot)
        self._offset = 0
        self._unsynced = False
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._failing = False
        self._next_retry = 0.0
        self._observer: AuditObserver | None = None
        if self._to_file:
            self._open()  # start-up fails on an unusable destination
        self._thread = threading.Thread(target=self._run, name="cedarberg-audit", daemon=True)
        self._thread.start()

    @property
    def healthy(self) -> bool:
        """False while the destination is failing (it is retried; true again once it works)."""
        return not self._failing

    def observe(self, observer: AuditObserver) -> None:
        """Report the destination's state (now, and on every change) and failures to `observer`."""
        self._observer = observer
        observer.audit_sink_up(not self._failing)

    # -- producers -----------------------------------------------------------------------------

    def put(self, line: bytes, keep: bool = False) -> None:
        """Hand `line` to the writer. Raises `RuntimeError` once closed and
        `AuditUnavailableError` when the destination is failing and the line may not be kept
        (see the module docstring); ``keep=True`` lines are always kept."""
        if self._closed:
            raise RuntimeError("audit log is closed")
        if self._failing and not keep:
            self._refuse_if_full()
        pending = self._pending
        if len(pending) >= self._settings.queue_size and not keep:
            self._wait_for_room()
        pending.append(line)
        if self._writer_idle:
            self._wake.set()

    def _refuse_if_full(self) -> None:
        if self._settings.reads_when_failing == "refuse":
            raise AuditUnavailableError()
        if len(self._pending) + self._backlog_len >= self._settings.queue_size:
            raise AuditUnavailableError()

    def _wait_for_room(self) -> None:
        # Back-pressure, as a bounded queue's put would block; rare (the writer drains every
        # batch pause), so polled rather than signalled per record.
        while len(self._pending) >= self._settings.queue_size and self._thread.is_alive():
            if self._failing:
                raise AuditUnavailableError()
            self._wake.set()
            time.sleep(_BATCH_PAUSE_SECONDS / 10)

    def _marker(self, item: object) -> None:
        self._pending.append(item)
        self._wake.set()

    async def durable(self) -> None:
        """Return once every line put before this call is written (and synced under
        ``durability = "fsync"``). Raises `AuditUnavailableError` if the destination is failing
        or fails now, or does not answer within `DURABLE_TIMEOUT_SECONDS`."""
        if self._failing or not await self._wait(sync=True):
            raise AuditUnavailableError()

    async def probe(self) -> bool:
        """True if the destination takes what is pending and still is the file at the configured
        path (checked by the writer now); False while it is failing."""
        return not self._failing and await self._wait(sync=False)

    async def _wait(self, sync: bool) -> bool:
        if not self._thread.is_alive():
            return False
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop, loop.create_future(), sync)
        self._marker(waiter)
        self._sync_wanted.set()
        try:
            async with asyncio.timeout(DURABLE_TIMEOUT_SECONDS):
                return await waiter.future
        except TimeoutError:
            return False

    # -- flushing and life cycle ---------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until the writer has tried to write every line put before this call; True if it
        wrote them all, False if the destination is failing or on timeout."""
        if not self._thread.is_alive():
            return not self._backlog and not self._pending
        marker = _Flush()
        self._marker(marker)
        return marker.done.wait(timeout) and marker.written

    def reopen(self) -> None:
        """Close and reopen the file destination (after log rotation); no-op for stdout."""
        self._marker(_REOPEN)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued (one last attempt), stop the writer and close the file.
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._marker(_STOP)
        self._thread.join(timeout)
        self._close_fd()

    # -- the writer thread ---------------------------------------------------------------------

    def _take_batch(self) -> list[object]:
        """Everything pending, waiting (idle) until there is something; while failing, waiting
        no longer than the next retry."""
        pending = self._pending
        while not pending:
            # Idle is announced before the emptiness is checked again, so a producer that
            # appends in between sees it and wakes the writer: no record waits for a timeout.
            self._writer_idle = True
            if not pending:
                if self._failing:
                    self._wake.wait(max(self._next_retry - time.monotonic(), 0.0))
                else:
                    self._wake.wait()
            self._wake.clear()
            self._writer_idle = False
            if self._failing and time.monotonic() >= self._next_retry:
                break
        batch = []
        while pending:
            batch.append(pending.popleft())
        return batch

    def _run(self) -> None:
        while True:
            waiters: list[_Waiter] = []
            stop = False
            for item in self._take_batch():
                if isinstance(item, bytes):
                    self._backlog.append(item)
                    self._backlog_len += 1
                elif isinstance(item, _Waiter):
                    waiters.append(item)
                else:  # markers act after what came before them is written
                    written = self._drain(sync=False)
                    if isinstance(item, _Flush):
                        item.written = written
                        item.done.set()
                    elif item is _REOPEN:
                        self._reopen_now()
                    elif item is _STOP:
                        stop = True
            ok = self._drain(sync=any(w.sync for w in waiters), last=stop)
            for waiter in waiters:
                waiter.loop.call_soon_threadsafe(_settle, waiter.future, ok)
            if stop:
                if self._backlog:
                    log.error("%d audit records could not be written before closing", len(self._backlog))
                return
            # Gather the next batch for a moment (unless someone waits for it): a writer woken
            # for every record would take the interpreter lock from the event loop thousands of
            # times a second.
            self._sync_wanted.wait(_BATCH_PAUSE_SECONDS)
            self._sync_wanted.clear()

    def _drain(self, sync: bool, last: bool = False) -> bool:
        """Write the backlog (and sync it when `sync`); True if the destination took it all.
        While failing, only tries when a retry is due (or `last`)."""
        if self._failing and not last and time.monotonic() < self._next_retry:
            return False
        try:
            if self._to_file:
                self._write_file(sync or self._failing)
            else:
                self._write_stdout()
        except (OSError, ValueError) as err:
            self._failed(err)
            return False
        return self._recovered()

    def _write_file(self, sync: bool) -> None:
        """Write the backlog to the file at the configured path (and sync it when `sync`).
        Raises OSError."""
        self._ensure_file()
        for _attempt in range(_REWRITE_ATTEMPTS):
            if not self._write_backlog():
                break
        else:
            raise OSError("the audit file kept being removed while it was written")
        if self._unsynced and sync and self._sync:
            assert self._fd is not None
            os.fsync(self._fd)
            self._unsynced = False

    def _write_stdout(self) -> None:
        if not self._backlog:
            return
        data = b"".join(self._backlog)
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:
            sys.stdout.write(data.decode())
            sys.stdout.flush()
        self._clear_backlog()

    def _write_backlog(self) -> bool:
        """Write the backlog from `_offset` on. True if it must be written again: the file was
        removed while it was written (the new file is open then)."""
        if not self._backlog:
            return False
        fd = self._fd
        assert fd is not None
        view = memoryview(b"".join(self._backlog))[self._offset :]
        while view:  # a write may be partial (a full disk takes what fits)
            written = os.write(fd, view)
            if not written:
                raise OSError("audit log write made no progress")
            self._offset += written
            self._unsynced = True
            view = view[written:]
        if os.fstat(fd).st_nlink == 0:
            self._replace_file()
            return True
        self._clear_backlog()
        return False

    def _clear_backlog(self) -> None:
        self._backlog.clear()
        self._backlog_len = 0
        self._offset = 0

    def _ensure_file(self) -> None:
        """Have the file at the configured path open: reopen it if it is missing or another file."""
        if self._fd is None:
            self._open()
            return
        try:
            found = os.stat(self._path)
        except FileNotFoundError:
            found = None
        if found is None or (found.st_dev, found.st_ino) != self._identity:
            self._replace_file()

    def _replace_file(self) -> None:
        """Leave the open file (removed or rotated) for the one at the configured path. Lines of
        the unfinished batch are written again whole: all of them if the old file is gone, else
        from the start of the line cut short."""
        fd = self._fd
        if fd is not None:
            removed = os.fstat(fd).st_nlink == 0
            if not removed and self._unsynced and self._sync:
                os.fsync(fd)  # what a rotated file holds stays
            self._close_fd()
            self._offset = 0 if removed else self._line_start(self._offset)
            self._unsynced = False
        self._open()

    def _line_start(self, offset: int) -> int:
        start = 0
        for line in self._backlog:
            if start + len(line) > offset:
                return start
            start += len(line)
        return start

    def _open(self) -> None:
        fd = open_destination(self._path)
        found = os.fstat(fd)
        self._fd, self._identity = fd, (found.st_dev, found.st_ino)
        # Only a regular file can be synced (not /dev/stdout, a pipe, a terminal).
        self._sync = stat.S_ISREG(found.st_mode) and self._settings.durability == "fsync"

    def _close_fd(self) -> None:
        fd, self._fd, self._identity = self._fd, None, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                log.exception("audit log %s could not be closed", self._settings.destination)

    def _reopen_now(self) -> None:
        if not self._to_file:
            return
        try:
            self._replace_file()
        except OSError as err:
            self._failed(err)

    def _failed(self, err: Exception) -> None:
        self._next_retry = time.monotonic() + self._settings.retry_interval_seconds
        observer = self._observer
        if observer is not None:
            observer.audit_write_failed()
        if self._failing:
            return
        self._failing = True
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        log.error(
            "audit log write to %s failed: %s; mutations are refused (503) and %d records kept until "
            "it takes records again (retried every %gs)",
            self._settings.destination,
            reason,
            len(self._backlog),
            self._settings.retry_interval_seconds,
        )
        if observer is not None:
            observer.audit_sink_up(False)

    def _recovered(self) -> bool:
        if self._failing:
            self._failing = False
            log.warning("audit log %s takes records again; recording resumed", self._settings.destination)
            if self._observer is not None:
                self._observer.audit_sink_up(True)
        return True
