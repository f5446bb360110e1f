"""The pipeline's first steps in front of aiohttp's router.

`install(runner)` makes the server hand every request to `middlewares.run` before aiohttp's web
application sees it: a request whose plan is valid is answered there (`gateway.web.replay`)
without routing or the middleware chain, which on a replayed read cost more than the replay
itself. Every other request continues, at the pipeline's `route` stage, into the application
(routing, then the stages after routing in its one middleware); the middleware sees that the
stages before routing ran and does not run them again. It is still one pipeline, entered at its
start: a server without the front (aiohttp's test server) runs every stage in the middleware.

`request.app` is unknown before routing, so the first stages read the application's parts from
`exchange.Front`, taken once when the front is installed.
"""

from __future__ import annotations

from typing import cast

from aiohttp import web

from cedarberg.gateway.web import middlewares
from cedarberg.gateway.web.exchange import Front


def install(runner: web.AppRunner) -> None:
    """Answer requests through the pipeline's first steps. Call after `runner.setup()` (the
    application has started and its parts exist) and before the first connection: a connection
    keeps the handler the server had when it was accepted."""
    server = runner.server
    if server is None:
        raise RuntimeError("install the front after runner.setup()")
    front = Front.of(runner.app)
    route_and_handle = server.request_handler  # the application's routing and middleware chain

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        # The runner's request factory builds the application's `web.Request`.
        return await middlewares.run(cast(web.Request, request), front, route_and_handle)

    server.request_handler = handle
