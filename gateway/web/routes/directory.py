"""The user directory in the admin API: the people engines may act for, and their groups.

Authentication and Cedar run before these handlers (operations `listDirectoryUsers` ...
`deleteDirectoryUser` in `gateway.authz.operations`, admin actions on the catalog), so the
handlers only do the work (`gateway.authn.directory`).

    GET    /admin/v1/users            listDirectoryUsers  {"users": [...], "next-page-token"}
    GET    /admin/v1/users/{name}     getDirectoryUser    record, 404 if not listed
    PUT    /admin/v1/users/{name}     putDirectoryUser    {"groups": [...]} -> record (create or replace)
    DELETE /admin/v1/users/{name}     deleteDirectoryUser 204, 404 if not listed

A change takes effect at the user's next token exchange or refresh, on every gateway process.
Errors: InvalidRequestError 400 (a bad name, group or body), NotFoundError 404,
StorageUnavailableError 503.
"""

from __future__ import annotations

from urllib.parse import quote

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from cedarberg.catalog.errors import InvalidRequestError, NotFoundError
from cedarberg.gateway.authn.directory import MAX_GROUPS, DirectoryUser, InvalidDirectoryRequestError
from cedarberg.gateway.authn.subject_token import valid_user_name
from cedarberg.gateway.web import http
from cedarberg.gateway.web.keys import security
from cedarberg.gateway.web.route import Route

USERS = "/admin/v1/users"
USER = f"{USERS}/{{name}}"
MAX_BODY_BYTES = 32 * 1024
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


class PutUserRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    groups: list[str] = Field(max_length=MAX_GROUPS)


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _name(request: web.Request) -> str:
    name = request.match_info["name"]
    if not valid_user_name(name):
        raise NotFoundError("user is not in the directory")  # not even a user name: no lookup
    return name


async def _put_body(request: web.Request) -> PutUserRequest:
    return http.validate(PutUserRequest, await http.json_object(request, MAX_BODY_BYTES))


async def list_users(request: web.Request) -> web.Response:
    after = http.query_value(request, "pageToken") or None
    if after is not None and not valid_user_name(after):
        raise InvalidRequestError("invalid pageToken")
    raw = http.query_value(request, "pageSize")
    if raw is not None and (not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE_SIZE):
        raise InvalidRequestError(f"pageSize must be an integer from 1 to {MAX_PAGE_SIZE}")
    size = DEFAULT_PAGE_SIZE if raw is None else int(raw)
    page, next_token = await user_page(request, after, size)
    return _json({"users": [r.to_json() for r in page], "next-page-token": next_token})


async def user_page(
    request: web.Request, after: str | None, size: int
) -> tuple[list[DirectoryUser], str | None]:
    """One page of the directory (listDirectoryUsers, decided already) in name order after the
    name `after`, and the token of the next page (None on the last). Raises
    StorageUnavailableError. (The admin API and the console's Users page list users here.)"""
    # One more than a page tells whether another page follows.
    records = await security(request).directory.list(after=after, limit=size + 1)
    page = records[:size]
    return page, page[-1].name if len(records) > size else None


async def get_user(request: web.Request) -> web.Response:
    record = await security(request).directory.get(_name(request))
    if record is None:
        raise NotFoundError("user is not in the directory")
    return _json(record.to_json())


async def put_user(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    body = await _put_body(request)
    try:
        record = await security(request).directory.put(name, body.groups)
    except InvalidDirectoryRequestError as err:
        raise InvalidRequestError(str(err)) from None
    response = _json(record.to_json())
    response.headers["Location"] = f"{USERS}/{quote(name, safe='')}"
    return response


async def delete_user(request: web.Request) -> web.Response:
    if not await security(request).directory.delete(_name(request)):
        raise NotFoundError("user is not in the directory")
    return web.Response(status=204)


ROUTES = [
    Route("GET", USERS, list_users, "listDirectoryUsers", advertised=False),
    Route("GET", USER, get_user, "getDirectoryUser", advertised=False),
    Route("PUT", USER, put_user, "putDirectoryUser", advertised=False),
    Route("DELETE", USER, delete_user, "deleteDirectoryUser", advertised=False),
]
