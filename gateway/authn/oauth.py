"""`POST /v1/oauth/tokens` without HTTP: the OAuth2 token endpoint logic (RFC 6749, RFC 8693).

Public API::

    endpoint = TokenEndpoint(keys, issuer, admit=None, delegation=None)   # keys: ApiKeyAuthenticator
    result = await endpoint.handle(form, basic_auth, client, peer, tls_subject)   # TokenResponse | OAuthError
    result.auth_failure                                # an OAuthError: did credentials fail?
    result.status, result.headers, result.to_json()    # what the HTTP handler sends

`form` is the decoded `application/x-www-form-urlencoded` body (the HTTP layer must refuse a body
that repeats a parameter, RFC 6749 section 3.2, before calling); `basic_auth` is the
`(user, password)` of an `Authorization: Basic` header, already base64-decoded and split at the
first `:`, or None; `client` is the caller's address as the rate limiter keys it (API key
lockouts count per key id and client). Grants:

- `client_credentials` (`TokenEndpoint.client_credentials`): the client id is an API key's id and
  the client secret its secret, so engines configured with `credential=<id>:<secret>` work as they
  are. Spark sends them in the form body, DuckDB as HTTP Basic; both forms may appear together
  only if they agree. The whole key `cbk_<id>_<secret>` as the secret with no client id (what
  Iceberg's clients send for `credential=cbk_...`) is the same secret in one piece and is accepted.
  A wrong or unusable key is `invalid_client` (401, generic description); credentials that cannot
  be a key's id and secret by their shape alone, or a missing id or secret, get a description
  naming the expected form (`gateway.authn.credential_forms`: shape only, no lookup).
- `urn:ietf:params:oauth:grant-type:token-exchange` with `subject_token` = a still-valid gateway
  access token (`TokenEndpoint.refresh`): how Iceberg's Java client refreshes its token before it
  expires. The key the token was issued for must still be active and not rotated since the token
  was issued (checked in the store, without hashing), so rotating or revoking a key also ends
  refreshes of its earlier tokens. If the client authenticates with HTTP Basic (the Java
  client's fallback once its token has expired), a token is issued for that key instead.

Failed credentials (a wrong, unknown or locked-out key; a subject token that does not verify or
whose key was rotated or revoked) are marked `auth_failure`, so the HTTP layer counts them toward
the caller's per-address failed-authentication budget like every other failed authentication.
Anything else is `unsupported_grant_type`; missing or repeated-method parameters are
`invalid_request` (400). Responses carry `Cache-Control: no-store` (RFC 6749 section 5.1).

- the same grant with an `actor_token`, or with a `jwt`/`id_token` subject: an engine acting for
  its user (`gateway.authn.delegation`, given as `delegation`); refreshing a token issued that way
  (a subject token carrying `act`) goes back to it, never to the actor's own key.

With `admit` (the gateway passes the principal's `rate_limits.token` budget), a principal over its
budget gets `temporarily_unavailable` (429, `Retry-After`) after its credentials verified.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote_plus

from cedarberg.gateway.authn import credential_forms
from cedarberg.gateway.authn.credential import PeerCertificate, no_peer_certificate
from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.authn.subject_token import ID_TOKEN_TYPE, JWT_TOKEN_TYPE, DelegationFacts
from cedarberg.gateway.authn.tokens import TokenIssuer

if TYPE_CHECKING:
    from cedarberg.gateway.authn.delegation import Delegation

log = logging.getLogger("cedarberg.authn.oauth")

ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105
GRANT_CLIENT_CREDENTIALS = "client_credentials"
GRANT_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105
# Subject token types that only name a user (an engine's assertion or a signed OIDC token):
# exchanged by the delegation grant, never by a refresh.
_USER_TOKEN_TYPES = frozenset({JWT_TOKEN_TYPE, ID_TOKEN_TYPE})
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_CHALLENGE = 'Basic realm="cedarberg", charset="UTF-8"'


class KeyVerifier(Protocol):
    """What the endpoint needs from API keys (`ApiKeyAuthenticator` provides it)."""

    async def authenticate_parts(self, key_id: str, secret: str, client: str = "") -> Principal: ...

    async def active_principal(self, key_id: str, generation: int | None = None) -> Principal: ...


@dataclass(frozen=True, slots=True)
class TokenResponse:
    """A successful token response (200)."""

    access_token: str = field(repr=False)
    expires_in: int
    status: int = 200

    @property
    def headers(self) -> Mapping[str, str]:
        return _NO_STORE

    def to_json(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "token_type": "bearer",
            "expires_in": self.expires_in,
            "issued_token_type": ACCESS_TOKEN_TYPE,
        }


@dataclass(frozen=True, slots=True)
class OAuthError:
    """An RFC 6749 section 5.2 error response (the Iceberg spec's OAuthError)."""

    error: str
    description: str
    status: int
    retry_after_seconds: int | None = None  # with 429: when the client may ask again
    auth_failure: bool = False  # credentials were presented and did not authenticate

    @property
    def headers(self) -> Mapping[str, str]:
        if self.status == 401:
            return {**_NO_STORE, "WWW-Authenticate": _CHALLENGE}
        if self.retry_after_seconds is not None:
            return {**_NO_STORE, "Retry-After": str(self.retry_after_seconds)}
        return _NO_STORE

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error, "error_description": self.description}


