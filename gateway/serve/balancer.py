"""The supervisor's balancer: it accepts every connection and hands it to the worker with the
fewest open.

Why not let the workers accept on the shared socket: a worker woken for a new connection accepts
everything queued by then, so a burst of connections (a client opening its pool; a load
generator's 8) lands on one worker while the other idles, and a deployment on two cores serves
concurrent clients on one. Handing each connection to the least loaded worker spreads them
whatever their timing; a connection stays with its worker until it closes (keep-alive).

The wire (one `AF_UNIX`, `SOCK_SEQPACKET` pair per worker, the worker's end inherited at fork;
`gateway.serve.handed_connections` is the other side):

- supervisor → worker: one message per connection, the byte ``c`` with the connection's file
  descriptor attached (`SCM_RIGHTS`);
- worker → supervisor: after each connection it ends, how many it has ended so far (8 bytes).
  A total rather than a difference, so a report the worker could not send is made up by the next.

Open connections per worker are handed minus ended: a hint for the choice, never a limit. A
worker whose end cannot take a connection now (gone, or its buffer full) is skipped. While no
worker is alive (all died at once, replacements starting) nothing is accepted: connections wait
in the listening socket's backlog, as they did for workers accepting themselves. One accepted
just as the last worker died waits in the balancer (at most `_MAX_WAITING`, then it is closed)
and goes to the next worker that can take it.

Threads: the balancer runs on its own thread, blocked in `select` when idle. The supervisor forks
replacement workers while it runs: `fork_lock` is held around each fork and whenever the
balancer changes what it holds, so a child never inherits a half-made change; the child closes
the balancer's descriptors at once (`close_in_child`).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import selectors
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Final

log = logging.getLogger("cedarberg.supervisor")

HANDED: Final = b"c"
ENDED: Final = struct.Struct("=Q")  # a worker's report: connections it has ended so far
_ACCEPTS_PER_WAKE: Final = 64  # then the reports get their turn
_MAX_WAITING: Final = 1024  # accepted connections kept for want of a worker
_RETRY_SECONDS: Final = 0.05


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """A new worker's channel: (the supervisor's end, the worker's end)."""
    supervisor_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    supervisor_end.setblocking(False)
    worker_end.setblocking(False)
    return supervisor_end, worker_end


@dataclass(slots=True)
class _Worker:
    pid: int
    end: socket.socket
    order: int  # ties go to the worker that was handed a connection longest ago
    handed: int = 0
    ended: int = 0
    gone: bool = False  # its end of the channel was closed: it exited

    @property
    def open(self) -> int:
        return self.handed - self.ended


