"""The pipeline's outermost stage (`gateway.web.middlewares.STAGES`): every request gets an id and
an answer.

The id is the client's `X-Request-ID` when it is well formed, else a new one; it is bound to the
request's log lines and audit records and sent back. Every exception of the stages after this one
becomes an Iceberg ErrorModel response through the one error table (`gateway.web.errors`), and
every answer is counted (requests, latency, conflicts), a refusal audited
(`gateway.web.refusals`) and, when configured, logged.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import secrets
import time
from collections.abc import Iterator

from aiohttp import web

from cedarberg.gateway.logs import bind_request
from cedarberg.gateway.web import errors, refusals
from cedarberg.gateway.web.exchange import Exchange, Next
from cedarberg.gateway.web.keys import REQUEST_ID, ROUTE

access_log = logging.getLogger("cedarberg.access")

REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
# Metric labels stay bounded whatever clients send.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
_CONFLICT = "CommitFailedException"


def _new_request_ids() -> Iterator[str]:
    """Unique request ids: 32 hex digits, a random per-process prefix and a counter (cheaper than
    a uuid4 per request, whose urandom call alone costs more than a cached authorization)."""
    prefix = secrets.token_hex(8)
    return (f"{prefix}{n:016x}" for n in itertools.count())


_request_ids = _new_request_ids()


def _restart_request_ids() -> None:
    global _request_ids  # noqa: PLW0603 - a forked worker starts a sequence of its own
    _request_ids = _new_request_ids()


# A forked worker must not repeat its parent's ids; asking for the pid on every request would
# cost a system call each time.
os.register_at_fork(after_in_child=_restart_request_ids)


def _new_request_id() -> str:
    return next(_request_ids)


async def answer(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Give every request an id, turn every exception of the stages after it into an Iceberg
    ErrorModel response, and count and log what was answered."""
    front = exchange.front
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = offered if _CLIENT_REQUEST_ID.match(offered) else _new_request_id()
    request[REQUEST_ID] = request_id
    bind_request(request_id)
    started = time.perf_counter()
    error_type = None
    stats = front.metrics
    stats.in_flight.inc()
    try:
        response = await rest(request, exchange)
    except Exception as err:
        response, error_type = errors.answer(request, request_id, err)
    finally:
        stats.in_flight.dec()
    elapsed = time.perf_counter() - started
    response.headers[REQUEST_ID_HEADER] = request_id
    # Set by routing (or from a plan); absent when routing itself failed.
    route = request.get(ROUTE)
    operation = route.operation if route is not None else "unmatched"
    method = request.method if request.method in _METHODS else "other"
    stats.child(stats.requests, operation, method, str(response.status)).inc()
    stats.child(stats.latency, operation).observe(elapsed)
    if error_type == _CONFLICT:
        stats.conflicts.labels(operation).inc()
    if response.status in refusals.AUDITED:  # one set lookup per request; a refusal costs more
        await refusals.note(request, front.security, response.status, operation)
    if front.access_log:
        access_log.info(
            "%s %s %d %.1fms", request.method, request.rel_url.raw_path, response.status, elapsed * 1000
        )
    return response
