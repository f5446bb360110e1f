"""What the console needs beside the security services: its sessions, its origin, and the
sign-in flow at its OpenID Connect issuer (when one is configured). Built by `Security.open` when
`console.enabled`; None otherwise."""

from __future__ import annotations

from dataclasses import dataclass

from cedarberg.gateway.authn.console_sessions import ConsoleSessions
from cedarberg.gateway.authn.key_store import KeyStore
from cedarberg.gateway.authn.oidc_signin import Client, CodeFlow
from cedarberg.gateway.config.console import CALLBACK_PATH, ConsoleSettings
from cedarberg.gateway.config.settings import Settings


@dataclass(frozen=True, slots=True)
class ConsoleServices:
    settings: ConsoleSettings
    sessions: ConsoleSessions
    origin: str  # where state-changing forms must come from (`session_auth.same_origin`)
    flow: CodeFlow | None  # sign-in at the configured issuer; None: API keys only

    @classmethod
    def build(cls, settings: Settings, key_store: KeyStore) -> ConsoleServices:
        console = settings.console
        origin = console.origin(settings.host, settings.port)
        flow = None
        if console.oidc_issuer is not None and console.client_id is not None:
            issuer = next(i for i in settings.oidc.issuers if i.alias == console.oidc_issuer)
            secret = console.client_secret.get_secret_value() if console.client_secret is not None else None
            client = Client(console.client_id, secret, origin + CALLBACK_PATH, console.scopes)
            flow = CodeFlow(issuer, settings.oidc, client)
        return cls(console, ConsoleSessions(key_store, console), origin, flow)

    async def close(self) -> None:
        if self.flow is not None:
            await self.flow.close()
