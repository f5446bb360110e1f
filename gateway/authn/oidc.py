"""Bearer JWTs from configured OIDC issuers → `Principal`.

Public API:
    OidcAuthenticator(settings, *, session=None)
        .issuers -> frozenset[str]
        .handles(token) -> bool                 unverified peek: is `iss` a configured issuer?
        async .authenticate(token, peer) -> Principal
                                                raises AuthenticationError / CredentialExpiredError /
                                                UnsupportedBindingError
        async .authenticate_id_token(token, issuer, audience, nonce) -> Principal
                                                a sign-in's id_token (the console), same checks
        async .warm_up() -> None                fetch every issuer's keys once (failures logged)
        async .close() -> None                  also `async with OidcAuthenticator(...)`
    peek_issuer(token, max_bytes) -> str | None

Checks, cheapest first: token size (`max_token_bytes`, before any parsing) → JWS structure →
unverified `iss` must be a configured issuer (no network for unknown issuers) → header `alg` must be
one of the issuer's pinned asymmetric algorithms (`none` and HS* cannot even be configured) → key
by `kid` from the issuer's JWKS (see `gateway.authn.jwks` for the refresh bounds), whose key type
must allow that `alg` → PyJWT verifies the signature, then `iss`, `aud`, `exp`, `nbf` (and `iat`)
with the issuer's leeway; `exp`, `iss` and `aud` are required → the token's lifetime: `exp` no
further than the issuer's `max_token_lifetime_seconds` from now (plus leeway) nor from `iat` →
its confirmation claim (`gateway.authn.confirmation`): a `cnf.x5t#S256`-bound token only from a
connection whose verified client certificate has that SHA-256 thumbprint, DPoP-bound and other
bindings never → the principal claim must be a non-empty string → the groups claim is read and
scoped to the issuer (`gateway.authn.groups`: `<alias>/<group>`, bare names only as the issuer's
allow-lists admit). Embedded keys (`jwk`, `jku`, `x5u`, `x5c` headers) are never used.

The principal carries a `Proof` (`gateway.authn.credential`): the signing key's lease and the
certificate binding, which remembered verifications re-check on every use.

Errors: `CredentialExpiredError` only for a correctly signed token whose `exp` has passed (so the
gateway may answer 419); `UnsupportedBindingError` for a correctly signed DPoP-bound token;
`AuthenticationError` for everything else. All carry the generic message (the HTTP answer to
`UnsupportedBindingError` says only that DPoP is not supported); the reason is logged at INFO on
`cedarberg.authn.oidc`, never with the token.
"""

from __future__ import annotations

import hmac
import json
import math
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self, TypeGuard

import aiohttp
import jwt

from cedarberg.gateway.authn.confirmation import BindingError, DpopBindingError, required_certificate
from cedarberg.gateway.authn.credential import (
    PeerCertificate,
    Proof,
    certificate_matches,
    no_peer_certificate,
)
from cedarberg.gateway.authn.errors import (
    AuthenticationError,
    CredentialExpiredError,
    UnsupportedBindingError,
)
from cedarberg.gateway.authn.groups import GroupsClaimError, IssuerGroupScope, asserted_groups
from cedarberg.gateway.authn.jwks import (
    FetchBounds,
    IssuerKeys,
    JwksError,
    KeySource,
    VerificationKey,
    log,
    short_repr,
)
from cedarberg.gateway.authn.principal import AuthMethod, Principal, oidc_principal_id
from cedarberg.gateway.config.authn import DEFAULT_MAX_TOKEN_BYTES, OidcIssuerSettings, OidcSettings

MAX_PRINCIPAL_ID_LENGTH = 512


