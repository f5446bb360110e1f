"""`GET /admin/v1/audit`: the audit log, filtered, a page at a time, and followed as it is written.

Cedar decides the operation `readAuditLog` on the catalog before the handler runs (the bundled
policies allow it to `admins` and `audit-readers`). The handler reads this gateway's audit file
(`gateway.audit_query`); a gateway writing its audit log to stdout answers 501
NotImplementedException naming `audit.destination`.

    GET /admin/v1/audit?principal=key:analyst&decision=deny          newest first
        -> {"records": [...], "next-page-token": T1 | null, "follow-token": F1}
    GET /admin/v1/audit?...&pageToken=T1                             the page before it
    GET /admin/v1/audit?...&after=F1&wait=20                         written after F1, oldest
        -> {"records": [...], "next-page-token": null, "follow-token": F2}   first; waits up to
                                                                            20 s for one

Filters (each optional, exact): `principal`, `action`, `resource` (a Cedar uid as records write
it) or `resource_prefix`, `decision` (allow | deny), `event` (decision | mutation | auth_failure
| throttled), `since` and `until` (RFC 3339 with a time zone; both included). `pageSize` 1 to
`MAX_PAGE_SIZE` (default 100). A page may hold fewer records than `pageSize` when the read budget
ran out; only a null `next-page-token` means nothing older is left.

Every record is answered as written, plus `explain`: for a decision record, the body of
`POST /admin/v1/explain` that decides it again (`gateway.audit_explain`), else null, and
`explain_groups_from`. The records of the caller's own allowed `readAuditLog` requests (each is
audited like every admin operation: a decision and an outcome) are left out unless
`include_own_reads=true`, so a follower does not wake itself up.

Tokens are sealed like the catalog's page tokens (`catalog.page_tokens`, the deployment's page
key): opaque, authenticated, bound to the caller, this host and the audit file's path; any other
token is a 400. Before reading, the records this worker has queued are written, so a request the
caller just made is found; other workers write theirs within milliseconds.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

import orjson
from aiohttp import web

from cedarberg.catalog import page_tokens
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.page_tokens import Listing
from cedarberg.gateway.audit import EventKind, Ruling
from cedarberg.gateway.audit_explain import explain_body
from cedarberg.gateway.audit_query import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MAX_WAIT_SECONDS,
    AuditFilter,
    AuditPage,
    check_readable,
    destination_state,
    following,
    newest,
    record_time,
)
from cedarberg.gateway.audit_stream import Position
from cedarberg.gateway.authn.principal import DELEGATED_NAMESPACE, KEY_NAMESPACE, Principal
from cedarberg.gateway.web import http
from cedarberg.gateway.web.caller import caller_of
from cedarberg.gateway.web.keys import PRINCIPAL, security, services
from cedarberg.gateway.web.review_sources import active_keys
from cedarberg.gateway.web.route import Route

PATH = "/admin/v1/audit"
MAX_FILTER_CHARS: Final = 2048  # audit records cut their strings there: a longer value never matches
_POLL_SECONDS: Final = 0.2
_LISTED: Final = "audit"  # what a token lists (`page_tokens.Listing.what`)


def _text(request: web.Request, name: str) -> str | None:
    value = http.query_value(request, name)
    if value is not None and not 1 <= len(value) <= MAX_FILTER_CHARS:
        raise InvalidRequestError(f"{name} must be 1-{MAX_FILTER_CHARS} characters")
    return value


def _choice(request: web.Request, name: str, allowed: list[str]) -> str | None:
    value = http.query_value(request, name)
    if value is not None and value not in allowed:
        raise InvalidRequestError(f"{name} must be one of {', '.join(allowed)}")
    return value


def _moment(request: web.Request, name: str) -> str | None:
    value = http.query_value(request, name)
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value) if len(value) <= 64 else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidRequestError(
            f"{name} must be an RFC 3339 date-time with a time zone, e.g. 2026-11-27T09:00:00Z"
        )
    return record_time(moment)


def _bounded_int(request: web.Request, name: str, default: int, lowest: int, highest: int) -> int:
    raw = http.query_value(request, name)
    if raw is None:
        return default
    if not raw.isdigit() or not lowest <= int(raw) <= highest:
        raise InvalidRequestError(f"{name} must be an integer from {lowest} to {highest}")
    return int(raw)


def _query(request: web.Request) -> AuditFilter:
    """The filter the query string asks for. Raises InvalidRequestError."""
    resource, prefix = _text(request, "resource"), _text(request, "resource_prefix")
    if resource is not None and prefix is not None:
        raise InvalidRequestError("give resource or resource_prefix, not both")
    since, until = _moment(request, "since"), _moment(request, "until")
    if since is not None and until is not None and since > until:
        raise InvalidRequestError("since is after until")
    principal = request[PRINCIPAL]
    own = (
        principal.id
        if isinstance(principal, Principal) and not http.flag(request, "include_own_reads")
        else None
    )
    return AuditFilter(
        principal=_text(request, "principal"),
        action=_text(request, "action"),
        resource=resource,
        resource_prefix=prefix,
        decision=_choice(request, "decision", [ruling.value for ruling in Ruling]),
        event=_choice(request, "event", [kind.value for kind in EventKind]),
        since=since,
        until=until,
        hide_reads_of=own,
    )


# -- tokens ------------------------------------------------------------------------------------


def _listing(request: web.Request, destination: str) -> Listing:
    # Bound to this host and file: another instance's file is another stream.
    stream = orjson.dumps([socket.gethostname(), destination]).decode()
    return Listing("", _LISTED, stream, caller_of(request))


async def _seal(request: web.Request, destination: str, position: Position) -> str:
    key = await services(request).ctx.page_key()
    place = orjson.dumps(
        [position.device, position.inode, position.head, position.offset, position.mtime_ns]
    ).decode()
    return page_tokens.seal(key, _listing(request, destination), place)


async def _open(request: web.Request, destination: str, name: str) -> Position | None:
    """The position the token in query parameter `name` names (None: not given). Raises
    InvalidRequestError for a token this caller was not given for this audit file."""
    token = http.query_value(request, name)
    if token is None:
        return None
    key = await services(request).ctx.page_key()
    try:
        place = orjson.loads(page_tokens.open_token(key, _listing(request, destination), token))
    except InvalidRequestError:
        raise InvalidRequestError(f"invalid {name}") from None
    return Position(*place)  # sealed by us: the layout holds


# -- the groups explain bodies name ---------------------------------------------------------------
#
# The groups an audited principal has now, where the gateway itself knows them (as the access
# review finds them, `review_sources`): a `key:` principal's active API keys when they all agree
# (`api-key`), a `user:` principal's entry in the user directory (`directory`), the configured
# anonymous principal (`anonymous`). An OIDC subject's groups came with its token and are known
# nowhere else. At most `MAX_LOOKUPS` principals are looked up per answer (the others get none),
# so one page costs a bounded number of queries.

MAX_LOOKUPS: Final = 32

_Found = dict[str, tuple[list[str], str]]


def _wanted(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Principals of decision records that do not state their groups, in order, once each."""
    wanted: dict[str, None] = {}
    for record in records:
        principal = record.get("principal")
        if record.get("event") == "decision" and "groups" not in record and isinstance(principal, str):
            wanted.setdefault(principal)
    return list(wanted)


