"""Middlewares. The order is one constant, `MIDDLEWARES`, outermost first; a test asserts it."""

from __future__ import annotations

import itertools
import logging
import os
import re
import secrets
import time
from collections.abc import Iterator

from aiohttp import web

from catalog import errors as catalog_errors
from gateway import errors, pipeline
from gateway.authn.errors import AuthenticationError, CredentialExpiredError
from gateway.logs import bind_request
from gateway.ratelimit import RateLimitUnavailableError
from gateway.routes.ops import metrics
from gateway.routes.route import Handler

log = logging.getLogger("cedarberg.request")
access_log = logging.getLogger("cedarberg.access")

ACCESS_LOG = web.AppKey("access_log", bool)
REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
REQUEST_ID = pipeline.REQUEST_ID
# Metric labels stay bounded whatever clients send.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
_CONFLICT = "CommitFailedException"


def _new_request_ids() -> Iterator[str]:
    """Unique request ids: 32 hex digits, a random per-process prefix and a counter (cheaper than
    a uuid4 per request, whose urandom call alone costs more than a cached authorization)."""
    prefix = secrets.token_hex(8)
    return (f"{prefix}{n:016x}" for n in itertools.count())


_request_ids: tuple[int, Iterator[str]] = (-1, iter(()))


def _new_request_id() -> str:
    global _request_ids  # noqa: PLW0603 - a forked worker starts a sequence of its own
    pid = os.getpid()
    if _request_ids[0] != pid:
        _request_ids = (pid, _new_request_ids())
    return next(_request_ids[1])


@web.middleware
async def request_id_and_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every request an id, turn every exception into an Iceberg ErrorModel response, and
    count and log what was answered."""
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = offered if _CLIENT_REQUEST_ID.match(offered) else _new_request_id()
    request[REQUEST_ID] = request_id
    bind_request(request_id)
    started = time.perf_counter()
    error_type = None
    stats = metrics(request)
    stats.in_flight.inc()
    try:
        response = await handler(request)
    except Exception as err:
        response, error_type = _error_response(request, request_id, err)
    finally:
        stats.in_flight.dec()
    elapsed = time.perf_counter() - started
    response.headers[REQUEST_ID_HEADER] = request_id
    route = pipeline.route_of(request)
    operation = route.operation if route is not None else "unmatched"
    method = request.method if request.method in _METHODS else "other"
    stats.child(stats.requests, operation, method, str(response.status)).inc()
    stats.child(stats.latency, operation).observe(elapsed)
    if error_type == _CONFLICT:
        stats.conflicts.labels(operation).inc()
    if request.app[ACCESS_LOG]:
        access_log.info(
            "%s %s %d %.1fms", request.method, request.rel_url.raw_path, response.status, elapsed * 1000
        )
    return response


def _answer(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> tuple[web.StreamResponse, str]:
    return errors.error_response(status, error_type, message, headers), error_type


def _error_response(request: web.Request, request_id: str, err: Exception) -> tuple[web.StreamResponse, str]:
    """The ErrorModel response for `err` and its error type. Re-raises a redirect-class
    HTTPException (aiohttp answers those itself)."""
    if isinstance(err, CredentialExpiredError):
        return _answer(419, "AuthenticationTimeoutException", "Credentials have timed out")
    if isinstance(err, AuthenticationError):
        # Why a credential failed is logged by the authenticator, never told to the client.
        challenge = {"WWW-Authenticate": 'Bearer realm="cedarberg"'}
        return _answer(401, "NotAuthorizedException", "Not authorized", challenge)
    if isinstance(err, pipeline.RateLimitedError):
        return _answer(429, "TooManyRequestsException", str(err), {"Retry-After": err.retry.header_value})
    if isinstance(err, RateLimitUnavailableError):
        return _answer(503, "ServiceUnavailableException", "rate limiting is unavailable")
    if isinstance(err, pipeline.ForbiddenError):
        return _answer(403, "ForbiddenException", str(err))
    if isinstance(err, web.HTTPException):
        if err.status < 400:
            raise err
        message = "request body is too large" if err.status == 413 else err.reason
        headers = {"Allow": err.headers["Allow"]} if "Allow" in err.headers else None
        return _answer(err.status, errors.http_error_type(err.status), message, headers)
    mapped = errors.lookup(err)
    if mapped is None:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _answer(500, "ServerErrorException", f"internal error; request id {request_id}")
    status, error_type = mapped
    if status >= 500:
        log.warning("%s %s failed: %s", request.method, request.path, err)
    if isinstance(err, catalog_errors.BusyError):
        return _answer(status, error_type, str(err), {"Retry-After": str(err.retry_after_seconds)})
    return _answer(status, error_type, str(err))


MIDDLEWARES = (
    request_id_and_errors,
    pipeline.limit_by_address,
    pipeline.authenticate,
    pipeline.authorize,
)
