"""A worker's side of the balancer (`gateway.serve.balancer`): it serves the connections the
supervisor hands it, and reports each one it ends.

The supervisor accepts; the worker receives each connection's descriptor on its channel and
serves it with the application's server, as if its own listening socket had accepted it (TLS is
handshaken here). After every connection it ends, the worker sends how many it has ended so far,
so the supervisor hands the next connection to the worker with the fewest open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from cedarberg.gateway.serve.balancer import ENDED

log = logging.getLogger("cedarberg")

_MAX_PER_MESSAGE = 1  # the supervisor sends one descriptor per message


class HandedConnections:
    """Serves the connections arriving on `channel` with `runner`'s server until `close`."""

    def __init__(self, runner: web.AppRunner, channel: socket.socket, ssl_context: ssl.SSLContext | None):
        server = runner.server
        if server is None:
            raise RuntimeError("serve handed connections after runner.setup()")
        self._server = server
        self._channel = channel
        self._ssl_context = ssl_context
        self._ended = 0
        self._loop = asyncio.get_running_loop()
        self._pending: set[asyncio.Task[None]] = set()
        # aiohttp's server is told of every connection's end here (and keeps its own count of
        # those open); it offers no other hook for it.
        aiohttp_lost = server.connection_lost

        def connection_lost(handler: RequestHandler, exc: BaseException | None = None) -> None:
            aiohttp_lost(handler, exc)
            self._report_ended()

        server.connection_lost = connection_lost  # type: ignore[method-assign]
        self._loop.add_reader(channel.fileno(), self._receive)

    def close(self) -> None:
        """Take no more connections (those being served finish with the runner's shutdown)."""
        with contextlib.suppress(ValueError, OSError):  # closed already
            self._loop.remove_reader(self._channel.fileno())
        self._channel.close()

    def _receive(self) -> None:
        while True:
            try:
                message, fds, _flags, _address = socket.recv_fds(self._channel, 1, _MAX_PER_MESSAGE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                log.exception("the supervisor's channel failed: this worker takes no new connections")
                self.close()
                return
            if not message and not fds:  # the supervisor is gone; this worker is ending too
                self.close()
                return
            for fd in fds:
                task = self._loop.create_task(self._serve(socket.socket(fileno=fd)))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    async def _serve(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._server, conn, ssl=self._ssl_context)
        except (OSError, TimeoutError) as err:  # ssl.SSLError is an OSError
            # What a listening server's loop would log for a failed handshake; the connection
            # never reached the application, so it ends here.
            log.debug("a handed connection failed before its first request: %s", err)
            conn.close()
            self._report_ended()

    def _report_ended(self) -> None:
        self._ended += 1
        with contextlib.suppress(OSError):  # full or closed: the next report carries the total
            self._channel.send(ENDED.pack(self._ended))
