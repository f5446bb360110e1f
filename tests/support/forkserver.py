"""Start gateway processes by forking a server that has already imported the gateway.

A gateway process spends about three seconds importing pyiceberg, SQLAlchemy, aiohttp and cedarpy
before it serves; the behaviour suites start a fresh gateway for nearly every test. The fork
server imports all of that once (in its own process, before any thread or event loop exists) and
forks a child per gateway, which runs exactly what ``python -m cedarberg.gateway.cli ...`` runs:
``gateway.cli.main(argv)`` with the environment, working directory and log file the test asked
for. The child is a real, separate gateway process on a loopback port; only the imports are
shared. ``CEDARBERG_TEST_FORKSERVER=0`` turns this off (plain ``subprocess.Popen``).

Protocol (one JSON line per request on a Unix socket, one JSON line back):
    {"spawn": {"argv": [...], "env": {...}, "cwd": "...", "log": "..."}}  -> {"pid": N}
    {"status": N}                                                       -> {"code": int | null}
The server reaps its children and remembers their exit codes, so ``ForkedProcess`` offers the
``Popen`` methods the tests use (``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``,
``returncode``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_ENABLED = os.environ.get("CEDARBERG_TEST_FORKSERVER", "1") != "0"
_READY_TIMEOUT = 60.0


class ForkedProcess:
    """A gateway forked by the fork server, with the part of ``Popen``'s interface tests use."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["gateway", str(self.pid)], timeout or 0)
            time.sleep(0.05)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The client side: starts the server process once and talks to it."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="cedarberg-forkserver-")
        self._socket = str(Path(self._dir) / "sock")
        self._log = open(Path(self._dir) / "server.log", "ab")  # noqa: SIM115 - lives as long as the server
        self._lock = threading.Lock()
        repo = Path(__file__).resolve().parents[2]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CEDARBERG_")}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forkserver", self._socket],
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + _READY_TIMEOUT
        while not os.path.exists(self._socket):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fork server did not start; see {self._dir}/server.log")
            time.sleep(0.05)
        atexit.register(self.close)

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(self._socket)
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = conn.makefile("rb").readline()
        if not answer:
            raise RuntimeError("fork server closed the connection")
        result: dict[str, Any] = json.loads(answer)
        return result

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> ForkedProcess:
        answer = self._ask({"spawn": {"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}})
        return ForkedProcess(self, int(answer["pid"]))

    def status(self, pid: int) -> int | None:
        code = self._ask({"status": pid})["code"]
        return None if code is None else int(code)

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._log.close()


@functools.cache
def _the_server() -> ForkServer:
    return ForkServer()


def fork_server() -> ForkServer | None:
    """The session's fork server (started on first use), or None when turned off."""
    return _the_server() if _ENABLED else None


# -- the server process ------------------------------------------------------------------------


def _child(spec: dict[str, Any]) -> None:
    """In the forked child: become `python -m cedarberg.gateway.cli <argv>`. Never returns."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.environ.clear()
        os.environ.update(spec["env"])
        os.chdir(spec["cwd"])
        import random

        random.seed()  # not the fork server's state
        from cedarberg.gateway import cli

        sys.argv = ["cedarberg.gateway.cli", *spec["argv"]]
        code = cli.main(spec["argv"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # the child reports any crash in its log and its exit code
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(path: str) -> None:
    # Everything a gateway imports, imported once, before any thread or event loop exists.
    import cedarberg.gateway.cli
    import cedarberg.gateway.web.app

    del cedarberg
    exit_codes: dict[int, int] = {}
    live: set[int] = set()

    def reap(_signum: int, _frame: object) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            live.discard(pid)
            exit_codes[pid] = os.waitstatus_to_exitcode(status)

    def stop(_signum: int, _frame: object) -> None:
        for pid in list(live):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise SystemExit(0)

    signal.signal(signal.SIGCHLD, reap)
    signal.signal(signal.SIGTERM, stop)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    os.rename(path + ".tmp", path)  # the socket appears only once it can be bound
    listener.listen(16)
    while True:
        conn, _ = listener.accept()
        with conn:
            request = json.loads(conn.makefile("rb").readline())
            if "spawn" in request:
                # SIGCHLD stays blocked until the pid is recorded as live, so a child that exits
                # at once is still reaped into `exit_codes`, never left "live" for ever.
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
                pid = os.fork()
                if pid == 0:
                    conn.close()
                    listener.close()
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
                    _child(request["spawn"])
                live.add(pid)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
                answer: dict[str, Any] = {"pid": pid}
            else:
                pid = int(request["status"])
                answer = {"code": exit_codes.get(pid) if pid not in live else None}
            conn.sendall(json.dumps(answer).encode() + b"\n")


if __name__ == "__main__":
    _serve(sys.argv[1])
