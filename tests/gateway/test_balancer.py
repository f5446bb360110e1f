"""The supervisor's balancer (`gateway.serve.balancer`) with real sockets, in this process: the
workers' ends of the channels are read here as a worker reads them.

What it must do: hand a burst of connections out evenly, each to the worker with the fewest
open (as the workers report them ended); skip a worker that is gone; keep connections waiting
(in the backlog, or accepted just as the last worker died) while no worker is alive, for the
next one; and stop by closing the listening socket.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from cedarberg.gateway.serve.balancer import ENDED, HANDED, Balancer, channel_pair

DEADLINE_SECONDS = 5.0


class _FakeWorker:
    """A worker's end of a channel, read as `handed_connections` reads it."""

    def __init__(self, end: socket.socket) -> None:
        self.end = end
        self.connections: list[socket.socket] = []
        self.ended = 0

    def take(self) -> None:
        while True:
            try:
                message, fds, _flags, _address = socket.recv_fds(self.end, 1, 1)
            except BlockingIOError:
                return
            assert message == HANDED
            assert len(fds) == 1
            self.connections.append(socket.socket(fileno=fds[0]))

    def end_connections(self, count: int) -> None:
        for conn in self.connections[:count]:
            conn.close()
        del self.connections[:count]
        self.ended += count
        self.end.send(ENDED.pack(self.ended))


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0), backlog=64)
    yield sock
    sock.close()


def _attach(balancer: Balancer, pid: int) -> _FakeWorker:
    supervisor_end, worker_end = channel_pair()
    balancer.attach(pid, supervisor_end)
    return _FakeWorker(worker_end)


def _connect(listener: socket.socket, count: int) -> list[socket.socket]:
    return [socket.create_connection(listener.getsockname()[:2], timeout=5) for _ in range(count)]


def _wait_for_handed(workers: list[_FakeWorker], total: int) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while sum(len(w.connections) for w in workers) < total:
        assert time.monotonic() < deadline, f"{total} connections were not all handed out"
        for worker in workers:
            worker.take()
        time.sleep(0.01)


def test_a_burst_is_spread_evenly_then_by_open_connections(listener: socket.socket) -> None:
    balancer = Balancer(listener)
    first, second = _attach(balancer, 101), _attach(balancer, 102)
    balancer.start()
    try:
        clients = _connect(listener, 8)
        _wait_for_handed([first, second], 8)
        assert (len(first.connections), len(second.connections)) == (4, 4)

        # The first worker ends three of its connections: the next three go to it.
        first.end_connections(3)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while balancer.open_connections()[101] != 1:
            assert time.monotonic() < deadline, "the worker's report was not read"
            time.sleep(0.01)
        clients += _connect(listener, 3)
        _wait_for_handed([first, second], 8)
        assert (len(first.connections), len(second.connections)) == (4, 4)
        assert balancer.open_connections() == {101: 4, 102: 4}

        # A handed connection is the client's own: bytes go through to the worker.
        clients[-1].sendall(b"ping")
        received = {conn.recv(4) for conn in first.connections[-1:]}
        assert received == {b"ping"}
    finally:
        balancer.stop()
        for conn in clients:
            conn.close()


def test_a_worker_that_is_gone_is_skipped(listener: socket.socket) -> None:
    balancer = Balancer(listener)
    gone, alive = _attach(balancer, 201), _attach(balancer, 202)
    gone.end.close()  # the worker exited; the supervisor has not reaped it yet
    balancer.start()
    try:
        clients = _connect(listener, 4)
        _wait_for_handed([alive], 4)
        assert balancer.open_connections()[202] == 4
    finally:
        balancer.stop()
        for conn in clients:
            conn.close()


def test_connections_wait_while_no_worker_is_alive(listener: socket.socket) -> None:
    balancer = Balancer(listener)
    dead = _attach(balancer, 301)
    dead.end.close()  # the only worker died; its replacement is not up yet
    balancer.start()
    try:
        (client,) = _connect(listener, 1)
        client.settimeout(0.3)
        # Not closed for want of a worker: the client reads neither the end of the stream nor a reset.
        with pytest.raises(TimeoutError):
            client.recv(1)
        replacement = _attach(balancer, 302)
        _wait_for_handed([replacement], 1)
        replacement.connections[0].sendall(b"pong")
        client.settimeout(DEADLINE_SECONDS)
        assert client.recv(4) == b"pong"
        client.close()
    finally:
        balancer.stop()


def test_stopping_closes_the_listening_socket(listener: socket.socket) -> None:
    address = listener.getsockname()[:2]
    balancer = Balancer(listener)
    _attach(balancer, 401)
    balancer.start()
    balancer.stop()
    balancer.stop()  # idempotent
    assert listener.fileno() == -1
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=5)
