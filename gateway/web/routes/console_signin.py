"""Signing in to the console and out of it, and its style sheet (public routes: each
authenticates itself).

    GET  /console/signin            the sign-in page: an API key form, and the issuer's link
    POST /console/signin/key        an API key (verified as any other: rate limits, lockouts)
    GET  /console/signin/oidc       start the authorization code flow (PKCE S256, state, nonce)
    GET  /console/signin/callback   the issuer's answer: the id_token, verified as a bearer token
    POST /console/signout           end the session server-side (CSRF-checked)
    GET  /console/static/{name}     the shipped style sheet and scripts
    GET  /console                   a permanent redirect (308) to /console/, the console's home

A sign-in opens a server-side session (`gateway.authn.console_sessions`) and sets the session
cookie; it is audited as the principal's `consoleSignIn` (and sign-out as `consoleSignOut`), made
durable before the browser is told, as a mutation's outcome is. Why a sign-in failed is logged by
the authenticator and never told; a failure counts against the address's failure budget.

After the issuer's redirect the session cookie (SameSite=Strict) would not be sent on the
redirect that follows (the navigation began at another site), so the callback answers a page that
moves on by itself (a meta refresh: no script) to the catalog, a navigation of the console's own.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Final

from aiohttp import web

from cedarberg.gateway.authn.console_sessions import SessionStoreFullError, new_secret
from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.key_format import MalformedKeyError, parse_api_key
from cedarberg.gateway.authn.oidc_signin import SignInError, new_signin
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.ratelimit import OperationClass, principal_key
from cedarberg.gateway.web import http, outcomes
from cedarberg.gateway.web.console.layout import page
from cedarberg.gateway.web.console.pages import (
    NO_STORE,
    SECURITY_HEADERS,
    html,
    render_text,
    see_other,
    static_file,
)
from cedarberg.gateway.web.console.services import ConsoleServices
from cedarberg.gateway.web.console.session_auth import (
    CATALOG_RESOURCE,
    SESSION_COOKIE,
    SIGNIN_COOKIE,
    check_form,
    cookie_secret,
    form_of,
    same_origin,
)
from cedarberg.gateway.web.errors import ForbiddenError, RateLimitedError
from cedarberg.gateway.web.keys import PRINCIPAL, REFUSAL, security
from cedarberg.gateway.web.route import Route

log = logging.getLogger("cedarberg.console")

SIGNIN = "/console/signin"
HOME = "/console/catalog"
_STATIC_TYPES: Final = {".css": "text/css", ".js": "text/javascript"}


def _console(request: web.Request) -> ConsoleServices:
    console = security(request).console
    if console is None:  # the routes are registered only when the console is enabled
        raise web.HTTPNotFound()
    return console


def _signin_page(request: web.Request, status: int = 200, problem: str | None = None) -> web.Response:
    console = _console(request)
    issuer = None if console.flow is None else console.flow.issuer.alias
    return page(request, "signin.html", {"issuer": issuer, "problem": problem, "section": "signin"}, status)


async def signin_page(request: web.Request) -> web.Response:
    return _signin_page(request)


def _with_session(response: web.Response, secret: str) -> web.Response:
    response.set_cookie(SESSION_COOKIE, secret, path="/", secure=True, httponly=True, samesite="Strict")
    return response


async def _open_session(request: web.Request, principal: Principal, status: int) -> str:
    """A new session for `principal`, its sign-in audited (durably) with the `status` the browser
    is answered. Raises SessionStoreFullError."""
    sec, console = security(request), _console(request)
    retry = await sec.limiter.hit_principal(principal_key(principal), OperationClass.TOKEN)
    if retry is not None:
        raise RateLimitedError(retry)
    secret = await console.sessions.start(principal)
    request[PRINCIPAL] = principal
    # The record's auth_method says how the session was opened; acknowledge makes it durable
    # before the browser is answered.
    answer = web.Response(status=status)
    await outcomes.acknowledge(request, "consoleSignIn", principal, CATALOG_RESOURCE, answer)
    return secret


async def _failed(request: web.Request, reason: str) -> None:
    sec = security(request)
    request[REFUSAL] = reason
    await sec.limiter.hit_auth_failure(request.remote)


async def signin_with_key(request: web.Request) -> web.Response:
    """Sign in with an API key from the form. Refused: 401 with the sign-in page again."""
    console, sec = _console(request), security(request)
    if not same_origin(request, console.origin):
        raise ForbiddenError("Not allowed: the form was not sent from the console's origin")
    retry = await sec.limiter.auth_failures_exceeded(request.remote)
    if retry is not None:
        raise RateLimitedError(retry)
    presented = (await form_of(request)).get("api_key", "").strip()
    try:
        parse_api_key(presented)  # the shape first: no lookup, no hash for what is no key
        principal = await sec.api_keys.authenticate(presented, sec.limiter.client(request.remote))
    except (MalformedKeyError, AuthenticationError):
        await _failed(request, "credential refused")
        return _signin_page(request, 401, "That API key was not accepted.")
    try:
        secret = await _open_session(request, principal, 303)
    except SessionStoreFullError:
        return _signin_page(request, 503, "The console has too many open sessions; try again later.")
    return _with_session(see_other(HOME), secret)


async def signin_with_issuer(request: web.Request) -> web.Response:
    """Send the browser to the issuer, with a new sign-in's state, nonce and PKCE challenge; the
    sign-in cookie (SameSite=Lax: it comes back with the issuer's redirect) binds it to this
    browser."""
    console = _console(request)
    if console.flow is None:
        raise web.HTTPNotFound()
    start, binding = new_signin(), new_secret()
    state = await console.sessions.begin_signin(
        {"nonce": start.nonce, "verifier": start.verifier, "binding": _digest(binding)}
    )
    try:
        location = await console.flow.authorization_url(state, start.nonce, start.challenge)
    except SignInError as err:
        _log_signin_failure(str(err))
        return _signin_page(request, 503, "The identity provider cannot be reached; try again later.")
    response = web.Response(status=303, headers={"Location": location, **SECURITY_HEADERS, **NO_STORE})
    response.set_cookie(
        SIGNIN_COOKIE,
        binding,
        path="/",
        secure=True,
        httponly=True,
        samesite="Lax",
        max_age=console.settings.signin_timeout_seconds,
    )
    return response


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("ascii")).hexdigest()


def _log_signin_failure(reason: str) -> None:
    """Why a sign-in failed: for the log only, never for the page."""
    log.info("console sign-in failed: %s", reason)


async def signin_callback(request: web.Request) -> web.Response:
    """The issuer's redirect: exchange the code, verify the id_token, open the session."""
    console = _console(request)
    if console.flow is None:
        raise web.HTTPNotFound()
    sec = security(request)
    retry = await sec.limiter.auth_failures_exceeded(request.remote)
    if retry is not None:
        raise RateLimitedError(retry)
    # One value each: a repeated parameter is a 400, never a choice between two (`query_value`).
    state, code = http.query_value(request, "state", ""), http.query_value(request, "code", "")
    pending = await console.sessions.finish_signin(state) if 0 < len(state) <= 128 else None
    binding = cookie_secret(request, SIGNIN_COOKIE)
    if (
        pending is None
        or binding is None
        or not hmac.compare_digest(_digest(binding), str(pending.get("binding", "")))
    ):
        _log_signin_failure("unknown, used or expired state, or another browser's")
        await _failed(request, "credential refused")
        return _cleared(
            _signin_page(request, 400, "This sign-in has expired or was not started here; start again.")
        )
    if not code or len(code) > 2048:
        _log_signin_failure(
            f"the issuer answered without a code ({http.query_value(request, 'error', 'no error')[:64]})"
        )
        return _cleared(_signin_page(request, 401, "The identity provider did not sign you in."))
    try:
        id_token = await console.flow.exchange(code, str(pending["verifier"]))
        principal = await sec.oidc.authenticate_id_token(
            id_token, console.flow.issuer.issuer, console.flow.client.client_id, str(pending["nonce"])
        )
    except (SignInError, AuthenticationError) as err:
        _log_signin_failure(str(err) or type(err).__name__)
        await _failed(request, "credential refused")
        return _cleared(_signin_page(request, 401, "The identity provider's answer was not accepted."))
    try:
        secret = await _open_session(request, principal, 200)
    except SessionStoreFullError:
        return _cleared(
            _signin_page(request, 503, "The console has too many open sessions; try again later.")
        )
    moving_on = html(render_text("signed_in.html", {"home": HOME}))
    return _cleared(_with_session(moving_on, secret))


def _cleared(response: web.Response) -> web.Response:
    """`response`, removing the sign-in cookie (it served once)."""
    response.del_cookie(SIGNIN_COOKIE, path="/", secure=True, httponly=True, samesite="Lax")
    return response


async def sign_out(request: web.Request) -> web.Response:
    """End the session server-side (every worker and instance at once) and forget the cookie."""
    console = _console(request)
    secret = cookie_secret(request)
    response = see_other(SIGNIN)
    response.del_cookie(SESSION_COOKIE, path="/", secure=True, httponly=True, samesite="Strict")
    if secret is None:
        return response
    session = await console.sessions.find(secret)
    if session is None:
        return response
    request[PRINCIPAL] = session.principal
    await check_form(request, secret, "consoleSignOut")
    await console.sessions.end(secret)
    await outcomes.acknowledge(request, "consoleSignOut", session.principal, CATALOG_RESOURCE, response)
    return response


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    suffix = name[name.rfind(".") :] if "." in name else ""
    body = static_file(name) if suffix in _STATIC_TYPES else None
    if body is None:
        raise web.HTTPNotFound()
    response = web.Response(body=body, content_type=_STATIC_TYPES[suffix])
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "no-cache"
    return response


async def console_root(request: web.Request) -> web.Response:
    """`/console` as typed without its slash: the console's home is `/console/` (a redirect reveals
    nothing, so it needs no session; the home then asks for one)."""
    response = web.Response(status=308, headers={"Location": "/console/"})
    response.headers.update(SECURITY_HEADERS)
    return response


ROUTES = [
    Route("GET", "/console", console_root, "consoleRoot", advertised=False),
    Route("GET", SIGNIN, signin_page, "consoleSignInPage", advertised=False),
    Route("POST", SIGNIN + "/key", signin_with_key, "consoleSignInWithKey", advertised=False),
    Route("GET", SIGNIN + "/oidc", signin_with_issuer, "consoleSignInWithIssuer", advertised=False),
    Route("GET", SIGNIN + "/callback", signin_callback, "consoleSignInCallback", advertised=False),
    Route("POST", "/console/signout", sign_out, "consoleSignOut", advertised=False),
    Route("GET", "/console/static/{name}", static, "consoleAsset", advertised=False),
]
