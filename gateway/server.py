"""`cedarberg serve`: prepare once, then serve in this process or in N forked workers.

Preparation runs before any worker exists, so what must happen once happens once: the registry
schema is upgraded (or checked, with `migrate_on_start = false`), the policies are validated, the
KEK is opened (a local key file is created on first start) and the token signing key is created
on first start. A worker then only opens what it uses.

Shutdown (SIGTERM or SIGINT): the listening socket closes at once, requests in flight (commits)
get `shutdown_timeout_seconds` to finish, then the registry, KMS clients and audit log close.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from pathlib import Path

from aiohttp import web

from gateway.app import create_app
from gateway.authn.tokens import TokenIssuer
from gateway.authz.engine import PolicyEngine
from gateway.schema import ensure_current, upgrade
from gateway.settings import Settings
from gateway.tls import check_plain_http_allowed, server_ssl_context
from kms.keyring import KeyRing

log = logging.getLogger("cedarberg")


def prepare(settings: Settings) -> None:
    """Everything that must be done once before serving. Raises the errors `main` reports."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if settings.audit.destination != "stdout":  # fail here, once, not in every worker
        Path(settings.audit.destination).open("a").close()
    PolicyEngine(settings.authz.policy_dir).load()
    TokenIssuer.open(settings.tokens, settings.data_dir)
    asyncio.run(_prepare_keys_and_registry(settings))


async def _prepare_keys_and_registry(settings: Settings) -> None:
    keyring = KeyRing.open(settings.kms, settings.effective_local_key_dir())
    await keyring.aclose()
    url = settings.effective_store_url()
    if settings.migrate_on_start:
        states = await upgrade(url)
        log.info("registry schema: %s", ", ".join(state.describe() for state in states))
    else:
        await ensure_current(url)


def listening_context(settings: Settings) -> ssl.SSLContext | None:
    """The server's TLS context, or None for plain HTTP where that is allowed (else raises)."""
    if settings.tls.enabled:
        return server_ssl_context(settings.tls)
    check_plain_http_allowed(settings.host, settings.tls)
    return None


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


def serve(settings: Settings) -> int:
    """Prepare, then serve; returns the exit status."""
    ssl_context = listening_context(settings)
    prepare(settings)
    scheme = "https" if ssl_context else "http"
    log.info(
        "serving on %s://%s:%d with %d worker(s) (data dir %s)",
        scheme,
        settings.host,
        settings.port,
        settings.workers,
        settings.data_dir.resolve(),
    )
    if settings.workers == 1:
        run_worker(settings, ssl_context, None)
        return 0
    if settings.rate_limits.enabled and settings.rate_limits.storage_uri.startswith("memory"):
        log.warning(
            "rate limits are kept in memory: each of the %d workers enforces them on its own "
            "(set rate_limits.storage_uri to a redis:// URI to share one budget)",
            settings.workers,
        )
    # Imported here: only a multi-process server needs it.
    from gateway.supervisor import Supervisor

    return Supervisor(settings, ssl_context).run()
