"""A loopback TCP proxy that a test can cut and restore: a dependency that becomes unreachable
(every connection reset, open ones dropped) and comes back on the same address.

    with TcpProxy(target_port) as proxy:      # clients connect to proxy.port
        proxy.cut()                           # open connections dropped, new ones reset
        proxy.restore()                       # forwarded again
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

LOOPBACK = "127.0.0.1"
_CHUNK = 65536


class TcpProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`, one pair of threads per connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(128)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    def start(self) -> TcpProxy:
        self._acceptor.start()
        return self

    def cut(self) -> None:
        """Drop every open connection and reset new ones until `restore`."""
        with self._lock:
            self._cut = True
            dropped, self._open = self._open, set()
        for sock in dropped:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)
        self._acceptor.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                cut = self._cut
            if cut:
                # A reset, as from a host that is gone: SO_LINGER 0 sends RST on close.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                _close(client)
                continue
            try:
                upstream = socket.create_connection((LOOPBACK, self.target_port), timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(_CHUNK):
                sink.sendall(chunk)
        with self._lock:
            self._open.discard(source)
            self._open.discard(sink)
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
