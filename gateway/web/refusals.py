"""The pipeline's 401 and 429 answers, counted into the audit log (`gateway.audit_refusals`).

`gateway.web.middlewares.run` calls `note` for every answer whose status is in `AUDITED`, on every
route (the token endpoint's `invalid_client` and a replayed read's throttling included). Why the
pipeline refused is one of its fixed reasons (`keys.REFUSAL`); the API key id a failed
authentication presented is taken from the credential's public part only.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote_plus

from aiohttp import web

from cedarberg.gateway.audit import EventKind
from cedarberg.gateway.audit_refusals import Source
from cedarberg.gateway.authn.key_format import ID_LENGTH, PREFIX, is_key_id
from cedarberg.gateway.web.keys import PRINCIPAL, REFUSAL, request_id_of

if TYPE_CHECKING:
    from cedarberg.gateway.web.security import Security

AUDITED = frozenset({401, 429})
_KINDS = {401: EventKind.AUTH_FAILURE, 429: EventKind.THROTTLED}
_DEFAULT_REASONS = {401: "credential refused", 429: "rate limited"}
UNROUTED = "unmatched"  # what `middlewares.run` calls a request no route took (yet)
NOT_ROUTED = "(before routing)"
_TOKEN_OPERATION = "getToken"  # noqa: S105 - an operation's name
_MAX_FORM_PEEK = 16 * 1024  # the token endpoint's own bound on its form (`routes.oauth`)


async def note(request: web.Request, sec: Security, status: int, operation: str) -> None:
    """Count a 401 or 429 answer: from which address, on which operation, why, the API key id
    a failed authentication presented (never more of the credential), the throttled principal."""
    principal = request.get(PRINCIPAL) if status == 429 else None
    source = Source(
        _KINDS[status],
        request.remote or "",
        # Throttled by address before routing: no operation is known (and the path is the
        # client's text, not recorded).
        operation if operation != UNROUTED else NOT_ROUTED,
        request.get(REFUSAL) or _DEFAULT_REASONS[status],
        await presented_key_id(request, operation) if status == 401 else None,
        None if principal is None else principal.id,
    )
    sec.refusals.note(source, principal, request_id_of(request))


def key_id_in(value: str | None) -> str | None:
    """The id in an API key (`cbk_<id>_<secret>`), or `value` itself if it is a bare key id (an
    OAuth2 client id); None for anything else. The secret is never looked at."""
    if value is None:
        return None
    if value.startswith(PREFIX):
        candidate, separator = (
            value[len(PREFIX) : len(PREFIX) + ID_LENGTH],
            value[len(PREFIX) + ID_LENGTH :][:1],
        )
        return candidate if separator == "_" and is_key_id(candidate) else None
    return value if is_key_id(value) else None


def _basic_user(value: str) -> str | None:
    with contextlib.suppress(ValueError, binascii.Error):
        user, _, _secret = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        return unquote_plus(user)
    return None


async def presented_key_id(request: web.Request, operation: str) -> str | None:
    """The API key id a refused request presented: in its bearer credential, X-Api-Key or HTTP
    Basic user, or (token endpoint) its form's `client_id`, which the handler has read already."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    found = None
    if scheme.lower() == "bearer":
        found = key_id_in(value.strip())
    elif scheme.lower() == "basic":
        found = key_id_in(_basic_user(value))
    found = found or key_id_in(request.headers.get("X-Api-Key", "").strip() or None)
    if found is None and operation == _TOKEN_OPERATION and request.body_exists:
        # aiohttp keeps the body the handler read: this reads nothing from the network.
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            form = parse_qs((await request.read())[:_MAX_FORM_PEEK].decode("ascii"))
            found = key_id_in(next(iter(form.get("client_id", [])), None))
    return found
