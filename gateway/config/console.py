"""The browser console (`[console]`): off unless enabled; `gateway.web.console` serves it.

The console is one more client of the gateway: its pages are Cedar-decided requests of the
signed-in principal. What is configured here is only how people sign in and how long a sign-in
lasts: the OpenID Connect issuer (one of `[[oidc.issuers]]`, by alias) and its client, the
session timeouts and how many sessions the registry keeps.
"""

from __future__ import annotations

from typing import Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from cedarberg.gateway.config.base import FrozenSettings

# The console's paths: every console route lies below it, and the session cookie is a credential
# only on the routes registered there (`Route.session`).
CONSOLE_PREFIX = "/console/"
# Where the issuer sends the browser back, below the console's URL.
CALLBACK_PATH = CONSOLE_PREFIX + "signin/callback"


class ConsoleSettings(FrozenSettings):
    """The security console in the browser (docs/console.md)."""

    enabled: bool = Field(
        False,
        description="Serve the console under /console/. Needs TLS (`tls.cert_file`): its session "
        "cookie is `Secure` and `__Host-` prefixed, which browsers keep only from https.",
    )
    url: str | None = Field(
        None,
        description="The gateway's address as browsers reach it (scheme, host and port, no path), "
        "e.g. `https://lake.example.com`: the origin that state-changing forms must come from and "
        "the base of the sign-in redirect URI (`<url>/console/signin/callback`). Unset: "
        "`https://<host>:<port>` (set it when host is a wildcard address or a proxy fronts the gateway).",
    )
    oidc_issuer: str | None = Field(
        None,
        min_length=1,
        description="Alias of the `[[oidc.issuers]]` entry people sign in with (authorization code "
        "with PKCE). Unset: sign-in with an API key only.",
    )
    client_id: str | None = Field(
        None, min_length=1, max_length=512, description="The console's client id at that issuer."
    )
    client_secret: SecretStr | None = Field(
        None,
        description="The client's secret, if the issuer requires one (sent in the token request "
        "body); unset for a public client, which PKCE protects.",
    )
    scopes: tuple[str, ...] = Field(
        ("openid",),
        description="Scopes asked for at sign-in (must include `openid`); add what the issuer needs "
        "to put the groups claim into the id_token.",
    )
    idle_timeout_seconds: int = Field(
        1800,
        ge=5,
        le=24 * 3600,
        description="A session unused this long ends; the next page sends the browser to sign-in.",
    )
    absolute_timeout_seconds: int = Field(
        8 * 3600,
        ge=60,
        le=7 * 24 * 3600,
        description="A session ends this long after sign-in, however busy it is.",
    )
    max_sessions: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="Sessions the registry keeps at once. At the limit, expired ones are removed "
        "first; if all are live, a new sign-in is refused (503) until one ends.",
    )
    max_pending_signins: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="Sign-ins started at the issuer and not finished yet (each kept at most "
        "`signin_timeout_seconds`); past it the oldest is forgotten, so unauthenticated visitors "
        "cannot grow the store.",
    )
    signin_timeout_seconds: int = Field(
        600, ge=30, le=3600, description="How long a sign-in started at the issuer may take."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme != "https" or not parts.hostname or parts.path not in ("", "/"):
                raise ValueError("console.url must be an https origin, e.g. https://lake.example.com")
            if parts.query or parts.fragment or parts.username or parts.password:
                raise ValueError("console.url must be an https origin, e.g. https://lake.example.com")
        if (self.oidc_issuer is None) != (self.client_id is None):
            raise ValueError("console.oidc_issuer and console.client_id go together")
        if self.oidc_issuer is not None and "openid" not in self.scopes:
            raise ValueError("console.scopes must include openid")
        if self.absolute_timeout_seconds < self.idle_timeout_seconds:
            raise ValueError("console.absolute_timeout_seconds must be at least idle_timeout_seconds")
        return self

    def origin(self, host: str, port: int) -> str:
        """The console's origin: `url` without a trailing slash, else https://<host>:<port>."""
        if self.url is not None:
            return self.url.rstrip("/")
        shown = f"[{host}]" if ":" in host else host
        return f"https://{shown}:{port}"