async def find_groups(request: web.Request, records: Iterable[Mapping[str, Any]]) -> _Found:
    """Principal id -> (its groups now, where they come from), for the principals of `records`
    the gateway knows. Raises StorageUnavailableError (the key store or directory)."""
    guard = security(request)
    found: _Found = {}
    for principal in _wanted(records)[:MAX_LOOKUPS]:
        if principal.startswith(KEY_NAMESPACE):
            keys, _ = await active_keys(guard.api_keys, principal.removeprefix(KEY_NAMESPACE))
            shapes = {tuple(sorted(record.groups)) for record in keys}
            if len(shapes) == 1:
                found[principal] = (list(shapes.pop()), "api-key")
        elif principal.startswith(DELEGATED_NAMESPACE):
            user = await guard.directory.get(principal.removeprefix(DELEGATED_NAMESPACE))
            if user is not None:
                found[principal] = (list(user.groups), "directory")
        elif guard.anonymous is not None and principal == guard.anonymous.id:
            found[principal] = (sorted(guard.anonymous.groups), "anonymous")
    return found


# -- the handler -------------------------------------------------------------------------------


def _answered(record: dict[str, Any], groups: dict[str, tuple[list[str], str]]) -> dict[str, Any]:
    """`record` as written, with the explain body that decides it again and where that body's
    groups come from (`record`, `api-key`, `directory`, `anonymous`; `none`: it has none)."""
    known, source = groups.get(record.get("principal") or "", (None, "none"))
    if "groups" in record:
        known, source = None, "record"
    explain = explain_body(record, known)
    return {**record, "explain": explain, "explain_groups_from": None if explain is None else source}


async def _follow(destination: str, query: AuditFilter, after: Position, size: int, wait: int) -> AuditPage:
    """Records written after `after`; with none yet, look again whenever the audit file changed,
    for up to `wait` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    state = destination_state(destination)
    page = await asyncio.to_thread(following, destination, query, after, size)
    while not page.records and loop.time() < deadline:
        await asyncio.sleep(min(_POLL_SECONDS, max(0.0, deadline - loop.time())))
        now = destination_state(destination)  # one stat: the poll costs nothing while idle
        if now != state:
            state = now
            page = await asyncio.to_thread(following, destination, query, page.newer, size)
    return page


async def read_audit_log(request: web.Request) -> web.Response:
    destination = services(request).settings.audit.destination
    check_readable(destination)
    query = _query(request)
    size = _bounded_int(request, "pageSize", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
    wait_given = http.query_value(request, "wait") is not None
    wait = _bounded_int(request, "wait", 0, 0, MAX_WAIT_SECONDS)
    before = await _open(request, destination, "pageToken")
    after = await _open(request, destination, "after")
    if before is not None and after is not None:
        raise InvalidRequestError("give pageToken or after, not both")
    if wait_given and after is None:
        raise InvalidRequestError("wait needs after (a follow-token)")
    await security(request).audit.aflush()  # this worker's queued records are in the file
    if after is None:
        page = await asyncio.to_thread(newest, destination, query, before, size)
    else:
        page = await _follow(destination, query, after, size, wait)
    older = None if page.older is None else await _seal(request, destination, page.older)
    groups = await find_groups(request, page.records)
    body: dict[str, Any] = {
        "records": [_answered(record, groups) for record in page.records],
        "next-page-token": older,
        "follow-token": await _seal(request, destination, page.newer),
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


ROUTES = [Route("GET", PATH, read_audit_log, "readAuditLog", advertised=False)]
