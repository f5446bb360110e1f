"""One serving process: the aiohttp application on its own event loop, until SIGTERM/SIGINT.

`cedarberg serve` runs one in its own process (one worker) or the supervisor forks N of them
on a shared socket (`gateway.serve.supervisor`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

from aiohttp import web

from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.web.app import create_app

log = logging.getLogger("cedarberg")


def _event_loop(settings: Settings) -> asyncio.AbstractEventLoop:
    """A new event loop of the configured kind (see `Settings.event_loop`)."""
    if settings.event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if settings.event_loop == "uvloop":
                raise
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run_worker(settings: Settings, ssl_context: ssl.SSLContext | None, sock: socket.socket | None) -> None:
    """Serve until SIGTERM/SIGINT, on `sock` (shared by workers) or on host:port."""
    app = create_app(settings)
    loop = _event_loop(settings)
    asyncio.set_event_loop(loop)
    if settings.slow_callback_warning_ms > 0:
        loop.set_debug(True)
        loop.slow_callback_duration = settings.slow_callback_warning_ms / 1000
        log.warning(
            "event loop debug mode: every callback holding the loop longer than %g ms is logged",
            settings.slow_callback_warning_ms,
        )
    web.run_app(
        app,
        loop=loop,
        host=None if sock is not None else settings.host,
        port=None if sock is not None else settings.port,
        sock=sock,
        ssl_context=ssl_context,
        print=None,
        access_log=None,
        shutdown_timeout=settings.shutdown_timeout_seconds,
    )
