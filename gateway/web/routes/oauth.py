"""`POST /v1/oauth/tokens` and `GET /v1/oauth/jwks`: the HTTP side of the gateway's token service.

The grant logic lives in `gateway.authn.oauth.TokenEndpoint`; this module only turns HTTP into its
inputs and its result into HTTP:

- the body must be `application/x-www-form-urlencoded`, at most `MAX_FORM_BYTES`, ASCII, at most
  `MAX_FORM_FIELDS` parameters, none repeated (RFC 6749 section 3.2), else `invalid_request` (400);
- `Authorization: Basic` is base64-decoded and split at the first `:` (RFC 7617); the endpoint
  form-urldecodes both halves (RFC 6749 section 2.3.1). A Basic header that cannot be decoded is
  `invalid_client` (401); one without a `:` is a secret without a client id (a whole API key is
  accepted so, anything else is refused naming the expected form). Other schemes are ignored:
  the Iceberg Java client sends its current bearer token along with a token-exchange refresh;
- failed authentications count toward the caller's per-address failed-authentication budget
  (`rate_limits.auth_failures_per_address`) like those of every other route, and an address over
  that budget is answered `temporarily_unavailable` (429, `Retry-After`) before any credential is
  checked; API key lockouts count per key id and client address (see `gateway.authn.api_keys`);
- every answer is JSON with the endpoint's status and headers (`Cache-Control: no-store`, and a
  `WWW-Authenticate` challenge with a 401); errors are `{"error", "error_description"}`.

Nothing here logs a request body or a header: they carry secrets.
"""

from __future__ import annotations

import base64
import binascii
import functools
from urllib.parse import parse_qsl

import orjson
from aiohttp import hdrs, web

from cedarberg.gateway.authn.oauth import INVALID_CLIENT, OAuthError, TokenResponse
from cedarberg.gateway.tls import peer_certificate_sha256, peer_subject
from cedarberg.gateway.web.keys import metrics, security
from cedarberg.gateway.web.route import Route

TOKENS = "/v1/oauth/tokens"
JWKS = "/v1/oauth/jwks"
FORM = "application/x-www-form-urlencoded"
MAX_FORM_BYTES = 16 * 1024  # a client id, a secret and at most one gateway token, with room to spare
MAX_FORM_FIELDS = 32
MAX_AUTHORIZATION_LENGTH = 1024
JWKS_MAX_AGE_SECONDS = 300


class _BadForm(Exception):
    """The body is not an acceptable form; the message is safe to send to the client."""


def _oauth_response(result: TokenResponse | OAuthError) -> web.Response:
    return web.Response(
        status=result.status,
        body=orjson.dumps(result.to_json()),
        content_type="application/json",
        headers=dict(result.headers),
    )


async def _form(request: web.Request) -> dict[str, str]:
    """The decoded form body. Raises _BadForm."""
    if request.content_type != FORM:
        raise _BadForm(f"the request body must be {FORM}")
    if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
        raise _BadForm("the request body is too large")
    # read() is cached on the request (a middleware may have read it already) and bounded by the
    # application's client_max_size for bodies without a Content-Length.
    raw = await request.read()
    if len(raw) > MAX_FORM_BYTES:
        raise _BadForm("the request body is too large")
    try:
        pairs = parse_qsl(
            raw.decode("ascii"),
            keep_blank_values=True,
            strict_parsing=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except (UnicodeDecodeError, ValueError):
        raise _BadForm("the request body is not a valid form") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise _BadForm("a parameter is repeated")
        form[name] = value
    return form


def _basic_auth(request: web.Request) -> tuple[str, str] | OAuthError | None:
    """The (user, password) of an `Authorization: Basic` header, still form-urlencoded; None if the
    request has no Basic credentials; INVALID_CLIENT if they cannot be decoded."""
    headers = request.headers.getall(hdrs.AUTHORIZATION, [])
    basic = [h for h in headers if h[:6].lower() == "basic "]
    if not basic:
        return None
    if len(headers) > 1:
        return OAuthError("invalid_request", "more than one Authorization header", 400)
    encoded = basic[0][6:].strip()
    if len(encoded) > MAX_AUTHORIZATION_LENGTH:
        return INVALID_CLIENT
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return INVALID_CLIENT
    user, sep, password = decoded.partition(":")
    if not sep:
        # Not `<id>:<secret>`: read as a secret without an id, which the endpoint accepts when it
        # is a whole API key and otherwise refuses naming the expected form.
        return "", decoded
    return user, password


async def get_token(request: web.Request) -> web.Response:
    """OAuth2 token endpoint (client credentials, token exchange)."""
    sec = security(request)
    # Guessing is slow here as everywhere: past the failure budget, nothing is verified.
    retry = await sec.limiter.auth_failures_exceeded(request.remote)
    if retry is not None:
        metrics(request).token_request(None, issued=False)
        metrics(request).rate_limited.labels("auth_failures", "any").inc()
        return _oauth_response(
            OAuthError("temporarily_unavailable", "Too many failed authentications", 429, retry.seconds)
        )
    result = await _token_result(request)
    if isinstance(result, OAuthError) and result.auth_failure:
        await sec.limiter.hit_auth_failure(request.remote)
    return _oauth_response(result)


async def _token_result(request: web.Request) -> TokenResponse | OAuthError:
    basic = _basic_auth(request)
    if isinstance(basic, OAuthError):
        metrics(request).token_request(None, issued=False)
        return basic
    try:
        form = await _form(request)
    except _BadForm as err:
        metrics(request).token_request(None, issued=False)
        return OAuthError("invalid_request", str(err), 400)
    sec = security(request)
    result = await sec.token_endpoint.handle(
        form,
        basic,
        sec.limiter.client(request.remote),
        # An engine acting for a user is known by its certificate as well as its token.
        functools.partial(peer_certificate_sha256, request.transport),
        peer_subject(request.transport),
    )
    stats = metrics(request)
    stats.token_request(form.get("grant_type"), issued=isinstance(result, TokenResponse))
    if result.status == 429:
        stats.rate_limited.labels("principal", "token").inc()
    return result


async def get_jwks(request: web.Request) -> web.Response:
    """The public keys that verify the gateway's access tokens."""
    return web.Response(
        body=orjson.dumps(security(request).tokens.jwks()),
        content_type="application/json",
        headers={"Cache-Control": f"public, max-age={JWKS_MAX_AGE_SECONDS}"},
    )


ROUTES = [
    Route("POST", TOKENS, get_token, "getToken", advertised=False),
    Route("GET", JWKS, get_jwks, "getJwks", advertised=False),
]
