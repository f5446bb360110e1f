"""Signing a person in at an OpenID Connect issuer: the authorization code flow with PKCE (S256).

Public API::

    flow = CodeFlow(issuer_settings, oidc_settings, Client(client_id, client_secret, redirect_uri, scopes))
    start = new_signin()                               # state is the session store's; nonce, verifier
    url = await flow.authorization_url(state, start.nonce, start.challenge)
    id_token = await flow.exchange(code, start.verifier)   # raises SignInError
    await flow.close()

Only the id_token of the token response is used; the gateway verifies it as it verifies a bearer
token of the issuer (`OidcAuthenticator.authenticate_id_token`: keys, algorithms, lifetime, the
client id as audience, and the sign-in's nonce). Access and refresh tokens are discarded.

Bounds, as for key downloads (`gateway.authn.jwks`): one total timeout and `max_document_bytes`
per call, no redirects followed, and an https issuer's endpoints must be https.

Errors: `SignInError`, whose message is for the log only (never shown to the browser).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp

from cedarberg.gateway.authn.jwks import JwksError, fetch_json
from cedarberg.gateway.config.authn import OidcIssuerSettings, OidcSettings, keys_url_allowed

VERIFIER_BYTES = 48  # RFC 7636: 43-128 characters; 48 random bytes make 64


class SignInError(Exception):
    """The issuer could not be used for a sign-in; the message says why, for the log only."""


@dataclass(frozen=True, slots=True)
class SignInStart:
    """A sign-in's secrets: the nonce the id_token must carry, and the PKCE verifier with its
    S256 challenge."""

    nonce: str
    verifier: str

    @property
    def challenge(self) -> str:
        return pkce_challenge(self.verifier)


def new_signin() -> SignInStart:
    return SignInStart(secrets.token_urlsafe(32), secrets.token_urlsafe(VERIFIER_BYTES))


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 S256: BASE64URL(SHA256(ASCII(verifier))) without padding."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class Client:
    """The gateway as the issuer's client: its id, its secret (None for a public client), where
    the issuer sends the browser back, and the scopes it asks for."""

    client_id: str
    secret: str | None = field(repr=False)
    redirect_uri: str
    scopes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Endpoints:
    authorization: str
    token: str


class CodeFlow:
    """The authorization code flow at one issuer, for one client. Use within one event loop."""

    def __init__(self, issuer: OidcIssuerSettings, limits: OidcSettings, client: Client) -> None:
        self.issuer = issuer
        self.client = client
        self._limits = limits
        self._endpoints: _Endpoints | None = None
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=False)
        return self._session

    def _allowed(self, url: object) -> str:
        if not isinstance(url, str) or not keys_url_allowed(
            url, issuer=self.issuer.issuer, allow_http=self.issuer.unsafe_allow_http
        ):
            raise SignInError(f"issuer endpoint {url!r} is not an allowed URL")
        return url

    async def _discover(self) -> _Endpoints:
        """The issuer's authorization and token endpoints (discovered once, then kept)."""
        if self._endpoints is not None:
            return self._endpoints
        url = (
            self.issuer.discovery_url or self.issuer.issuer.rstrip("/") + "/.well-known/openid-configuration"
        )
        try:
            document = await fetch_json(
                self._http(),
                url,
                time_limit=self._limits.fetch_timeout_seconds,
                max_bytes=self._limits.max_document_bytes,
            )
        except JwksError as err:
            raise SignInError(str(err)) from None
        if document.get("issuer") != self.issuer.issuer:
            raise SignInError(f"discovery document of {self.issuer.issuer} names another issuer")
        self._endpoints = _Endpoints(
            self._allowed(document.get("authorization_endpoint")),
            self._allowed(document.get("token_endpoint")),
        )
        return self._endpoints

    async def authorization_url(self, state: str, nonce: str, challenge: str) -> str:
        """Where to send the browser to sign in. Raises SignInError."""
        endpoint = (await self._discover()).authorization
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.client.client_id,
                "redirect_uri": self.client.redirect_uri,
                "scope": " ".join(self.client.scopes),
                "state": state,
                "nonce": nonce,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"

    async def exchange(self, code: str, verifier: str) -> str:
        """The id_token the issuer gives for `code` (with the PKCE `verifier`). Raises SignInError."""
        endpoint = (await self._discover()).token
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.client.redirect_uri,
            "client_id": self.client.client_id,
            "code_verifier": verifier,
        }
        if self.client.secret is not None:
            form["client_secret"] = self.client.secret
        document = await self._post(endpoint, form)
        token = document.get("id_token")
        if not isinstance(token, str) or not token:
            raise SignInError("the token response has no id_token")
        return token

    async def _post(self, url: str, form: dict[str, str]) -> dict[str, Any]:
        limit = self._limits.max_document_bytes
        body = bytearray()
        try:
            async with self._http().post(
                url,
                data=form,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self._limits.fetch_timeout_seconds),
                headers={"Accept": "application/json"},
            ) as response:
                if response.status != 200:
                    raise SignInError(f"the token endpoint answered HTTP {response.status}")
                async for chunk in response.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > limit:
                        raise SignInError(f"the token endpoint sent more than {limit} bytes")
        except (aiohttp.ClientError, TimeoutError) as err:
            raise SignInError(f"the token endpoint could not be reached: {type(err).__name__}") from None
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            raise SignInError("the token endpoint did not return JSON") from None
        if not isinstance(document, dict):
            raise SignInError("the token endpoint did not return a JSON object")
        return document

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
