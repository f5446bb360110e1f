"""Small HTTP helpers shared by the route modules."""

from __future__ import annotations

from typing import Any, TypeVar, overload

import orjson
from aiohttp import web
from multidict import MultiMapping
from pydantic import BaseModel, ValidationError

from cedarberg.catalog import json_nesting, requests
from cedarberg.catalog.errors import DocumentTooLargeError, InvalidRequestError
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.gateway.web import body_errors, strict_json
from cedarberg.gateway.web.keys import PARSED_BODY, services

JSON = "application/json"
M = TypeVar("M", bound=BaseModel)


def json_response(body: bytes | None, headers: dict[str, str] | None = None) -> web.Response:
    """200 with a JSON body, or 204 when there is none."""
    if body is None:
        return web.Response(status=204, headers=headers)
    return web.Response(body=body, content_type=JSON, headers=headers)


async def json_body(request: web.Request) -> Any:
    """The decoded JSON body. Raises InvalidRequestError for a missing or malformed body, or one
    with a repeated object key (`strict_json`), or one nested deeper than the `max_body_depth`
    setting (checked on the bytes, before any parser recurses into it)."""
    raw = await request.read()
    if not raw:
        raise InvalidRequestError("request body is required")
    json_nesting.check_depth(raw, services(request).settings.max_body_depth)
    return strict_json.loads(raw)


async def json_object(request: web.Request, max_bytes: int) -> dict[str, Any]:
    """A small body (the admin API's) as a JSON object, read as `json_body` reads one. Raises
    HTTPRequestEntityTooLarge past `max_bytes`, InvalidRequestError as `json_body` does or when the
    document is not an object."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise web.HTTPRequestEntityTooLarge(max_bytes, request.content_length)
    size = len(await request.read())  # read() keeps the bytes: json_body reads the same ones
    if size > max_bytes:
        raise web.HTTPRequestEntityTooLarge(max_bytes, size)
    document = await json_body(request)
    if not isinstance(document, dict):
        raise InvalidRequestError("request body must be a JSON object")
    return document


def validate(model: type[M], document: dict[str, Any]) -> M:
    """`document` as `model`. Raises InvalidRequestError naming the first invalid field's path and
    what was expected there, in the caller's terms (`body_errors`: no Python class names)."""
    try:
        return model.model_validate(document)
    except ValidationError as err:
        raise InvalidRequestError(body_errors.describe(model, err)) from None


async def parse_body(request: web.Request, model: type[M], max_bytes: int | None = None) -> M:
    """Parse the body into `model` once (the pipeline does, before authorization); later calls
    return the same object. Raises InvalidRequestError for a missing, malformed or invalid body,
    DocumentTooLargeError for one over `max_bytes`."""
    parsed = request.get(PARSED_BODY)
    if isinstance(parsed, model):
        return parsed
    if max_bytes is not None and len(await request.read()) > max_bytes:
        raise DocumentTooLargeError(f"request body is larger than {max_bytes} bytes")
    body = requests.parse(model, await json_body(request))
    stored: BaseModel = body  # the key holds any route's body model
    request[PARSED_BODY] = stored
    return body


def parsed_body(request: web.Request, model: type[M]) -> M:
    """The body the pipeline parsed into `model` before authorizing the request."""
    parsed = request.get(PARSED_BODY)
    if not isinstance(parsed, model):
        raise TypeError(f"the route of {request.path} does not declare a {model.__name__} body")
    return parsed


def prefix(request: web.Request) -> str | None:
    """The warehouse named by the path prefix, or None for the un-prefixed routes."""
    return request.match_info.get("prefix")


def namespace(request: web.Request) -> Namespace:
    return Namespace.parse(request.match_info["namespace"])


def table(request: web.Request) -> Identifier:
    return Identifier.of(namespace(request), request.match_info["table"])


def view(request: web.Request) -> Identifier:
    return Identifier.of(namespace(request), request.match_info["view"])


def idempotency_key(request: web.Request) -> str | None:
    return request.headers.get("Idempotency-Key")


def operation_fingerprint(request: web.Request) -> str:
    """What an Idempotency-Key is bound to: the method and the decoded path."""
    return f"{request.method} {request.path}"[:512]


async def request_fingerprint(request: web.Request) -> bytes:
    """The request as an idempotency record is bound to it: method, decoded path, query parameters
    (sorted) and the body's bytes. A retry sends the same bytes; anything else is another request."""
    head = orjson.dumps([request.method, request.path, sorted(request.query.items())])
    return head + b"\n" + await request.read()


@overload
def query_value(request: web.Request, name: str) -> str | None: ...
@overload
def query_value(request: web.Request, name: str, default: str) -> str: ...
def query_value(request: web.Request, name: str, default: str | None = None) -> str | None:
    """The one value of query parameter `name`, or `default` when it is absent. Every parameter the
    gateway interprets is read here. Raises InvalidRequestError when it is repeated: aiohttp's
    `get` reads the first of them, a proxy, cache or engine may read the last, and the gateway
    would decide on one and answer (or be read by another party) on the other."""
    found = one_value(request.query, name)
    return default if found is None else found


def one_value(query: MultiMapping[str], name: str) -> str | None:
    """`query_value` on a query already taken apart (a console form normalised to what an
    endpoint reads). Raises InvalidRequestError when `name` is repeated."""
    values = query.getall(name, ())
    if len(values) > 1:
        raise InvalidRequestError(f"query parameter '{name}' is repeated")
    return values[0] if values else None


def flag(request: web.Request, name: str) -> bool:
    return one_flag(request.query, name)


def one_flag(query: MultiMapping[str], name: str) -> bool:
    """Query parameter `name` as true or false (absent: false). Raises InvalidRequestError."""
    value = (one_value(query, name) or "false").lower()
    if value not in ("true", "false"):
        raise InvalidRequestError(f"{name} must be true or false")
    return value == "true"