class _Rejected(Exception):
    """Internal: the token is refused; `reason` is for the log."""

    def __init__(
        self, reason: str, *, expired: bool = False, bad_signature: bool = False, unsupported: bool = False
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.expired = expired
        self.bad_signature = bad_signature
        self.unsupported = unsupported  # a DPoP-bound token: the client is told why


_UNVERIFIED = jwt.PyJWS()


def _unverified_parts(token: str, max_bytes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and claims of a compact JWS, without checking anything but its shape."""
    if len(token) > max_bytes:
        raise _Rejected(f"token of {len(token)} characters exceeds {max_bytes}")
    if not token.isascii() or token.count(".") != 2:
        raise _Rejected("not a compact JWS")
    try:
        parts = _UNVERIFIED.decode_complete(token, options={"verify_signature": False})
        claims = json.loads(parts["payload"])
    except (jwt.PyJWTError, ValueError, RecursionError) as exc:  # deep nesting: RecursionError
        raise _Rejected(f"malformed token ({type(exc).__name__})") from None
    if not isinstance(claims, dict):
        raise _Rejected("token payload is not a JSON object")
    return parts["header"], claims


def peek_issuer(token: str, max_bytes: int = DEFAULT_MAX_TOKEN_BYTES) -> str | None:
    """The unverified `iss` of a JWT, or None if `token` is not a JWT (for routing only)."""
    try:
        _, claims = _unverified_parts(token, max_bytes)
    except _Rejected:
        return None
    issuer = claims.get("iss")
    return issuer if isinstance(issuer, str) else None


def claim_at(claims: Mapping[str, Any], path: str) -> object:
    """The claim named `path`, else the value at dotted `path` through nested objects, else None."""
    if path in claims:
        return claims[path]
    value: object = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _check_lifetime(claims: Mapping[str, Any], settings: OidcIssuerSettings) -> None:
    """Refuse a token that lives longer than the issuer's maximum, counted from now (with the
    issuer's leeway for clock skew) and from its `iat` (both the issuer's clock: no leeway)."""
    # PyJWT accepts anything `int()` takes ("1e3", "99"); a NumericDate is a JSON number.
    exp, iat = claims["exp"], claims.get("iat")
    if not _numeric_date(exp) or (iat is not None and not _numeric_date(iat)):
        raise _Rejected("exp or iat is not a JSON number")
    longest = settings.max_token_lifetime_seconds
    if exp - time.time() > longest + settings.leeway_seconds:
        raise _Rejected(f"token from {settings.issuer} expires more than {longest} s from now")
    if iat is not None and exp - iat > longest:
        raise _Rejected(f"token from {settings.issuer} was issued for more than {longest} s")


def _numeric_date(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_binding(claims: Mapping[str, Any], peer: PeerCertificate) -> bytes | None:
    """The certificate thumbprint the token is bound to (None: a bearer token), after checking
    that this connection presents that certificate."""
    try:
        certificate = required_certificate(claims)
    except DpopBindingError as exc:
        raise _Rejected(str(exc), unsupported=True) from None
    except BindingError as exc:
        raise _Rejected(str(exc)) from None
    if certificate is not None and not certificate_matches(certificate, peer):
        raise _Rejected("certificate-bound token presented without its client certificate")
    return certificate


class _Issuer:
    def __init__(self, settings: OidcIssuerSettings, keys: IssuerKeys) -> None:
        self.settings = settings
        self.keys = keys
        self.audiences = list(settings.audiences)
        self.group_scope = IssuerGroupScope.of(settings)


class OidcAuthenticator:
    """Verifies bearer JWTs from the configured issuers. Use within one event loop."""

    def __init__(self, settings: OidcSettings, *, session: aiohttp.ClientSession | None = None) -> None:
        self._settings = settings
        self._session = session
        self._owns_session = session is None
        bounds = FetchBounds(
            timeout=settings.fetch_timeout_seconds,
            max_bytes=settings.max_document_bytes,
            min_interval=settings.refresh_min_interval_seconds,
            ttl=settings.cache_ttl_seconds,
        )
        self._issuers = {
            issuer.issuer: _Issuer(
                issuer,
                IssuerKeys(
                    self._get_session,
                    KeySource(
                        issuer=issuer.issuer,
                        discovery_url=issuer.discovery_url,
                        jwks_uri=issuer.jwks_uri,
                        algorithms=frozenset(issuer.algorithms),
                        allow_http=issuer.unsafe_allow_http,
                    ),
                    bounds,
                ),
            )
            for issuer in settings.issuers
        }

    @property
    def issuers(self) -> frozenset[str]:
        return frozenset(self._issuers)

    def handles(self, token: str) -> bool:
        """Whether `token` looks like a JWT from a configured issuer (unverified; for routing)."""
        return peek_issuer(token, self._settings.max_token_bytes) in self._issuers

    async def authenticate(self, token: str, peer: PeerCertificate = no_peer_certificate) -> Principal:
        """The principal a valid token names. `peer` gives the SHA-256 of the client certificate
        the connection's TLS handshake verified (asked only for a certificate-bound token).

        Raises `CredentialExpiredError` for a correctly signed but expired token,
        `UnsupportedBindingError` for a correctly signed DPoP-bound one and `AuthenticationError`
        for any other failure (the reason goes to the log).
        """
        try:
            return await self._authenticate(token, peer)
        except _Rejected as rejected:
            log.info("OIDC token rejected: %s", rejected.reason)
            if rejected.expired:
                raise CredentialExpiredError from None
            if rejected.unsupported:
                raise UnsupportedBindingError from None
            raise AuthenticationError from None

    async def authenticate_id_token(self, token: str, issuer: str, audience: str, nonce: str) -> Principal:
        """The principal an id_token of a sign-in names (the console's authorization code flow):
        verified exactly as a bearer token of `issuer` is (keys, algorithms, lifetime, claims), but
        for `audience` (the signing-in client's id, an id_token's `aud`) instead of the issuer's
        audiences, and only if its `nonce` claim is the sign-in's `nonce`. The principal is the one
        a bearer token of that issuer with the same claims would name (same id, same groups).

        Raises `AuthenticationError` (`CredentialExpiredError` once expired); the reason is logged."""
        try:
            return await self._id_token_principal(token, issuer, audience, nonce)
        except _Rejected as rejected:
            log.info("OIDC id_token rejected: %s", rejected.reason)
            if rejected.expired:
                raise CredentialExpiredError from None
            raise AuthenticationError from None

    async def _id_token_principal(self, token: str, issuer: str, audience: str, nonce: str) -> Principal:
        header, unverified = _unverified_parts(token, self._settings.max_token_bytes)
        if unverified.get("iss") != issuer:
            raise _Rejected(f"id_token issuer {short_repr(unverified.get('iss'))} is not {issuer}")
        principal, claims = await self._verified(token, header, unverified, no_peer_certificate, [audience])
        presented = claims.get("nonce")
        if not isinstance(presented, str) or not hmac.compare_digest(presented, nonce):
            raise _Rejected("id_token nonce does not match the sign-in's")
        return principal

    async def _authenticate(self, token: str, peer: PeerCertificate) -> Principal:
        header, unverified = _unverified_parts(token, self._settings.max_token_bytes)
        principal, _claims = await self._verified(token, header, unverified, peer, None)
        return principal

    async def _verified(
        self,
        token: str,
        header: dict[str, Any],
        unverified: dict[str, Any],
        peer: PeerCertificate,
        audiences: list[str] | None,
    ) -> tuple[Principal, dict[str, Any]]:
        """The principal and verified claims of `token`; `audiences` replaces the issuer's."""
        iss = unverified.get("iss")
        issuer = self._issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise _Rejected(f"issuer {short_repr(iss)} is not configured")
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in issuer.settings.algorithms:
            raise _Rejected(f"algorithm {short_repr(alg)} is not allowed for issuer {issuer.settings.issuer}")
        if kid is not None and not isinstance(kid, str):
            raise _Rejected("kid is not a string")
        key = await self._key(issuer, kid, alg)
        wanted = issuer.audiences if audiences is None else audiences
        try:
            claims = self._verify(token, issuer, key, alg, wanted)
        except _Rejected as rejected:
            # A key without kid can only be replaced, not added to: after a rotation at such an
            # issuer the one cached key fails, so look for a new one (within the refresh bounds).
            if not (rejected.bad_signature and kid is None and await issuer.keys.refresh()):
                raise
            key = await self._key(issuer, kid, alg)
            claims = self._verify(token, issuer, key, alg, wanted)
        _check_lifetime(claims, issuer.settings)
        certificate = _check_binding(claims, peer)
        if key.lease is None:  # keys are installed with a lease: a key without one is not in a set
            raise _Rejected("signing key is not part of the issuer's current key set")
        return self._principal(claims, issuer, Proof(key.lease, certificate)), claims

    @staticmethod
    async def _key(issuer: _Issuer, kid: str | None, alg: str) -> VerificationKey:
        try:
            return await issuer.keys.key_for(kid, alg)
        except JwksError as exc:
            raise _Rejected(str(exc)) from None

    def _verify(
        self, token: str, issuer: _Issuer, key: VerificationKey, alg: str, audiences: list[str]
    ) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=audiences,
                issuer=issuer.settings.issuer,
                leeway=issuer.settings.leeway_seconds,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.InvalidSignatureError:
            raise _Rejected("signature verification failed", bad_signature=True) from None
        except jwt.ExpiredSignatureError:
            raise _Rejected(f"token from {issuer.settings.issuer} has expired", expired=True) from None
        except jwt.PyJWTError as exc:
            raise _Rejected(f"{type(exc).__name__}: {exc}") from None
        return claims

    def _principal(self, claims: Mapping[str, Any], issuer: _Issuer, proof: Proof) -> Principal:
        settings = issuer.settings
        subject = claim_at(claims, settings.principal_claim)
        if isinstance(subject, int) and not isinstance(subject, bool):
            subject = str(subject)
        if not isinstance(subject, str) or not subject or len(subject) > MAX_PRINCIPAL_ID_LENGTH:
            raise _Rejected(f"principal claim {settings.principal_claim!r} is missing or not a usable string")
        groups: frozenset[str] = frozenset()
        if settings.groups_claim:
            try:
                asserted = asserted_groups(claim_at(claims, settings.groups_claim), settings.groups_separator)
            except GroupsClaimError as exc:
                raise _Rejected(str(exc)) from None
            groups = issuer.group_scope.groups(asserted)
        attributes = {"issuer": settings.issuer}
        for name, path in settings.attribute_claims.items():
            value = claim_at(claims, path)
            if isinstance(value, str | int | float | bool):
                attributes[name] = str(value)
        return Principal(
            id=oidc_principal_id(settings.namespace, settings.principal_prefix + subject),
            kind=settings.principal_kind,
            groups=groups,
            auth_method=AuthMethod.JWT,
            attributes=attributes,
            proof=proof,
        )

    async def warm_up(self) -> None:
        """Download every issuer's keys now (e.g. at startup); failures are logged, not raised."""
        for issuer in self._issuers.values():
            await issuer.keys.refresh()

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=False)
        return self._session

    async def close(self) -> None:
        for issuer in self._issuers.values():
            await issuer.keys.close()
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
