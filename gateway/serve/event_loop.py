"""The event loop a gateway process runs on: uvloop unless configured otherwise (see
`Settings.event_loop`). The workers and the SQLite registry's writer process use the same kind."""

from __future__ import annotations

import asyncio

from cedarberg.gateway.config.settings import Settings


def new_event_loop(settings: Settings) -> asyncio.AbstractEventLoop:
    """A new event loop of the configured kind: "auto" takes uvloop when it is installed."""
    if settings.event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if settings.event_loop == "uvloop":
                raise
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
