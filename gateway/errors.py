"""The one table from errors to HTTP status and Iceberg exception name, and the ErrorModel body.

Lookup walks the exception's class hierarchy, so a new subclass inherits its parent's mapping.
Anything not in the table is a 500 that names only the request id: no internals leave the process.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from catalog import errors as catalog_errors

ERROR_TABLE: dict[type[BaseException], tuple[int, str]] = {
    catalog_errors.InvalidRequestError: (400, "BadRequestException"),
    catalog_errors.LocationNotAllowedError: (400, "BadRequestException"),
    catalog_errors.DocumentTooLargeError: (413, "RequestTooLargeException"),
    catalog_errors.UnprocessableError: (422, "UnprocessableEntityException"),
    catalog_errors.NotFoundError: (404, "NotFoundException"),
    catalog_errors.NoSuchWarehouseError: (404, "NoSuchWarehouseException"),
    catalog_errors.NoSuchNamespaceError: (404, "NoSuchNamespaceException"),
    catalog_errors.NoSuchTableError: (404, "NoSuchTableException"),
    catalog_errors.NoSuchViewError: (404, "NoSuchViewException"),
    catalog_errors.NoSuchPlanIdError: (404, "NoSuchPlanIdException"),
    catalog_errors.NoSuchPlanTaskError: (404, "NoSuchPlanTaskException"),
    catalog_errors.ForbiddenError: (403, "ForbiddenException"),
    catalog_errors.ConflictError: (409, "AlreadyExistsException"),
    catalog_errors.AlreadyExistsError: (409, "AlreadyExistsException"),
    catalog_errors.NamespaceNotEmptyError: (409, "NamespaceNotEmptyException"),
    catalog_errors.CommitFailedError: (409, "CommitFailedException"),
    catalog_errors.IdempotencyKeyReusedError: (422, "UnprocessableEntityException"),
    catalog_errors.CommitStateUnknownError: (500, "CommitStateUnknownException"),
    catalog_errors.StorageUnavailableError: (503, "ServiceUnavailableException"),
    catalog_errors.KeyServiceUnavailableError: (503, "ServiceUnavailableException"),
    catalog_errors.BusyError: (503, "ServiceUnavailableException"),
    catalog_errors.IntegrityCheckError: (500, "ServiceFailureException"),
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


def lookup(error: BaseException) -> tuple[int, str] | None:
    for cls in type(error).__mro__:
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]
    return None


def error_response(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = orjson.dumps({"error": {"message": message, "type": error_type, "code": status}})
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def http_error_type(status: int) -> str:
    return _HTTP_TYPES.get(status, "BadRequestException" if status < 500 else "ServerErrorException")
