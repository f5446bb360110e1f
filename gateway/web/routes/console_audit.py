"""The console's Audit trail page: the audit log as `GET /admin/v1/audit` answers it, filtered,
newest first, a page at a time, and followed as it is written.

    GET /console/audit?principal=key:rita&decision=deny        newest first        (readAuditLog)
    GET /console/audit?...&pageToken=T                         the page before it  ("Older")
    GET /console/audit?...&after=F                             written since F     ("Newer", no script)
    GET /console/audit/follow?...&after=F&wait=25              JSON: the rows written since F,
                                                               for the page's script (audit.js)

Both routes are the operation `readAuditLog` for the pipeline, the endpoint's own action: the page
is allowed exactly to whom `GET /admin/v1/audit` is (admins and `audit-readers` by default) and
audited as that principal's. Both read the log with the endpoint's own functions
(`audit_trail.audit_ask`, `audit_trail.audit_answer`: the same filters, bounds, sealed tokens and
records, the caller's own reads left out), so the page and the API cannot disagree. The form's
fields are the endpoint's query parameters; what a browser's form adds is undone first: its empty
fields are left out and its date-times (which carry no time zone) are read as UTC.

Each decision record links to Explain with the fields of the `explain` body the endpoint attaches
to it (`explain_url`), when the principal may explain decisions.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlencode

import orjson
from aiohttp import web
from multidict import MultiDict, MultiMapping

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.gateway.audit import EventKind, Ruling
from cedarberg.gateway.authz.entities import catalog_resource
from cedarberg.gateway.web.console import decisions
from cedarberg.gateway.web.console.layout import page
from cedarberg.gateway.web.console.pages import (
    CONTENT_SECURITY_POLICY,
    NO_STORE,
    SECURITY_HEADERS,
    render_text,
)
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.audit_trail import AuditAsk, audit_answer, audit_ask

AUDIT: Final = "/console/audit"
FOLLOW: Final = AUDIT + "/follow"
EXPLAIN: Final = "/console/explain"
# The form's filters: the endpoint's query parameters of the same names.
FILTERS: Final = ("principal", "action", "resource", "resource_prefix", "decision", "event", "since", "until")
_MOMENTS: Final = ("since", "until")
DEFAULT_LINES: Final = 50  # a page of the console (the API's default, 100, is long to read)
# The most lines the page's script keeps: followed lines beyond it push the oldest out.
KEEP_LINES: Final = 500
# How long the script's follow request waits for a line (within the endpoint's MAX_WAIT_SECONDS).
FOLLOW_WAIT_SECONDS: Final = 25
# The page's script fetches its follow route: this page alone may connect, to the gateway only.
PAGE_CSP: Final = CONTENT_SECURITY_POLICY + "; connect-src 'self'"
_EXPLAINED: Final = ("principal", "kind", "auth_method", "client_address", "groups", "action")


def _utc(value: str) -> str:
    """A form's date-time (no time zone) as UTC; anything else as given (the endpoint judges it)."""
    try:
        moment = datetime.fromisoformat(value) if len(value) <= 64 else None
    except ValueError:
        return value
    if moment is None or moment.tzinfo is not None:
        return value
    return moment.replace(tzinfo=UTC).isoformat()


def endpoint_query(query: MultiMapping[str]) -> MultiDict[str]:
    """The console form's query as the endpoint reads it: empty fields left out (a form sends
    them), `since`/`until` without a time zone read as UTC. Repeated parameters stay repeated, so
    the endpoint refuses them as it refuses them from anyone."""
    kept: MultiDict[str] = MultiDict()
    for name, value in query.items():
        if value != "":
            kept.add(name, _utc(value) if name in _MOMENTS else value)
    return kept


def _shown_moment(value: str) -> str:
    """A date-time as the form's input shows it (UTC, to the second, no zone)."""
    try:
        moment = datetime.fromisoformat(value) if len(value) <= 64 else None
    except ValueError:
        return value
    if moment is None:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="seconds")


def _fields(query: MultiMapping[str]) -> dict[str, str]:
    """The filters as the form shows them (and as the page's links carry them); "" when unset."""
    shown = {name: query.get(name, "") for name in FILTERS}
    for name in _MOMENTS:
        if shown[name]:
            shown[name] = _shown_moment(shown[name])
    return shown


def _link(path: str, fields: dict[str, str], page_size: int, **more: str) -> str:
    pairs = [(name, value) for name, value in fields.items() if value]
    if page_size != DEFAULT_LINES:
        pairs.append(("pageSize", str(page_size)))
    pairs += list(more.items())
    return f"{path}?{urlencode(pairs)}" if pairs else path


