"""`cedarberg serve`: listen, prepare once, then serve in this process or in N forked workers.

The listening socket is opened first (`gateway.serve.listen`): a port in use fails before the data
directory, the registry or any key exists, and "serving on" is logged once the socket listens.

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
import os
import socket
import ssl
from pathlib import Path

from cedarberg.gateway.audit_file import open_destination
from cedarberg.gateway.authn.tokens import TokenIssuer
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.serve.listen import open_listener
from cedarberg.gateway.serve.migrate import ensure_current, upgrade
from cedarberg.gateway.serve.worker import run_handed_worker, run_worker
from cedarberg.gateway.tls import check_plain_http_allowed, server_ssl_context
from cedarberg.kms.keyring import KeyRing

log = logging.getLogger("cedarberg")


def prepare(settings: Settings) -> None:
    """Everything that must be done once before serving. Raises the errors `main` reports."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if settings.audit.destination != "stdout":  # fail here, once, not in every worker
        os.close(open_destination(Path(settings.audit.destination)))
    PolicyEngine(settings.authz.policy_dir).load()
    TokenIssuer.open(settings.tokens, settings.data_dir)
    asyncio.run(_prepare_keys_and_registry(settings))


async def _prepare_keys_and_registry(settings: Settings) -> None:
    keyring = KeyRing.open(settings.kms, settings.effective_local_key_dir())
    await keyring.aclose()
    url = settings.effective_store_url()
    if settings.migrate_on_start:
        state = await upgrade(url)
        log.info("registry schema: %s", state.describe())
    else:
        await ensure_current(url)


def listening_context(settings: Settings) -> ssl.SSLContext | None:
    """The server's TLS context, or None for plain HTTP where that is allowed (else raises)."""
    if settings.tls.enabled:
        return server_ssl_context(settings.tls)
    check_plain_http_allowed(settings.host, settings.tls)
    return None


def serve(settings: Settings) -> int:
    """Listen, prepare, then serve; returns the exit status. The socket is bound before anything
    is created, so a port in use (ListenError) leaves the data directory untouched."""
    ssl_context = listening_context(settings)
    sock = open_listener(settings.host, settings.port)
    try:
        prepare(settings)
        return _serve_on(settings, ssl_context, sock)
    finally:
        sock.close()


def _serve_on(settings: Settings, ssl_context: ssl.SSLContext | None, sock: socket.socket) -> int:
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
        run_worker(settings, ssl_context, sock)
        return 0
    if settings.rate_limits.enabled and settings.rate_limits.storage_uri.startswith("memory"):
        log.warning(
            "rate limits are kept in memory: each of the %d workers enforces them on its own "
            "(set rate_limits.storage_uri to a redis:// URI to share one budget)",
            settings.workers,
        )
    # Imported here: only a multi-process server needs them.
    from cedarberg.gateway.serve.registry_writer import RegistryWriter
    from cedarberg.gateway.serve.supervisor import Supervisor

    writer = RegistryWriter.for_settings(settings)  # SQLite: one process writes for all workers
    return Supervisor(settings, ssl_context, run_handed_worker, sock, writer).run()
