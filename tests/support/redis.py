"""A private Redis server for the tests.

``redis-server`` (Debian package ``redis-server``; ``make test`` installs it through
``scripts/install-test-deps.sh``) on a free loopback port, with persistence off
(``--save '' --appendonly no``) and its working directory in a temporary directory. One server
per test session through `get_server`; `RedisServer` for a private one (e.g. a server a test stops
to see what happens when Redis goes away).
"""

from __future__ import annotations

import atexit
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.ports import free_port

REDIS_SERVER = "redis-server"


class RedisError(RuntimeError):
    """The test Redis server could not be started."""


class RedisServer:
    """A throw-away ``redis-server`` listening on ``127.0.0.1:port``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``redis://`` URI the rate limiter takes."""
        return f"redis://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 20.0) -> None:
        """Start the server; returns once it answers ``PING``."""
        if self.running:
            return
        binary = shutil.which(REDIS_SERVER)
        if binary is None:
            raise RedisError(
                "redis-server not found: run scripts/install-test-deps.sh (apt-get install redis-server)"
            )
        self._dir = Path(tempfile.mkdtemp(prefix="cedarberg-redis-"))
        log = self._dir / "redis.log"
        self._proc = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self._dir),
                "--logfile",
                str(log),
                "--protected-mode",
                "yes",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                self._cleanup()
                raise RedisError(f"redis-server exited {self._proc.returncode}:\n{text}")
            if self.ping():
                return
            time.sleep(0.05)
        self.stop()
        raise RedisError(f"redis-server did not answer on port {self.port} within {timeout} s")

    def ping(self) -> bool:
        """Whether the server answers ``PING`` now (raw RESP, no client library)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """Send one command (RESP array) and return the raw first reply chunk."""
        payload = f"*{len(args)}\r\n".encode()
        for arg in args:
            data = arg.encode()
            payload += b"$%d\r\n%s\r\n" % (len(data), data)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5.0) as sock:
            sock.sendall(payload)
            return sock.recv(65536)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, nothing is answered, as a Redis
        stalled by a long command or a saturated host."""
        if self._proc is None or self._proc.poll() is not None:
            raise RedisError("redis-server is not running")
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Undo `pause` (SIGCONT)."""
        if self._proc is None or self._proc.poll() is not None:
            raise RedisError("redis-server is not running")
        self._proc.send_signal(signal.SIGCONT)

    def flushall(self) -> None:
        if not self.command("FLUSHALL").startswith(b"+OK"):
            raise RedisError("FLUSHALL failed")

    def stop(self) -> None:
        """Stop the server and delete its files. Safe to call more than once."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
        self._cleanup()

    def _cleanup(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_server: RedisServer | None = None


def get_server() -> RedisServer:
    """The session's server, started on first use and stopped when the interpreter exits
    (a session fixture may stop it earlier with `stop_server`)."""
    global _server  # noqa: PLW0603
    if _server is None or not _server.running:
        server = RedisServer()
        server.start()
        atexit.register(server.stop)
        _server = server
    return _server


def stop_server() -> None:
    """Stop the session's server if one was started."""
    global _server  # noqa: PLW0603
    if _server is not None:
        _server.stop()
        _server = None
