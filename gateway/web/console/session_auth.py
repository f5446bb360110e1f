"""Who a console request comes from: the browser's session cookie, and its forms' CSRF proof.

The pipeline authenticates a console route (`Route.session`) here instead of by its headers: the
session cookie is a credential on those routes only, and an Authorization header is none there.

- The cookie `__Host-cedarberg-console` holds the session's secret (256 random bits): `HttpOnly`
  (no script reads it), `Secure` and `__Host-` (set and sent over https only, for this host and
  path `/` only, never by a sibling domain), `SameSite=Strict` (no cross-site request carries it).
- A session whose API key was rotated or revoked since sign-in ends at that key's cut-off, as the
  key's gateway tokens do (`ApiKeyAuthenticator.check_token`); an ended session is removed.
- A session whose principal its policies no longer let use the console (`useConsole`) opens no
  route: every console route of another action (an admin page, a form) is refused first, as the
  sign-in page would be, so an engine's service key allowed an admin action through the API does
  not gain the console by signing in with it.
- A state-changing request (anything but GET and HEAD) must come from the console's own origin
  and carry the session's CSRF token in its form (`csrf_token`, compared in constant time); else
  it is refused with 403 and audited as a denial.

Origin: browsers send `Origin: null` on a form POST from a page whose referrer policy is
`no-referrer` (the Fetch standard; the console's pages have that policy), so `Origin` is checked
when it names an origin, else `Sec-Fetch-Site` must say `same-origin`, else `Referer` must lie in
the console's origin; a request with none of them is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from typing import Final

from aiohttp import web

from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authz.authorizer import plan_checks
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.entities import catalog_resource
from cedarberg.gateway.web import verdicts
from cedarberg.gateway.web.errors import ForbiddenError
from cedarberg.gateway.web.keys import PRINCIPAL, REFUSAL, security

SESSION_COOKIE: Final = "__Host-cedarberg-console"
SIGNIN_COOKIE: Final = "__Host-cedarberg-signin"
CSRF_FIELD: Final = "csrf_token"
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
# The console's forms are a token and a few short fields.
MAX_FORM_BYTES: Final = 16 * 1024
_SECRET_SHAPE: Final = re.compile(r"^[A-Za-z0-9_-]{43,64}$")
_CSRF_PURPOSE: Final = b"cedarberg console csrf v1"
CATALOG_RESOURCE: Final = 'Cedarberg::Catalog::"cedarberg"'
USE_CONSOLE: Final = "useConsole"


class SessionEndedError(AuthenticationError):
    """No live console session: the browser is sent to sign in (401 page)."""


def csrf_token(secret: str) -> str:
    """The session's CSRF token: an HMAC of a fixed purpose under the session's secret, so it is
    as unguessable as the session and needs no storage of its own."""
    mac = hmac.new(secret.encode("ascii"), _CSRF_PURPOSE, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def cookie_secret(request: web.Request, name: str = SESSION_COOKIE) -> str | None:
    """The secret held in cookie `name`, if it has a secret's shape."""
    value = request.cookies.get(name)
    return value if value is not None and _SECRET_SHAPE.match(value) else None


def same_origin(request: web.Request, origin: str) -> bool:
    """Whether the request comes from a page of `origin` (see the module docstring)."""
    sent = request.headers.get("Origin")
    if sent is not None and sent != "null":
        return sent == origin
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        return fetch_site == "same-origin"
    referer = request.headers.get("Referer")
    return referer is not None and (referer == origin or referer.startswith(origin + "/"))


async def form_of(request: web.Request, max_bytes: int = MAX_FORM_BYTES) -> dict[str, str]:
    """The request's form fields (text only; an upload's files stay in `request.post()`). Raises
    HTTPRequestEntityTooLarge past `max_bytes` (or a body of unknown length), before reading it."""
    length = request.content_length
    if length is None or length > max_bytes:
        raise web.HTTPRequestEntityTooLarge(max_bytes, length or 0)
    form = await request.post()
    return {key: value for key, value in form.items() if isinstance(value, str)}


def refuse_form(request: web.Request, action: str, reason: str) -> ForbiddenError:
    """Audit the refusal of a console form (a denial no policy made) and return the 403 to raise.
    Needs the request's principal."""
    verdicts.refuse(request, action, CATALOG_RESOURCE, {"reason": reason})
    return ForbiddenError(f"Not allowed: {reason}")


async def check_form(
    request: web.Request, secret: str, action: str, max_bytes: int = MAX_FORM_BYTES
) -> dict[str, str]:
    """The form of a state-changing request of the session `secret`, once it proved it comes from
    the console: the console's origin and the session's CSRF token. Raises ForbiddenError (audited
    as a denial of `action`), HTTPRequestEntityTooLarge (a form past `max_bytes`)."""
    console = security(request).console
    if console is None or not same_origin(request, console.origin):
        raise refuse_form(request, action, "the form was not sent from the console's origin")
    form = await form_of(request, max_bytes)
    token = form.get(CSRF_FIELD, "")
    if not hmac.compare_digest(token.encode("utf-8", "replace"), csrf_token(secret).encode("ascii")):
        raise refuse_form(request, action, "the form does not carry the session's CSRF token")
    return form


async def authenticate(request: web.Request, action: str, max_form_bytes: int = MAX_FORM_BYTES) -> Principal:
    """The principal of the request's console session; for a state-changing request, also its
    origin and CSRF token checked (`check_form`, the form at most `max_form_bytes`; the form is
    then in `request.post()`).

    Raises SessionEndedError (no session, or one that ended: idle, too old, signed out, its key
    rotated or revoked), ForbiddenError (a form without its proof), StorageUnavailableError."""
    sec = security(request)
    console = sec.console
    secret = cookie_secret(request)
    if console is None or secret is None:
        request[REFUSAL] = "no credential"
        raise SessionEndedError
    session = await console.sessions.find(secret)
    if session is None:
        request[REFUSAL] = "credential expired"
        raise SessionEndedError
    principal = session.principal
    try:
        await sec.api_keys.check_token(principal)  # passes principals no API key proved
    except AuthenticationError:
        await console.sessions.end(secret)
        request[REFUSAL] = "credential refused"
        raise SessionEndedError from None
    request[PRINCIPAL] = principal
    if action != USE_CONSOLE:
        require_console_use(request, principal)
    if request.method not in SAFE_METHODS:
        await check_form(request, secret, action, max_form_bytes)
    return principal


def require_console_use(request: web.Request, principal: Principal) -> None:
    """Refuse (ForbiddenError, the denial audited) a principal its policies do not let use the
    console. Decided on every console route whose own action is another; an allowed use is not
    audited a second time (the route's own decision is, and a follower polling the audit trail
    would otherwise wake itself up)."""
    catalog = catalog_resource()
    context = RequestContext.of(principal, request.remote or "")
    if security(request).policies.decide(principal, USE_CONSOLE, catalog, context).allowed:
        return
    verdicts.decide(request, USE_CONSOLE, plan_checks(USE_CONSOLE, context, catalog))
    raise ForbiddenError(f"Not allowed: {USE_CONSOLE}")
