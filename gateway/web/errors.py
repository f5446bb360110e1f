"""The one table from errors to HTTP, and the Iceberg ErrorModel response built from it.

Every error a request can end with is answered here: the catalog's, the gateway's own
(authentication, rate limits, denials) and aiohttp's HTTP errors. Lookup walks the exception's
class hierarchy, so a new subclass inherits its parent's mapping. Anything not in the table is a
500 that names only the request id: no internals leave the process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from aiohttp import web

from cedarberg.catalog import errors as catalog_errors
from cedarberg.gateway.audit import AuditUnavailableError
from cedarberg.gateway.audit_query import AuditNotReadableError
from cedarberg.gateway.authn.errors import (
    AuthenticationError,
    CredentialExpiredError,
    CredentialFormError,
    UnsupportedBindingError,
)
from cedarberg.gateway.config.console import CONSOLE_PREFIX
from cedarberg.gateway.ratelimit import RateLimitUnavailableError, RetryAfter
from cedarberg.gateway.web.console.error_page import error_page

log = logging.getLogger("cedarberg.request")

# One class for "authenticated, visible, and not allowed" (403), raised by the catalog and the
# gateway alike and mapped once below; named here too for the gateway modules that raise it.
ForbiddenError = catalog_errors.ForbiddenError


class RateLimitedError(Exception):
    """Over a rate limit: 429 with Retry-After."""

    def __init__(self, retry: RetryAfter) -> None:
        super().__init__("Too many requests; slow down")
        self.retry = retry


@dataclass(frozen=True, slots=True)
class ErrorMapping:
    """How one class of error is answered: `status` and Iceberg `error_type`; `message` replaces
    the error's own text when set (what failed is then logged, never told); `headers` adds
    response headers from the error; `log_failure` is False where a 5xx is not worth a warning."""

    status: int
    error_type: str
    message: str | None = None
    headers: Callable[[BaseException], dict[str, str]] | None = None
    log_failure: bool = True


def _retry_after_busy(err: BaseException) -> dict[str, str]:
    assert isinstance(err, catalog_errors.BusyError)
    return {"Retry-After": str(err.retry_after_seconds)}


def _retry_after_limited(err: BaseException) -> dict[str, str]:
    assert isinstance(err, RateLimitedError)
    return {"Retry-After": err.retry.header_value}


def _challenge(_err: BaseException) -> dict[str, str]:
    return {"WWW-Authenticate": 'Bearer realm="cedarberg"'}


_UNAVAILABLE = "ServiceUnavailableException"
ERROR_TABLE: dict[type[BaseException], ErrorMapping] = {
    catalog_errors.InvalidRequestError: ErrorMapping(400, "BadRequestException"),
    catalog_errors.InvalidArgumentError: ErrorMapping(400, "IllegalArgumentException"),
    catalog_errors.MetadataValidationError: ErrorMapping(400, "ValidationException"),
    catalog_errors.LocationNotAllowedError: ErrorMapping(400, "BadRequestException"),
    catalog_errors.DocumentTooLargeError: ErrorMapping(413, "RequestTooLargeException"),
    catalog_errors.UnprocessableError: ErrorMapping(422, "UnprocessableEntityException"),
    catalog_errors.NotFoundError: ErrorMapping(404, "NotFoundException"),
    catalog_errors.NoSuchWarehouseError: ErrorMapping(404, "NoSuchWarehouseException"),
    catalog_errors.NoSuchNamespaceError: ErrorMapping(404, "NoSuchNamespaceException"),
    catalog_errors.NoSuchTableError: ErrorMapping(404, "NoSuchTableException"),
    catalog_errors.NoSuchViewError: ErrorMapping(404, "NoSuchViewException"),
    catalog_errors.NoSuchPlanIdError: ErrorMapping(404, "NoSuchPlanIdException"),
    catalog_errors.NoSuchPlanTaskError: ErrorMapping(404, "NoSuchPlanTaskException"),
    catalog_errors.ForbiddenError: ErrorMapping(403, "ForbiddenException"),
    catalog_errors.ConflictError: ErrorMapping(409, "AlreadyExistsException"),
    catalog_errors.AlreadyExistsError: ErrorMapping(409, "AlreadyExistsException"),
    catalog_errors.NamespaceNotEmptyError: ErrorMapping(409, "NamespaceNotEmptyException"),
    catalog_errors.CommitFailedError: ErrorMapping(409, "CommitFailedException"),
    catalog_errors.IdempotencyKeyReusedError: ErrorMapping(422, "UnprocessableEntityException"),
    catalog_errors.CommitStateUnknownError: ErrorMapping(500, "CommitStateUnknownException"),
    catalog_errors.StorageUnavailableError: ErrorMapping(503, _UNAVAILABLE),
    catalog_errors.KeyServiceUnavailableError: ErrorMapping(503, _UNAVAILABLE),
    catalog_errors.BusyError: ErrorMapping(503, _UNAVAILABLE, headers=_retry_after_busy),
    catalog_errors.IntegrityCheckError: ErrorMapping(500, "ServiceFailureException"),
    # The gateway's own. Why a credential failed is logged by the authenticator, never told.
    CredentialExpiredError: ErrorMapping(419, "AuthenticationTimeoutException", "Credentials have timed out"),
    # What the client's own token says, nothing about why else it might fail: it cannot be used here.
    UnsupportedBindingError: ErrorMapping(
        401, "NotAuthorizedException", "Not authorized: DPoP-bound tokens are not supported", _challenge
    ),
    # The form the credential must take, chosen by the shape of what was sent (no lookup).
    CredentialFormError: ErrorMapping(401, "NotAuthorizedException", headers=_challenge),
    AuthenticationError: ErrorMapping(401, "NotAuthorizedException", "Not authorized", _challenge),
    RateLimitedError: ErrorMapping(429, "TooManyRequestsException", headers=_retry_after_limited),
    # The audit writer logs why its destination fails (once, not per refused request).
    AuditUnavailableError: ErrorMapping(503, _UNAVAILABLE, log_failure=False),
    # The audit log goes to stdout: this deployment cannot read it back (the message names the setting).
    AuditNotReadableError: ErrorMapping(501, "NotImplementedException", log_failure=False),
    # The limiter logs why its storage is unusable.
    RateLimitUnavailableError: ErrorMapping(
        503, _UNAVAILABLE, "rate limiting is unavailable", log_failure=False
    ),
}

# aiohttp's own HTTP errors (routing, body size, methods) in the same vocabulary.
_HTTP_TYPES = {
    400: "BadRequestException",
    404: "NotFoundException",
    405: "MethodNotAllowedException",
    406: "UnsupportedOperationException",
    413: "RequestTooLargeException",
    415: "UnsupportedMediaTypeException",
    501: "NotImplementedException",
}


def lookup(error: BaseException) -> ErrorMapping | None:
    """The mapping of `error`'s class or of its nearest mapped ancestor; None if unmapped."""
    for cls in type(error).__mro__:
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]
    return None