# Seconds until `principal` may have another token, or None to issue one now (rate limits).
Admission = Callable[[Principal], Awaitable[int | None]]


def _invalid_request(description: str) -> OAuthError:
    return OAuthError("invalid_request", description, 400)


INVALID_CLIENT = OAuthError("invalid_client", "Client authentication failed", 401, auth_failure=True)
# Credentials that cannot be an API key's id and secret by their shape alone (no lookup), so naming
# the expected form says nothing about which keys exist.
MALFORMED_CLIENT = OAuthError(
    "invalid_client", credential_forms.MALFORMED_CLIENT_CREDENTIALS, 401, auth_failure=True
)
INVALID_SUBJECT = OAuthError("invalid_request", "subject_token is not valid", 400, auth_failure=True)


def _param(form: Mapping[str, str], name: str) -> str | None:
    value = form.get(name)
    return value or None  # RFC 6749 section 3.2: a parameter without a value counts as omitted


def _client_credentials(
    form: Mapping[str, str], basic_auth: tuple[str, str] | None
) -> tuple[str, str] | OAuthError:
    """The (client id, client secret) the request presents, or the OAuthError saying what is
    missing or conflicting. A whole API key as the secret with no client id (Iceberg clients send
    `credential=cbk_...` that way) is split into its id and secret."""
    body_id, body_secret = _param(form, "client_id"), _param(form, "client_secret")
    if basic_auth is None:
        if body_id is None and body_secret is not None:
            whole = credential_forms.split_whole_key(body_secret)
            if whole is not None:
                return whole
        if body_id is None or body_secret is None:
            return _invalid_request(credential_forms.MISSING_CLIENT_CREDENTIALS)
        return body_id, body_secret
    # RFC 6749 section 2.3.1: Basic credentials are form-urlencoded before base64.
    basic_id, basic_secret = unquote_plus(basic_auth[0]), unquote_plus(basic_auth[1])
    if (body_id is not None and body_id != basic_id) or (
        body_secret is not None and not hmac.compare_digest(body_secret.encode(), basic_secret.encode())
    ):
        return _invalid_request("conflicting client credentials")
    if not basic_id:
        whole = credential_forms.split_whole_key(basic_secret)
        if whole is not None:
            return whole
    return basic_id, basic_secret


async def _authenticated(
    keys: KeyVerifier, credentials: tuple[str, str], client: str
) -> Principal | OAuthError:
    """The principal the client credentials prove, or invalid_client: with the expected form named
    when their shape alone rules out an API key, else the generic description."""
    try:
        return await keys.authenticate_parts(*credentials, client)
    except AuthenticationError:
        return INVALID_CLIENT if credential_forms.well_formed_parts(*credentials) else MALFORMED_CLIENT


