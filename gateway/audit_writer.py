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
  are written when it takes them again; the writer retries every `retry_interval_seconds`. The
  file (`gateway.audit_file.AuditFile`) resumes a write cut short by a full disk without
  splitting or repeating a line, and follows its path when it is removed or rotated. While
  failing, `put` keeps at most `queue_size` lines and refuses more with
  `AuditUnavailableError` (every line under ``reads_when_failing = "refuse"``), except lines put
  with ``keep=True`` (the outcome of a change already applied), which are always kept.
- **Durable hand-off, group commit.** `durable` returns once every line put before it is
  written and, under ``durability = "fsync"``, synced; it raises `AuditUnavailableError` at once
  while the destination is failing, or when the write or sync fails. All waiters of one batch
  share one write and one sync. Reads never call it: their lines are written in batches.
- Recording never blocks the event loop on I/O: `put` appends to a deque (atomic under the
  interpreter lock); back-pressure waits only when the writer is `queue_size` lines behind a
  working destination.
- **A durable wait on stdout writes for itself when that cannot block.** Handing the lines to
  the thread and being woken when they are written crosses threads twice, which costs a write
  more than the write (docs/performance.md, "What the audit's durable hand-offs cost a write").
  So `durable` on stdout writes what is pending on the caller's thread when stdout is a regular
  file (up to `_INLINE_FILE_BYTES`), or a pipe or socket with room for it now (up to `PIPE_BUF`
  bytes: such a write is whole or not at all, and never waits), in order and under the same lock
  as the thread's writes; anything else (a larger batch, a full pipe, a terminal, a file
  destination, which syncs) goes to the thread as before. For the same reason `put` on an event
  loop wakes an idle writer only once the running step is over (`_wake_writer`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import select
import stat
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from cedarberg.gateway.audit_file import AuditFile
from cedarberg.gateway.config.audit import AuditSettings

__all__ = ["AuditObserver", "AuditUnavailableError", "AuditWriter"]

log = logging.getLogger("cedarberg.audit")

_BATCH_PAUSE_SECONDS: Final = 0.01
# A destination that hangs (a stuck network disk) fails the request rather than holding it forever.
DURABLE_TIMEOUT_SECONDS: Final = 10.0
_STOP: Final = object()
_REOPEN: Final = object()
# Most a durable wait writes itself to stdout when it is a regular file (a page-cache copy).
_INLINE_FILE_BYTES: Final = 64 * 1024

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


class AuditWriter:
    """Writes lines to the destination from a background thread. Thread-safe."""

    def __init__(self, settings: AuditSettings) -> None:
        self._settings = settings
        # Lines and markers in order; drained by the writer.
        self._pending: collections.deque[object] = collections.deque()
        self._io_lock = threading.Lock()  # held while lines go from `_pending` to the destination
        self._wake = threading.Event()  # set by a producer that finds the writer idle
        self._sync_wanted = threading.Event()  # set by a waiter: no batch pause
        self._writer_idle = False
        self._closed = False
        self._lock = threading.Lock()
        # Writer-owned: lines not yet taken by the destination, in order.
        self._backlog: list[bytes] = []
        self._backlog_len = 0  # read by producers (an int: a consistent enough snapshot)
        self._failing = False
        self._next_retry = 0.0
        self._observer: AuditObserver | None = None
        # Opened now: start-up fails on an unusable destination.
        self._file = (
            None
            if settings.destination == "stdout"
            else AuditFile(Path(settings.destination), settings.durability == "fsync")
        )
        self._inline = _inline_stdout(settings)
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
            self._wake_writer()

    def _wake_writer(self) -> None:
        """Wake the idle writer for what was just put. On an event loop, with stdout that a
        durable wait may write itself, only once the running step is over: a mutation's step
        goes on to `durable`, which writes the line (`_write_here`), and waking the writer for
        it would cost what writing it here saves."""
        if self._inline is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                loop.call_soon(self._wake_if_pending)
                return
        self._wake.set()

    def _wake_if_pending(self) -> None:
        if self._pending and self._writer_idle:
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
        if self._writer_idle:  # as in `put`: a busy writer takes it with its next batch
            self._wake.set()

    async def durable(self) -> None:
        """Return once every line put before this call is written (and synced under
        ``durability = "fsync"``). Raises `AuditUnavailableError` if the destination is failing
        or fails now, or does not answer within `DURABLE_TIMEOUT_SECONDS`."""
        if self._failing:
            raise AuditUnavailableError()
        written = self._write_here() if self._inline is not None else None
        if written is None:
            written = await self._wait(sync=True)
        if not written:
            raise AuditUnavailableError()

    def _write_here(self) -> bool | None:
        """Write what is pending on this thread if that cannot block (the module docstring): True
        once everything put before is written, False if the destination failed now, None if it
        is the writer's to do (busy, a marker or too much pending, stdout without room)."""
        inline = self._inline
        assert inline is not None
        if not self._io_lock.acquire(blocking=False):
            return None
        try:
            if self._backlog or self._failing or not inline.has_room():
                return None
            pending, room, complete = self._pending, inline.limit, False
            while True:
                if not pending:
                    complete = True
                    break
                item = pending.popleft()
                if not isinstance(item, bytes) or len(item) > room:
                    pending.appendleft(item)  # the writer's, in its place
                    break
                self._backlog.append(item)
                self._backlog_len += 1
                room -= len(item)
            if self._backlog and not self._drain(sync=False):
                return False
            return True if complete else None
        finally:
            self._io_lock.release()

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
        # Setting an Event takes its lock and wakes its waiters: under load every request would,
        # though one set serves every waiter until the writer's next pause clears it (the waiter
        # is pending before the flag is read, so a pause cleared meanwhile still finds it).
        if not self._sync_wanted.is_set():
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
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                log.exception("audit log %s could not be closed", self._settings.destination)

    # -- the writer thread ---------------------------------------------------------------------

    def _await_pending(self) -> None:
        """Wait (idle) until something is pending; while failing, no longer than the next retry."""
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

    def _run(self) -> None:
        while True:
            self._await_pending()
            with self._io_lock:  # a durable wait writing for itself (`_write_here`) waits its turn
                stop = self._write_batch()
            if stop:
                return
            # Gather the next batch for a moment (unless someone waits for it): a writer woken
            # for every record would take the interpreter lock from the event loop thousands of
            # times a second.
            self._sync_wanted.wait(_BATCH_PAUSE_SECONDS)
            self._sync_wanted.clear()

    def _write_batch(self) -> bool:
        """Write what is pending (under `_io_lock`) and settle its waiters; True once stopped."""
        pending = self._pending
        batch = [pending.popleft() for _ in range(len(pending))]  # what comes meanwhile: next batch
        waiters: list[_Waiter] = []
        stop = False
        for item in batch:
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
        if stop and self._backlog:
            log.error("%d audit records could not be written before closing", len(self._backlog))
        return stop

    def _drain(self, sync: bool, last: bool = False) -> bool:
        """Write the backlog (and sync it when `sync`); True if the destination took it all.
        While failing, only tries when a retry is due (or `last`)."""
        if self._failing and not last and time.monotonic() < self._next_retry:
            return False
        try:
            if self._file is not None:
                # A recovery syncs what it wrote: the records kept meanwhile are then durable.
                self._file.write(self._backlog, sync or self._failing)
                self._clear_backlog()
            else:
                self._write_stdout()
        except (OSError, ValueError) as err:
            self._failed(err)
            return False
        return self._recovered()

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

    def _clear_backlog(self) -> None:
        self._backlog.clear()
        self._backlog_len = 0

    def _reopen_now(self) -> None:
        if self._file is None:
            return
        try:
            self._file.reopen(self._backlog)
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


@dataclass(frozen=True, slots=True)
class _InlineStdout:
    """Stdout as a durable wait may write to it itself: how much at most, and whether it has
    room for that now (a pipe or socket: `select` says writable, so a write of at most
    `PIPE_BUF` bytes goes whole at once; a regular file always has)."""

    fd: int
    limit: int
    polled: bool

    def has_room(self) -> bool:
        if not self.polled:
            return True
        _readable, writable, _errors = select.select((), (self.fd,), (), 0)
        return bool(writable)


def _inline_stdout(settings: AuditSettings) -> _InlineStdout | None:
    """How a durable wait may write to stdout itself, or None (a file destination, which
    syncs; a terminal, which flow control may stop; a stream that is not a descriptor)."""
    if settings.destination != "stdout":
        return None
    try:
        fd = sys.stdout.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    if stat.S_ISREG(mode):
        return _InlineStdout(fd, _INLINE_FILE_BYTES, polled=False)
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return _InlineStdout(fd, select.PIPE_BUF, polled=True)
    return None
