"""Free loopback ports for servers started by the tests."""

from __future__ import annotations

import socket
import threading

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    The port is found by binding to port 0 and is never handed out twice in one test run,
    so two servers started back to back cannot be given the same port. Another process may
    still take it before the caller binds; callers that can retry on "address in use" should.
    """
    with _lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port: int = sock.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("could not find a free loopback port")


def port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (and we could bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
