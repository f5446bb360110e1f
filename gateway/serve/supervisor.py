"""`cedarberg serve --workers N`: one supervising process, N forked workers on one socket.

The supervisor takes the listening socket `serve` opened before anything else and forks the
workers (each runs the whole aiohttp application, with its own caches and connection pools). It
accepts the connections itself and hands each to the worker with the fewest open
(`gateway.serve.balancer`, on a thread of its own), and otherwise only handles signals and exits:

- SIGTERM / SIGINT: stop accepting and close the socket, send SIGTERM to every worker (each lets
  requests in flight finish within `shutdown_timeout_seconds`), wait, then SIGKILL what is left
  5 s after that timeout;
- SIGHUP: forwarded, so every worker reloads its policies;
- a worker that exits unexpectedly is replaced; a worker of the first generation that exits
  with an error status within its first seconds means the configuration cannot serve (the
  worker has printed why), and so does a crash loop: both stop everything with exit status 1.

Metrics of all workers are summed: PROMETHEUS_MULTIPROC_DIR points at a private directory before
the first fork, and a dead worker's live gauges are dropped from it.

A companion (`gateway.serve.registry_writer`: the SQLite registry's writer process, when several
workers share a SQLite file) is forked before the workers, replaced like them when it dies, told
`in_worker()` in each worker after the fork, and stopped after the workers, so the commits they
finish during shutdown still reach it.

Fork safety: the supervisor forks after `prepare` ran to completion in `asyncio.run`, so no event
loop exists in it when it forks. The first workers are forked before the balancer's thread
starts; a replacement is forked while it runs, under its `fork_lock` (the balancer holds it
whenever it changes what it holds), and closes the balancer's descriptors first thing.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import ssl
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.metrics import MULTIPROC_ENV
from cedarberg.gateway.serve.balancer import Balancer, channel_pair
from cedarberg.gateway.serve.fatal import report_fatal

log = logging.getLogger("cedarberg.supervisor")

_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}
_STARTUP_SECONDS = 5.0  # a first-generation worker dying sooner means the configuration is bad
_KILL_GRACE_SECONDS = 5.0
_MAX_RESTARTS = 5
_RESTART_WINDOW_SECONDS = 60.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


# What one worker runs until told to stop: settings, TLS context, its end of the channel the
# balancer hands it connections on (`gateway.serve.handed_connections`).
Work = Callable[[Settings, ssl.SSLContext | None, socket.socket], None]


class Companion(Protocol):
    """A process the workers depend on (see the module docstring)."""

    def run(self) -> int:
        """Its life, in its own forked process; the exit status."""
        ...

    def in_worker(self) -> None:
        """What each worker does (after the fork, before serving) to use it."""
        ...

    def close(self) -> None:
        """In the supervisor, once it has exited for good."""
        ...


@dataclass(slots=True)
class _Worker:
    slot: int
    started: float
    first_generation: bool


class Supervisor:
    """Forks and watches the workers; what a worker runs is `work` (`gateway.serve.worker.run_worker`),
    passed in so that process supervision knows nothing of the application it serves."""

    def __init__(
        self,
        settings: Settings,
        ssl_context: ssl.SSLContext | None,
        work: Work,
        sock: socket.socket,
        companion: Companion | None = None,
    ) -> None:
        self._settings = settings
        self._ssl_context = ssl_context
        self._run_worker = work
        self._workers: dict[int, _Worker] = {}
        self._restarts: deque[float] = deque()
        self._balancer = Balancer(sock)  # listening already (`gateway.serve.listen`)
        self._metrics_dir = ""
        self._companion = companion
        self._companion_pid: int | None = None
        self._companion_started = 0.0

    def run(self) -> int:
        """Serve until told to stop; returns the exit status."""
        self._metrics_dir = tempfile.mkdtemp(prefix="cedarberg-metrics-")
        os.environ[MULTIPROC_ENV] = self._metrics_dir
        if threading.active_count() > 1:
            log.warning("forking workers while %d threads run", threading.active_count())
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            if self._companion is not None:
                self._spawn_companion()
            for slot in range(self._settings.workers):
                self._spawn(slot, first_generation=True)
            self._balancer.start()
            return self._supervise()
        finally:
            self._stop_accepting()
            self._stop_companion()
            shutil.rmtree(self._metrics_dir, ignore_errors=True)

    # -- workers -----------------------------------------------------------------------------
    def _spawn(self, slot: int, *, first_generation: bool) -> None:
        parent = os.getpid()
        supervisor_end, worker_end = channel_pair()
        with self._balancer.fork_lock:
            pid = os.fork()
            if pid == 0:  # the worker: never returns into the supervisor's code
                status = 1
                try:
                    self._balancer.close_in_child()
                    supervisor_end.close()
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
                    _stop_with_parent(parent)
                    if self._companion is not None:
                        self._companion.in_worker()
                    status = self._work(worker_end)
                finally:
                    logging.shutdown()
                    os._exit(status)
        worker_end.close()
        self._balancer.attach(pid, supervisor_end)
        self._workers[pid] = _Worker(slot, time.monotonic(), first_generation)
        log.info("worker %d started (pid %d)", slot, pid)

    def _spawn_companion(self) -> None:
        assert self._companion is not None
        parent = os.getpid()
        with self._balancer.fork_lock:
            pid = os.fork()
        if pid == 0:  # the companion: never returns into the supervisor's code
            status = 1
            try:
                self._balancer.close_in_child()  # it serves no HTTP
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
                _stop_with_parent(parent)
                status = self._companion.run()
            except Exception:
                log.exception("the registry writer (pid %d) failed", os.getpid())
            finally:
                logging.shutdown()
                os._exit(status)
        self._companion_pid, self._companion_started = pid, time.monotonic()
        log.info("registry writer started (pid %d)", pid)

    def _stop_companion(self) -> None:
        """SIGTERM the companion and wait for it (SIGKILL after the grace period); then close it."""
        pid, self._companion_pid = self._companion_pid, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + _KILL_GRACE_SECONDS
            while os.waitpid(pid, os.WNOHANG)[0] == 0:
                if time.monotonic() >= deadline:
                    log.error("killing the registry writer still running after %g s", _KILL_GRACE_SECONDS)
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.02)
        if self._companion is not None:
            self._companion.close()

    def _companion_exited(self, code: int, now: float) -> str | None:
        """Replace the companion that exited; a reason to give up, or None."""
        log.error("the registry writer (pid %s) exited with status %d", self._companion_pid, code)
        self._companion_pid = None
        if code > 0 and now - self._companion_started < _STARTUP_SECONDS:
            return "the registry writer failed to start"
        if self._crash_loop(now):
            return f"{_MAX_RESTARTS} processes died within {_RESTART_WINDOW_SECONDS:.0f} s"
        self._spawn_companion()
        return None

    def _crash_loop(self, now: float) -> bool:
        """Count a replacement (of a worker or the companion); True once there were too many
        within the window."""
        while self._restarts and now - self._restarts[0] > _RESTART_WINDOW_SECONDS:
            self._restarts.popleft()
        if len(self._restarts) >= _MAX_RESTARTS:
            return True
        self._restarts.append(now)
        return False

    def _work(self, channel: socket.socket) -> int:
        try:
            self._run_worker(self._settings, self._ssl_context, channel)
        except Exception as err:
            try:
                return report_fatal(err, self._settings)  # a setup error: one line, as `serve` does
            except Exception:
                log.exception("worker %d failed", os.getpid())  # a bug: the whole traceback
                return 1
        return 0

    def _supervise(self) -> int:
        while True:
            info = signal.sigtimedwait(_SIGNALS, 1.0)
            if info is None:
                continue
            if info.si_signo in (signal.SIGTERM, signal.SIGINT):
                log.info("stopping %d worker(s)", len(self._workers))
                return self._stop()
            if info.si_signo == signal.SIGHUP:
                self._signal_all(signal.SIGHUP)
                continue
            fatal = self._reap_and_replace()
            if fatal is not None:
                log.error("%s; stopping", fatal)
                self._stop()
                return 1

    def _reap_and_replace(self) -> str | None:
        """Reap exited workers (and the companion) and replace them; a reason to give up, or None."""
        while self._workers:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return None
            code = os.waitstatus_to_exitcode(status)
            now = time.monotonic()
            if pid == self._companion_pid:
                fatal = self._companion_exited(code, now)
                if fatal is not None:
                    return fatal
                continue
            worker = self._workers.pop(pid, None)
            if worker is None:
                continue
            self._balancer.detach(pid)
            self._forget_metrics(pid)
            log.error("worker %d (pid %d) exited with status %d", worker.slot, pid, code)
            # It exited by itself (not by a signal) right after the first start: it has printed
            # why this configuration cannot serve, and a replacement would fail the same way.
            if worker.first_generation and code > 0 and now - worker.started < _STARTUP_SECONDS:
                return "a worker failed to start"
            if self._crash_loop(now):
                return f"{_MAX_RESTARTS} workers died within {_RESTART_WINDOW_SECONDS:.0f} s"
            self._spawn(worker.slot, first_generation=False)
        return None

    def _stop(self) -> int:
        self._stop_accepting()
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self._settings.shutdown_timeout_seconds + _KILL_GRACE_SECONDS
        killed = False
        clean = True
        while self._workers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if killed:
                    log.error("%d worker(s) did not die", len(self._workers))
                    return 1
                log.error("killing %d worker(s) still running after the shutdown timeout", len(self._workers))
                self._signal_all(signal.SIGKILL)
                clean, killed = False, True
                deadline = time.monotonic() + _KILL_GRACE_SECONDS
            signal.sigtimedwait({signal.SIGCHLD}, max(0.05, min(remaining, 1.0)))
            while self._workers:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid == self._companion_pid:  # died during the shutdown: nothing left to stop
                    self._companion_pid = None
                if self._workers.pop(pid, None) is not None:
                    clean = clean and os.waitstatus_to_exitcode(status) == 0
        return 0 if clean else 1

    def _signal_all(self, signo: signal.Signals) -> None:
        for pid in list(self._workers):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signo)

    def _forget_metrics(self, pid: int) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, self._metrics_dir)  # type: ignore[no-untyped-call]

    def _stop_accepting(self) -> None:
        """Close the listening socket (and the workers' channels): no new connections."""
        self._balancer.stop()


def _stop_with_parent(parent: int) -> None:
    """Have the kernel send this worker SIGTERM when the supervisor dies (even by SIGKILL), so
    no orphaned worker keeps serving a port nobody supervises."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("cannot tie worker %d to its supervisor (errno %d)", os.getpid(), ctypes.get_errno())
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


__all__ = ["Supervisor"]
