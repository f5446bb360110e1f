"""Middlewares. The order is one constant, `MIDDLEWARES`, outermost first; a test asserts it."""

from __future__ import annotations

import logging
import re
import time
import uuid

from aiohttp import web

from gateway import errors, pipeline
from gateway.authn.errors import AuthenticationError, CredentialExpiredError
from gateway.ratelimit import RateLimitUnavailableError
from gateway.routes.route import Handler

log = logging.getLogger("cedarberg.request")
access_log = logging.getLogger("cedarberg.access")

REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
REQUEST_ID = pipeline.REQUEST_ID


@web.middleware
async def request_id_and_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give every request an id and turn every exception into an Iceberg ErrorModel response."""
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = offered if _CLIENT_REQUEST_ID.match(offered) else uuid.uuid4().hex
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    try:
        response = await handler(request)
    except errors.NotImplementedOperation as err:
        response = errors.error_response(501, "NotImplementedException", str(err))
    except CredentialExpiredError:
        response = errors.error_response(419, "AuthenticationTimeoutException", "Credentials have timed out")
    except AuthenticationError:
        # Why a credential failed is logged by the authenticator, never told to the client.
        response = errors.error_response(
            401, "NotAuthorizedException", "Not authorized", {"WWW-Authenticate": 'Bearer realm="cedarberg"'}
        )
    except pipeline.RateLimitedError as err:
        response = errors.error_response(
            429, "TooManyRequestsException", str(err), {"Retry-After": err.retry.header_value}
        )
    except RateLimitUnavailableError:
        response = errors.error_response(503, "ServiceUnavailableException", "rate limiting is unavailable")
    except pipeline.ForbiddenError as err:
        response = errors.error_response(403, "ForbiddenException", str(err))
    except web.HTTPException as err:
        if err.status < 400:
            raise
        message = "request body is too large" if err.status == 413 else err.reason
        headers = {"Allow": err.headers["Allow"]} if "Allow" in err.headers else None
        response = errors.error_response(err.status, errors.http_error_type(err.status), message, headers)
    except Exception as err:
        mapped = errors.lookup(err)
        if mapped is None:
            log.exception("unhandled error in %s %s (request %s)", request.method, request.path, request_id)
            response = errors.error_response(
                500, "ServerErrorException", f"internal error; request id {request_id}"
            )
        else:
            status, error_type = mapped
            if status >= 500:
                log.warning("%s %s failed: %s (request %s)", request.method, request.path, err, request_id)
            response = errors.error_response(status, error_type, str(err))
    response.headers[REQUEST_ID_HEADER] = request_id
    access_log.info(
        "%s %s %d %.1fms rid=%s",
        request.method,
        request.rel_url.raw_path,
        response.status,
        (time.perf_counter() - started) * 1000,
        request_id,
    )
    return response


MIDDLEWARES = (
    request_id_and_errors,
    pipeline.limit_by_address,
    pipeline.authenticate,
    pipeline.authorize,
)
