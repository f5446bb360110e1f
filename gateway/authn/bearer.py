"""Who a bearer credential names: the one place the gateway turns a presented credential into a
principal, whatever its form.

Forms (`gateway.authn.credential_forms`): an API key `cbk_<key id>_<secret>` (sent as
`Authorization: Bearer` or in `X-Api-Key`), a gateway token from `POST /v1/oauth/tokens`, or a
token from a configured OIDC issuer. Each is verified in full once and then remembered, keyed by a
digest of the credential, never the credential itself:

- API keys in the verified-key cache (`gateway.authn.key_guards`: HMAC-SHA256 under a per-process
  key; lockout, TTL, expiry, rotation and revocation as `gateway.authn.api_keys` documents);
- tokens in the verified-token cache (`gateway.authn.token_cache`: until `exp`, and for an OIDC
  token while its signing key's lease holds); a gateway token's key cut-off is checked on every
  use, cached or not.

Every principal returned says until when its credential is good (`Principal.valid_until`) and,
for an API key or an OIDC token, what a remembered verification stays valid on
(`Principal.proof`), so the request plans that replay reads (`gateway.web.replay`) end exactly when
a fresh authentication would refuse the credential, for every form.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.credential import PeerCertificate, no_peer_certificate
from cedarberg.gateway.authn.key_format import MalformedKeyError, parse_api_key
from cedarberg.gateway.authn.oidc import OidcAuthenticator
from cedarberg.gateway.authn.principal import AuthMethod, Principal
from cedarberg.gateway.authn.token_cache import VerifiedTokenCache, validity
from cedarberg.gateway.authn.tokens import TokenIssuer

# The identity an address is limited under (`RateLimiter.client`): API key lockouts count per
# key id and that identity.
ClientOf = Callable[[str | None], str]


class BearerAuthenticator:
    """Authenticates bearer credentials of every form. Used from the event loop only."""

    def __init__(
        self,
        api_keys: ApiKeyAuthenticator,
        tokens: TokenIssuer,
        oidc: OidcAuthenticator,
        verified_tokens: VerifiedTokenCache,
        client_of: ClientOf,
    ) -> None:
        self.api_keys = api_keys
        self.verified_tokens = verified_tokens
        self._tokens = tokens
        self._oidc = oidc
        self._client_of = client_of

    async def authenticate(
        self, token: str, addr: str | None = None, peer: PeerCertificate = no_peer_certificate
    ) -> Principal:
        """Who a bearer credential names: an API key, a gateway token or an OIDC token. `addr` is
        the caller's address: API key lockouts count per key and address. `peer` gives the
        thumbprint of the connection's verified client certificate, for certificate-bound tokens.

        Raises AuthenticationError (CredentialExpiredError for an expired token,
        UnsupportedBindingError for a DPoP-bound one)."""
        with contextlib.suppress(MalformedKeyError):
            parse_api_key(token)
            return await self.api_keys.authenticate(token, self._client_of(addr))
        principal = self.verified_tokens.get(token, peer)
        if principal is None:
            if self._oidc.handles(token):
                principal = await self._oidc.authenticate(token, peer)
            else:
                principal = self._tokens.verify(token)
            bounds = validity(token)
            if bounds is not None:
                principal = dataclasses.replace(principal, valid_until=bounds[1])
            self.verified_tokens.put(token, principal)
        if principal.auth_method is AuthMethod.GATEWAY_TOKEN:
            # Checked on every use, cached or not: a rotation or revocation ends older tokens.
            await self.api_keys.check_token(principal)
        return principal
