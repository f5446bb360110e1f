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

The console's Audit trail page (`routes.console_audit`) reads the log with this endpoint's own
functions: `audit_ask` (a query, parsed and bounded) and `audit_answer` (the body answered).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson
from aiohttp import web
from multidict import MultiMapping

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


def _text(query: MultiMapping[str], name: str) -> str | None:
    value = http.one_value(query, name)
    if value is not None and not 1 <= len(value) <= MAX_FILTER_CHARS:
        raise InvalidRequestError(f"{name} must be 1-{MAX_FILTER_CHARS} characters")
    return value


def _choice(query: MultiMapping[str], name: str, allowed: list[str]) -> str | None:
    value = http.one_value(query, name)
    if value is not None and value not in allowed:
        raise InvalidRequestError(f"{name} must be one of {', '.join(allowed)}")
    return value


def _moment(query: MultiMapping[str], name: str) -> str | None:
    value = http.one_value(query, name)
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


def _bounded_int(query: MultiMapping[str], name: str, default: int, lowest: int, highest: int) -> int:
    raw = http.one_value(query, name)
    if raw is None:
        return default
    if not raw.isdigit() or not lowest <= int(raw) <= highest:
        raise InvalidRequestError(f"{name} must be an integer from {lowest} to {highest}")
    return int(raw)


def _filter(query: MultiMapping[str], caller: Principal | None) -> AuditFilter:
    """The filter `query` asks for. Raises InvalidRequestError."""
    resource, prefix = _text(query, "resource"), _text(query, "resource_prefix")
    if resource is not None and prefix is not None:
        raise InvalidRequestError("give resource or resource_prefix, not both")
    since, until = _moment(query, "since"), _moment(query, "until")
    if since is not None and until is not None and since > until:
        raise InvalidRequestError("since is after until")
    own = caller.id if caller is not None and not http.one_flag(query, "include_own_reads") else None
    return AuditFilter(
        principal=_text(query, "principal"),
        action=_text(query, "action"),
        resource=resource,
        resource_prefix=prefix,
        decision=_choice(query, "decision", [ruling.value for ruling in Ruling]),
        event=_choice(query, "event", [kind.value for kind in EventKind]),
        since=since,
        until=until,
        hide_reads_of=own,
    )


@dataclass(frozen=True, slots=True)
class AuditAsk:
    """One read of the audit log, as its query parameters ask it (see the module docstring):
    the filter, the page size, the sealed `pageToken` or `after` token (at most one), and how long
    to wait for a record to follow (`after` only)."""

    query: AuditFilter
    page_size: int
    page_token: str | None
    after: str | None
    wait: int


def audit_ask(request: web.Request, query: MultiMapping[str]) -> AuditAsk:
    """The read `query` asks for, by the request's principal (whose own reads it leaves out).
    Raises InvalidRequestError for any parameter out of its bounds or repeated."""
    ask = AuditAsk(
        query=_filter(query, request.get(PRINCIPAL)),
        page_size=_bounded_int(query, "pageSize", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE),
        page_token=http.one_value(query, "pageToken"),
        after=http.one_value(query, "after"),
        wait=_bounded_int(query, "wait", 0, 0, MAX_WAIT_SECONDS),
    )
    if ask.page_token is not None and ask.after is not None:
        raise InvalidRequestError("give pageToken or after, not both")
    if http.one_value(query, "wait") is not None and ask.after is None:
        raise InvalidRequestError("wait needs after (a follow-token)")
    return ask


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


async def _open(request: web.Request, destination: str, token: str | None, name: str) -> Position | None:
    """The position `token` (query parameter `name`) names (None: not given). Raises
    InvalidRequestError for a token this caller was not given for this audit file."""
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


async def audit_answer(request: web.Request, ask: AuditAsk) -> dict[str, Any]:
    """The body `GET /admin/v1/audit` answers `ask` with: `records` (as written, with `explain`
    and `explain_groups_from`), `next-page-token` and `follow-token`. Waits up to `ask.wait`
    seconds for a record to follow. Raises AuditNotReadableError (stdout), InvalidRequestError
    (a token not given to this caller for this file), OSError, StorageUnavailableError."""
    destination = services(request).settings.audit.destination
    check_readable(destination)
    before = await _open(request, destination, ask.page_token, "pageToken")
    after = await _open(request, destination, ask.after, "after")
    await security(request).audit.aflush()  # this worker's queued records are in the file
    if after is None:
        page = await asyncio.to_thread(newest, destination, ask.query, before, ask.page_size)
    else:
        page = await _follow(destination, ask.query, after, ask.page_size, ask.wait)
    older = None if page.older is None else await _seal(request, destination, page.older)
    groups = await find_groups(request, page.records)
    return {
        "records": [_answered(record, groups) for record in page.records],
        "next-page-token": older,
        "follow-token": await _seal(request, destination, page.newer),
    }


async def read_audit_log(request: web.Request) -> web.Response:
    check_readable(services(request).settings.audit.destination)
    body = await audit_answer(request, audit_ask(request, request.query))
    return web.Response(body=orjson.dumps(body), content_type="application/json")


ROUTES = [Route("GET", PATH, read_audit_log, "readAuditLog", advertised=False)]
