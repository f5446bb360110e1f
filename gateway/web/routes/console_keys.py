"""The console's Keys page: API keys as the admin API shows them, and creating, rotating and
revoking them, each decided with the admin API's own action.

    GET  /console/keys                    the keys, a page at a time     (listApiKeys)
    GET  /console/keys/new                the create form                (listApiKeys; offered if
                                                                         createApiKey would be allowed)
    POST /console/keys                    create; the key shown once     (createApiKey, CSRF)
    GET  /console/keys/{key_id}           one key, rotate and revoke     (getApiKey)
    POST /console/keys/{key_id}/rotate    new secret, shown once         (rotateApiKey, CSRF)
    POST /console/keys/{key_id}/revoke    revoke, once confirmed         (revokeApiKey, CSRF)

The pipeline decides each route's operation on the resource the admin API's route names (the
catalog, or the key with its owner), so a page is allowed exactly to whom its endpoint is, and
audited as that principal's. The work is the admin API's: `admin.key_page`, `admin.create_key`,
and the key store's `rotate_key` / `revoke_key`.

A new or rotated key is in the body of the answer to its POST and nowhere else: not in a URL, a
redirect, the session, the log or the audit record (which names the key id); the page is
`no-store`, so going back or reloading cannot show it again. A form with bad input (an owner,
group, expiry or overlap the key store refuses) gets the form back with the message and 400.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final
from urllib.parse import quote, urlencode

from aiohttp import web

from cedarberg.catalog.errors import InvalidRequestError, NotFoundError
from cedarberg.gateway.authn.api_keys import (
    MAX_DESCRIPTION_LENGTH,
    MAX_NAME_LENGTH,
    ApiKeyRevokedError,
    InvalidApiKeyRequestError,
    NoSuchApiKeyError,
)
from cedarberg.gateway.authn.key_format import is_key_id
from cedarberg.gateway.authn.key_record import ApiKeyRecord
from cedarberg.gateway.authn.principal import PrincipalKind
from cedarberg.gateway.authz.entities import api_key_resource, catalog_resource
from cedarberg.gateway.web import http
from cedarberg.gateway.web.console import decisions
from cedarberg.gateway.web.console.engine_forms import engine_forms
from cedarberg.gateway.web.console.form_values import groups_of, sentence, utc_text
from cedarberg.gateway.web.console.layout import page
from cedarberg.gateway.web.console.pages import see_other
from cedarberg.gateway.web.console.session_auth import form_of
from cedarberg.gateway.web.keys import security, services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.admin import create_key, key_page
from cedarberg.gateway.web.routes.admin_requests import CreateKeyRequest

KEYS: Final = "/console/keys"
USERS: Final = "/console/users"
PAGE_SIZE: Final = 50
MAX_EXPIRY_DAYS: Final = 36_500  # as `cedarberg keys create --expires-in-days`
KINDS: Final = ("user", "service")


class FormProblem(ValueError):
    """A form field the page cannot take (the message says which and why)."""


def key_url(key_id: str) -> str:
    return f"{KEYS}/{quote(key_id, safe='')}"


def _state(record: ApiKeyRecord, now: datetime) -> str:
    if record.revoked_at is not None:
        return "revoked"
    return "expired" if record.is_expired(now) else "active"


def _rotation(record: ApiKeyRecord, now: datetime) -> str:
    if record.rotated_at is None:
        return "never rotated"
    if record.in_overlap(now):
        until = utc_text(record.previous_secret_until)
        return f"rotated {utc_text(record.rotated_at)}; the previous secret works until {until}"
    return f"rotated {utc_text(record.rotated_at)}"


def _row(record: ApiKeyRecord, now: datetime) -> dict[str, Any]:
    return {
        "id": record.key_id,
        "url": key_url(record.key_id),
        "principal": record.principal,
        "principal_id": record.principal_id,
        "kind": "person" if record.kind is PrincipalKind.USER else "service",
        "summary": record.summary,
        "groups": record.groups,
        "created": utc_text(record.created_at),
        "expires": utc_text(record.expires_at) or "never",
        "rotation": _rotation(record, now),
        "state": _state(record, now),
        "description": record.description,
    }


def _crumbs(*more: tuple[str, str]) -> list[tuple[str, str]]:
    return [("Keys", KEYS), *more]


async def keys(request: web.Request) -> web.Response:
    """A page of keys (of one owner if `principal` is given), with a link to the next page."""
    owner = http.query_value(request, "principal") or None
    if owner is not None and len(owner) > MAX_NAME_LENGTH:
        raise InvalidRequestError(f"principal must be 1-{MAX_NAME_LENGTH} characters")
    after = http.query_value(request, "after") or None
    if after is not None and not is_key_id(after):
        raise InvalidRequestError("invalid page: 'after' must be a key id")
    records, next_after = await key_page(request, owner, after, PAGE_SIZE)
    now = datetime.now(UTC)
    query = {"principal": owner} if owner is not None else {}
    catalog = catalog_resource()
    context = {
        "section": "Keys",
        "crumbs": _crumbs(),
        "keys": [_row(r, now) for r in records],
        "owner": owner or "",
        "next_url": None if next_after is None else f"{KEYS}?{urlencode({**query, 'after': next_after})}",
        "first_url": f"{KEYS}?{urlencode(query)}" if after is not None else None,
        "may_create": decisions.would_allow(request, "createApiKey", catalog),
        "users_url": USERS if decisions.would_allow(request, "listDirectoryUsers", catalog) else None,
    }
    return page(request, "keys.html", context)


def _new_form(request: web.Request, values: dict[str, str], problem: str | None, status: int) -> web.Response:
    context = {
        "section": "Keys",
        "crumbs": _crumbs(("New key", f"{KEYS}/new")),
        "values": values,
        "problem": problem,
        "may_create": decisions.would_allow(request, "createApiKey", catalog_resource()),
        "max_days": MAX_EXPIRY_DAYS,
        "max_name": MAX_NAME_LENGTH,
        "max_description": MAX_DESCRIPTION_LENGTH,
    }
    return page(request, "key_new.html", context, status)


async def new_key(request: web.Request) -> web.Response:
    return _new_form(request, {"kind": "user"}, None, 200)


def _expiry(text: str, now: datetime) -> datetime | None:
    days = text.strip()
    if not days:
        return None
    if not days.isdigit() or not 1 <= int(days) <= MAX_EXPIRY_DAYS:
        raise FormProblem(
            f"Expires in days must be a whole number from 1 to {MAX_EXPIRY_DAYS}, or empty for no expiry."
        )
    return now + timedelta(days=int(days))


def _shown(request: web.Request, record: ApiKeyRecord, key: str, what: str, status: int) -> web.Response:
    """The page that shows a new secret once, with the forms engines take it in."""
    svc, console = services(request), security(request).console
    url = console.origin if console is not None else f"https://{request.host}"
    context = {
        "section": "Keys",
        "crumbs": _crumbs((record.key_id, key_url(record.key_id))),
        "what": what,
        "key": key,
        "record": _row(record, datetime.now(UTC)),
        "forms": engine_forms(key, url, svc.ctx.default_warehouse),
        "warehouse": svc.ctx.default_warehouse,
    }
    return page(request, "key_shown.html", context, status)


async def create(request: web.Request) -> web.Response:
    """Create a key from the form (createApiKey, decided; the form's CSRF token checked)."""
    form = await form_of(request)
    fields = ("principal", "kind", "groups", "expires_in_days", "description")
    values = {name: form.get(name, "") for name in fields}
    try:
        body = _key_request(values, datetime.now(UTC))
        record, key = await create_key(request, body)
    except (FormProblem, InvalidRequestError) as problem:
        return _new_form(request, values, sentence(problem), 400)
    return _shown(request, record, key, "created", 201)


def _key_request(values: dict[str, str], now: datetime) -> CreateKeyRequest:
    """The admin API's create request for the form's values. Raises FormProblem,
    InvalidRequestError (what the admin API refuses in its body)."""
    if values["kind"] not in KINDS:
        raise FormProblem("Say whom the key is for: a person or a service.")
    expires_at = _expiry(values["expires_in_days"], now)
    document = {
        "principal": values["principal"],
        "kind": values["kind"],
        "groups": groups_of(values["groups"]),
        "expires_at": None if expires_at is None else expires_at.isoformat(),
        "description": values["description"],
    }
    return http.validate(CreateKeyRequest, document)


async def _record(request: web.Request) -> ApiKeyRecord:
    key_id = request.match_info["key_id"]
    if not is_key_id(key_id):
        raise NotFoundError("API key does not exist")  # not even a key id: no lookup
    try:
        return await security(request).api_keys.get_key(key_id)
    except NoSuchApiKeyError:
        raise NotFoundError("API key does not exist") from None


def _key_page(request: web.Request, record: ApiKeyRecord, problem: str | None, status: int) -> web.Response:
    resource = api_key_resource(record.key_id, record.principal_id)
    live = record.revoked_at is None
    context = {
        "section": "Keys",
        "crumbs": _crumbs((record.key_id, key_url(record.key_id))),
        "key": _row(record, datetime.now(UTC)),
        "problem": problem,
        "may_rotate": live and decisions.would_allow(request, "rotateApiKey", resource),
        "may_revoke": live and decisions.would_allow(request, "revokeApiKey", resource),
        "max_overlap": security(request).api_keys.settings.max_rotation_overlap_seconds,
    }
    return page(request, "key.html", context, status)


async def key(request: web.Request) -> web.Response:
    """One key (getApiKey, decided on the key and its owner), with its rotate and revoke forms."""
    return _key_page(request, await _record(request), None, 200)


async def rotate(request: web.Request) -> web.Response:
    """A new secret for the key (rotateApiKey), the old one kept for the overlap asked for."""
    record = await _record(request)
    form = await form_of(request)
    overlap = form.get("overlap_seconds", "0").strip() or "0"
    if not overlap.isdigit():
        return _key_page(request, record, "The overlap must be a whole number of seconds.", 400)
    try:
        rotated, secret = await security(request).api_keys.rotate_key(record.key_id, int(overlap))
    except InvalidApiKeyRequestError as problem:
        return _key_page(request, record, sentence(problem), 400)
    except ApiKeyRevokedError:
        return _key_page(request, record, "This key is revoked: a revoked key cannot be rotated.", 409)
    return _shown(request, rotated, secret, "rotated", 200)


async def revoke(request: web.Request) -> web.Response:
    """Revoke the key (revokeApiKey), once the form's confirmation box is ticked."""
    record = await _record(request)
    form = await form_of(request)
    if form.get("confirm") != "yes":
        problem = "Tick the box to confirm: revoking cannot be undone, and every client using the key stops."
        return _key_page(request, record, problem, 400)
    await security(request).api_keys.revoke_key(record.key_id)
    return see_other(key_url(record.key_id))


_KEY = KEYS + "/{key_id}"
ROUTES = [
    Route("GET", KEYS, keys, "listApiKeys", advertised=False, session=True),
    Route("GET", KEYS + "/new", new_key, "listApiKeys", advertised=False, session=True),
    Route("POST", KEYS, create, "createApiKey", advertised=False, session=True),
    Route("GET", _KEY, key, "getApiKey", advertised=False, session=True),
    Route("POST", _KEY + "/rotate", rotate, "rotateApiKey", advertised=False, session=True),
    Route("POST", _KEY + "/revoke", revoke, "revokeApiKey", advertised=False, session=True),
]