class Balancer:
    """Hands the connections `listener` accepts to the attached workers (see the module
    docstring). `attach`/`detach` from the supervisor's thread; `start` once, `stop` once."""

    def __init__(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self._listener = listener
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._accepting = False  # the listener is registered: some worker is alive
        self._workers: dict[int, _Worker] = {}  # by pid
        self._waiting: collections.deque[socket.socket] = collections.deque()  # accepted, not handed
        self._handed_total = 0
        self._stopping = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self.fork_lock = threading.Lock()

    # -- the supervisor's side -------------------------------------------------------------------

    def attach(self, pid: int, end: socket.socket) -> None:
        """Hand connections to the worker `pid` through `end` (its channel's supervisor end)."""
        with self.fork_lock:
            worker = _Worker(pid, end, order=self._handed_total)
            self._workers[pid] = worker
            self._selector.register(end, selectors.EVENT_READ, worker)
            self._accept_while_any_alive()
        self._wake()

    def detach(self, pid: int) -> None:
        """The worker `pid` has exited: hand it nothing more."""
        with self.fork_lock:
            worker = self._workers.pop(pid, None)
            if worker is not None:
                if not worker.gone:
                    self._selector.unregister(worker.end)
                worker.end.close()
                self._accept_while_any_alive()

    def open_connections(self) -> dict[int, int]:
        """Open connections per worker pid, as the balancer counts them (for tests and logs)."""
        with self.fork_lock:
            return {pid: worker.open for pid, worker in self._workers.items()}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cedarberg-balancer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting and close the listening socket (connections queued in it are refused)
        and every channel. Idempotent."""
        if self._closed:
            return
        self._stopping = True
        self._wake()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self.fork_lock:
            self._closed = True
            for worker in self._workers.values():
                worker.end.close()
            self._workers.clear()
            while self._waiting:
                self._waiting.popleft().close()
            self._selector.close()
            self._listener.close()
            self._wake_read.close()
            self._wake_write.close()

    def close_in_child(self) -> None:
        """In a just-forked process (a worker, the registry writer): close the balancer's
        descriptors (the listening socket, the workers' channels). Takes no lock: the parent's
        locks mean nothing here."""
        for sock in (*(w.end for w in self._workers.values()), *self._waiting):
            sock.close()
        for sock in (self._listener, self._wake_read, self._wake_write):
            sock.close()
        self._selector.close()

    def _accept_while_any_alive(self) -> None:
        """Watch the listening socket only while some worker can take a connection (under
        `fork_lock`; the selector's table is changed atomically under the interpreter lock, so
        the balancer's thread, blocked in `select`, sees a consistent one)."""
        alive = any(not worker.gone for worker in self._workers.values())
        if alive and not self._accepting:
            self._selector.register(self._listener, selectors.EVENT_READ)
        elif not alive and self._accepting:
            self._selector.unregister(self._listener)
        self._accepting = alive

    # -- the balancer's thread -------------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # a wake-up is pending already, or it has stopped
            self._wake_write.send(b"w")

    def _run(self) -> None:
        while not self._stopping:
            # Connections waiting for a worker are tried again at least every _RETRY_SECONDS.
            for key, _events in self._selector.select(_RETRY_SECONDS if self._waiting else None):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is self._wake_read:
                    self._drain_wakes()
                else:
                    self._read_reports(key.data)
            # A worker attached (a wake-up) or read its channel (a report) since: try again.
            while self._waiting and self._hand(self._waiting[0]):
                self._waiting.popleft().close()

    def _drain_wakes(self) -> None:
        try:
            while self._wake_read.recv(512):
                pass
        except BlockingIOError:
            pass

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                conn, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # out of descriptors, a connection reset while queued
                log.warning("accepting a connection failed: %s", err.strerror or err)
                return
            if self._waiting or not self._hand(conn):  # first come, first handed
                self._wait(conn)
            else:
                conn.close()  # the worker has its own descriptor now

    def _wait(self, conn: socket.socket) -> None:
        if len(self._waiting) < _MAX_WAITING:
            self._waiting.append(conn)
            return
        log.warning("no worker could take a connection from %s; closed", _peer(conn))
        conn.close()

    def _hand(self, conn: socket.socket) -> bool:
        """Send `conn` to the worker with the fewest open; False if none could take it."""
        with self.fork_lock:
            candidates = sorted(
                (w for w in self._workers.values() if not w.gone), key=lambda w: (w.open, w.order)
            )
            for worker in candidates:
                try:
                    socket.send_fds(worker.end, [HANDED], [conn.fileno()])
                except OSError:
                    continue  # exited (detached soon), or not reading: the next one
                worker.handed += 1
                self._handed_total += 1
                worker.order = self._handed_total
                return True
        return False

    def _read_reports(self, worker: _Worker) -> None:
        with self.fork_lock:
            if self._workers.get(worker.pid) is not worker:
                return  # detached meanwhile
            while True:
                try:
                    report = worker.end.recv(ENDED.size)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    report = b""
                if len(report) != ENDED.size:  # end of file: the worker is gone
                    self._selector.unregister(worker.end)
                    worker.gone = True
                    self._accept_while_any_alive()
                    return
                (ended,) = ENDED.unpack(report)
                worker.ended = max(worker.ended, ended)


def _peer(conn: socket.socket) -> str:
    try:
        host, port = conn.getpeername()[:2]
    except OSError:
        return "a client that left"
    return f"{host}:{port}"