def error_body(status: int, error_type: str, message: str) -> dict[str, dict[str, str | int]]:
    """The Iceberg ErrorModel document."""
    return {"error": {"message": message, "type": error_type, "code": status}}


def error_response(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = orjson.dumps(error_body(status, error_type, message))
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def http_error_type(status: int) -> str:
    return _HTTP_TYPES.get(status, "BadRequestException" if status < 500 else "ServerErrorException")


# A path under /v1/v1/ is what a client configured with a catalog URI ending in /v1 sends (clients
# add /v1 themselves). Told on every 404 such a path gets, by the path alone: the same text whether
# a route, a warehouse named "v1" or anything under it is missing or hidden.
DOUBLED_VERSION_PREFIX = "/v1/v1/"
CATALOG_URI_HINT = (
    "the path starts with /v1/v1/, so the catalog URI ends in /v1: the catalog URI is the "
    "gateway's root (e.g. https://host:8181), without /v1"
)


def answer(request: web.Request, request_id: str, err: Exception) -> tuple[web.Response, str]:
    """The ErrorModel response for `err` and its error type, or under /console/ the same status
    and message as a page (`console.error_page`). Re-raises a redirect-class HTTPException
    (aiohttp answers those itself). A 404 of a path under /v1/v1/ says that the catalog URI must
    not end in /v1 (`CATALOG_URI_HINT`)."""
    status, error_type, message, headers = _mapped(request, request_id, err)
    if status == 404 and request.path.startswith(DOUBLED_VERSION_PREFIX):
        message = f"{message}: {CATALOG_URI_HINT}"
    if request.path.startswith(CONSOLE_PREFIX):
        return error_page(status, message, headers), error_type
    return error_response(status, error_type, message, headers), error_type


def _mapped(
    request: web.Request, request_id: str, err: Exception
) -> tuple[int, str, str, dict[str, str] | None]:
    """Status, error type, message and extra headers of `err` (see `answer`)."""
    headers: dict[str, str] | None
    if isinstance(err, web.HTTPException):
        if err.status < 400:
            raise err
        message = "request body is too large" if err.status == 413 else err.reason
        headers = {"Allow": err.headers["Allow"]} if "Allow" in err.headers else None
        return err.status, http_error_type(err.status), message, headers
    mapped = lookup(err)
    if mapped is None:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return 500, "ServerErrorException", f"internal error; request id {request_id}", None
    if mapped.status >= 500 and mapped.log_failure:
        log.warning("%s %s failed: %s", request.method, request.path, err)
    headers = mapped.headers(err) if mapped.headers is not None else None
    message = mapped.message if mapped.message is not None else str(err)
    return mapped.status, mapped.error_type, message, headers


def error_types(status: int) -> list[str]:
    """Every Iceberg error type an answer of `status` can carry (the table's and aiohttp's own),
    sorted: what the admin API's document promises for that status."""
    found = {mapping.error_type for mapping in ERROR_TABLE.values() if mapping.status == status}
    if status in _HTTP_TYPES:
        found.add(_HTTP_TYPES[status])
    return sorted(found)