def explain_url(record: dict[str, Any]) -> str | None:
    """The Explain page's address for a decision record as `GET /admin/v1/audit` answers it:
    its `explain` body's principal, kind, auth_method, client_address, groups (comma-separated)
    and action, and the record's resource as written (a Cedar uid). None when the record has no
    explain body (not a decision of a Cedar action)."""
    body = record.get("explain")
    resource = record.get("resource")
    if not isinstance(body, dict) or not isinstance(resource, str):
        return None
    pairs: list[tuple[str, str]] = []
    for name in _EXPLAINED:
        value = body.get(name)
        if name == "groups" and isinstance(value, list):
            value = ",".join(str(group) for group in value)
        if isinstance(value, str) and value:
            pairs.append((name, value))
    pairs.append(("resource", resource))
    return f"{EXPLAIN}?{urlencode(pairs)}"


def _text(record: dict[str, Any], name: str) -> str:
    value = record.get(name)
    return "" if value is None else str(value)


def _row(record: dict[str, Any], may_explain: bool) -> dict[str, Any]:
    # A mutation's record carries its decision too: what it shows is how the change ended.
    ruling = record.get("outcome") or record.get("decision")
    return {
        "time": _text(record, "time"),
        "event": _text(record, "event"),
        "principal": _text(record, "principal"),
        "action": _text(record, "action"),
        "resource": _text(record, "resource"),
        "ruling": "" if ruling is None else str(ruling),
        "status": _text(record, "status"),
        "request_id": _text(record, "request_id"),
        "explain": explain_url(record) if may_explain else None,
    }


def _rows(request: web.Request, ask: AuditAsk, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as the page's rows, newest first (a followed page comes oldest first)."""
    may_explain = decisions.would_allow(request, "explainDecision", catalog_resource())
    ordered = records[::-1] if ask.after is not None else records
    return [_row(record, may_explain) for record in ordered]


def _page_query(request: web.Request) -> MultiDict[str]:
    query = endpoint_query(request.query)
    query.popall("wait", None)  # the page never waits: following is the script's
    query.setdefault("pageSize", str(DEFAULT_LINES))
    return query


def _page_size(query: MultiMapping[str]) -> int:
    raw = query.get("pageSize", "")
    return int(raw) if raw.isdigit() else DEFAULT_LINES


async def audit_page(request: web.Request) -> web.Response:
    """The audit trail (the pipeline decided readAuditLog). A filter the endpoint refuses is shown
    on the page with the form, answered 400."""
    query = _page_query(request)
    fields = _fields(query)
    size = _page_size(query)
    context: dict[str, Any] = {
        "section": "Audit trail",
        "fields": fields,
        "page_size": size,
        "decisions": [ruling.value for ruling in Ruling],
        "events": [kind.value for kind in EventKind],
        "newest_url": _link(AUDIT, fields, size),
        "rows": [],
        "error": None,
        "following": False,
        "older_url": None,
        "newer_url": None,
        "follow_url": None,
        "follow_token": "",
        "keep": KEEP_LINES,
        "wait": FOLLOW_WAIT_SECONDS,
    }
    try:
        ask = audit_ask(request, query)
        answer = await audit_answer(request, ask)
    except InvalidRequestError as err:
        return page(request, "audit.html", {**context, "error": str(err)}, status=400)
    token = answer["follow-token"]
    older = answer["next-page-token"]
    context.update(
        rows=_rows(request, ask, answer["records"]),
        following=ask.after is not None,
        older_url=None if older is None else _link(AUDIT, fields, size, pageToken=older),
        newer_url=_link(AUDIT, fields, size, after=token),
        follow_url=_link(FOLLOW, fields, size),
        follow_token=token,
    )
    response = page(request, "audit.html", context)
    response.headers["Content-Security-Policy"] = PAGE_CSP
    return response


async def follow(request: web.Request) -> web.Response:
    """The rows written after `after`, newest first, as HTML for the page's script to insert, and
    the token to follow on with: ``{"html", "count", "follow-token"}``. Waits up to `wait`
    seconds (the endpoint's bound) for one. Raises InvalidRequestError (400) without `after`."""
    ask = audit_ask(request, endpoint_query(request.query))
    if ask.after is None:
        raise InvalidRequestError("following needs after (a follow-token)")
    answer = await audit_answer(request, ask)
    rows = _rows(request, ask, answer["records"])
    body = {
        "html": render_text("audit_rows.html", {"rows": rows}),
        "count": len(rows),
        "follow-token": answer["follow-token"],
    }
    response = web.Response(body=orjson.dumps(body), content_type="application/json")
    response.headers.update(SECURITY_HEADERS)
    response.headers.update(NO_STORE)
    return response


ROUTES = [
    Route("GET", AUDIT, audit_page, "readAuditLog", advertised=False, session=True),
    Route("GET", FOLLOW, follow, "readAuditLog", advertised=False, session=True),
]
