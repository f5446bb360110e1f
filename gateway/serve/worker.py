"""One serving process: the aiohttp application on its own event loop, until SIGTERM/SIGINT.

`cedarberg serve` runs one in its own process, accepting on the listening socket (`run_worker`),
or the supervisor forks N of them and hands each the connections it accepts
(`run_handed_worker`; `gateway.serve.supervisor`, `gateway.serve.balancer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl

from aiohttp import web

from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.serve.event_loop import new_event_loop
from cedarberg.gateway.serve.handed_connections import HandedConnections
from cedarberg.gateway.web import front
from cedarberg.gateway.web.app import create_app

log = logging.getLogger("cedarberg")


def run_worker(settings: Settings, ssl_context: ssl.SSLContext | None, sock: socket.socket) -> None:
    """Serve until SIGTERM/SIGINT on `sock`, the listening socket `serve` opened."""
    _run(settings, ssl_context, sock, handed=False)


def run_handed_worker(settings: Settings, ssl_context: ssl.SSLContext | None, channel: socket.socket) -> None:
    """Serve until SIGTERM/SIGINT the connections the supervisor hands over `channel`."""
    _run(settings, ssl_context, channel, handed=True)


def _run(
    settings: Settings, ssl_context: ssl.SSLContext | None, sock: socket.socket, *, handed: bool
) -> None:
    app = create_app(settings)
    loop = new_event_loop(settings)
    asyncio.set_event_loop(loop)
    if settings.slow_callback_warning_ms > 0:
        loop.set_debug(True)
        loop.slow_callback_duration = settings.slow_callback_warning_ms / 1000
        log.warning(
            "event loop debug mode: every callback holding the loop longer than %g ms is logged",
            settings.slow_callback_warning_ms,
        )
    # What `web.run_app` does, with the pipeline's front installed on the server (it has no
    # hook for that): SIGTERM/SIGINT raise GracefulExit out of the loop; then the serving task is
    # cancelled, which shuts the runner down (in-flight requests get shutdown_timeout_seconds).
    serving = loop.create_task(_serve(app, settings, ssl_context, sock, handed))
    try:
        loop.run_until_complete(serving)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(serving)
        _cancel_remaining(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _serve(
    app: web.Application,
    settings: Settings,
    ssl_context: ssl.SSLContext | None,
    sock: socket.socket,
    handed: bool,
) -> None:
    runner = web.AppRunner(
        app, handle_signals=True, access_log=None, shutdown_timeout=settings.shutdown_timeout_seconds
    )
    await runner.setup()
    connections: HandedConnections | None = None
    try:
        front.install(runner)
        if handed:
            connections = HandedConnections(runner, sock, ssl_context)
        else:
            await web.SockSite(runner, sock, ssl_context=ssl_context).start()
        await asyncio.Event().wait()  # until a signal ends the loop
    finally:
        if connections is not None:
            connections.close()  # as a site stops accepting, before the requests in flight end
        await runner.cleanup()


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending after shutdown and let them finish unwinding."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