class TokenEndpoint:
    """Exchanges API key credentials (or a still-valid token) for a gateway access token."""

    def __init__(
        self,
        keys: KeyVerifier,
        issuer: TokenIssuer,
        admit: Admission | None = None,
        delegation: Delegation | None = None,
    ) -> None:
        self._keys = keys
        self._issuer = issuer
        self._admit = admit
        self.delegation = delegation  # set once at start-up (it needs the gateway's authenticators)

    async def handle(
        self,
        form: Mapping[str, str],
        basic_auth: tuple[str, str] | None,
        client: str = "",
        peer: PeerCertificate = no_peer_certificate,
        tls_subject: str | None = None,
    ) -> TokenResponse | OAuthError:
        """Dispatch on `grant_type`. `peer` and `tls_subject` describe the connection's verified
        client certificate (an actor's, when an engine acts for a user)."""
        grant_type = _param(form, "grant_type")
        if grant_type is None:
            return _invalid_request("grant_type is required")
        if grant_type == GRANT_CLIENT_CREDENTIALS:
            return await self.client_credentials(form, basic_auth, client)
        if grant_type == GRANT_TOKEN_EXCHANGE:
            acting = _param(form, "actor_token") is not None
            if acting or _param(form, "subject_token_type") in _USER_TOKEN_TYPES:
                if self.delegation is None:
                    return _invalid_request("actor_token is not supported")
                return await self.delegation.exchange(form, client, peer, tls_subject, self._issue)
            return await self.refresh(form, basic_auth, client, tls_subject)
        return OAuthError("unsupported_grant_type", "Unsupported grant_type", 400)

    async def _issue(
        self, principal: Principal, lifetime: int | None = None, delegation: DelegationFacts | None = None
    ) -> TokenResponse | OAuthError:
        """A token for an authenticated principal, within its token budget (`admit`)."""
        retry_after = None if self._admit is None else await self._admit(principal)
        if retry_after is not None:
            return OAuthError(
                "temporarily_unavailable", "Too many token requests; retry later", 429, retry_after
            )
        token, expires_in = self._issuer.issue(principal, lifetime, delegation)
        return TokenResponse(token, expires_in)

    async def client_credentials(
        self, form: Mapping[str, str], basic_auth: tuple[str, str] | None, client: str = ""
    ) -> TokenResponse | OAuthError:
        """The client_credentials grant (RFC 6749 section 4.4) with API key parts as credentials."""
        grant_type = _param(form, "grant_type")
        if grant_type is None:
            return _invalid_request("grant_type is required")
        if grant_type != GRANT_CLIENT_CREDENTIALS:
            return OAuthError("unsupported_grant_type", "Unsupported grant_type", 400)
        credentials = _client_credentials(form, basic_auth)
        if isinstance(credentials, OAuthError):
            return credentials
        principal = await _authenticated(self._keys, credentials, client)
        if isinstance(principal, OAuthError):
            return principal
        return await self._issue(principal)

    async def refresh(
        self,
        form: Mapping[str, str],
        basic_auth: tuple[str, str] | None,
        client: str = "",
        tls_subject: str | None = None,
    ) -> TokenResponse | OAuthError:
        """Token exchange (RFC 8693) of a gateway access token for a fresh one."""
        subject_token = _param(form, "subject_token")
        if subject_token is None or _param(form, "subject_token_type") != ACCESS_TOKEN_TYPE:
            return _invalid_request("subject_token of type access_token is required")
        if _param(form, "actor_token") is not None:
            return _invalid_request("actor_token is not supported")
        if basic_auth is not None or _param(form, "client_secret") is not None:
            credentials = _client_credentials(form, basic_auth)
            if isinstance(credentials, OAuthError):
                return credentials
            principal = await _authenticated(self._keys, credentials, client)
            if isinstance(principal, OAuthError):
                return principal
            return await self._issue(principal)
        try:
            subject, facts = self._issuer.verify_delegation(subject_token)
        except AuthenticationError:
            return INVALID_SUBJECT
        if facts is not None:  # a user's token: refreshed as the delegation it came from
            if self.delegation is None:
                return INVALID_SUBJECT
            return await self.delegation.refresh(subject, facts, client, tls_subject, self._issue)
        key_id = subject.attributes.get("api_key_id")
        if key_id is None:
            log.info("token refresh refused: token not issued for an api key")
            return INVALID_SUBJECT
        try:
            principal = await self._keys.active_principal(key_id, subject.key_generation or 0)
        except AuthenticationError:
            return INVALID_SUBJECT
        return await self._issue(principal)
