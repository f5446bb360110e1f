"""The listening socket, opened before anything else `cedarberg serve` does.

`serve` binds and listens first, then prepares (data directory, registry, KMS key, token signing
key) and serves on this socket, with one worker or with N forked workers sharing it. So a port
that is taken, or an address that cannot be bound, fails before any state exists, with a message
saying what to do, and "serving on ..." is logged only once the socket listens.
"""

from __future__ import annotations

import errno
import socket

BACKLOG = 2048


class ListenError(Exception):
    """The configured address cannot be listened on; the message says why and what to do."""


def open_listener(host: str, port: int) -> socket.socket:
    """A socket bound to host:port and listening, inheritable by forked workers.

    Raises ListenError: the port is in use, the address is not this machine's, or binding is
    not permitted."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as err:
        raise ListenError(_reason(err, host, port)) from None
    sock.set_inheritable(True)
    return sock


def _reason(err: OSError, host: str, port: int) -> str:
    if err.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is in use: stop the other process or pass --port"
    if err.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}:{port}: {host} is not an address of this machine (pass --host)"
    if err.errno == errno.EACCES:
        return (
            f"cannot listen on {host}:{port}: permission denied "
            "(ports below 1024 need privileges; pass --port)"
        )
    if isinstance(err, socket.gaierror):
        return f"cannot listen on {host}:{port}: the host name does not resolve (pass --host)"
    return f"cannot listen on {host}:{port}: {err.strerror or err}"
