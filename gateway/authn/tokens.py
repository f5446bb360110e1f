"""Short-lived access tokens issued by the gateway itself: Ed25519-signed JWTs (alg `EdDSA`).

Public API::

    issuer = TokenIssuer.open(TokenSettings(), data_dir)   # loads or creates the signing key
    token, expires_in = issuer.issue(principal)
    principal = issuer.verify(token)    # raises AuthenticationError / CredentialExpiredError
    issuer.jwks()                       # {"keys": [public JWK with kid]} for /.well-known/jwks.json

The signing key is either the PEM file named by `TokenSettings.key_file` (for several gateway
processes, give them all the same file, so each verifies the others' tokens), or
`<data_dir>/token-signing-key.pem`, created on first use with mode 0600 (written to a temporary
file, then linked into place, so processes starting together agree on one key). The key id is
the RFC 7638 thumbprint of the public key.

Verification is strict: the token is at most `max_token_bytes` long; its header must say
`alg: EdDSA`, `typ: at+jwt` and our `kid` (so `none`, HMAC with the public key as secret, and
tokens signed by any other key are refused before the signature is looked at, and PyJWT is
additionally pinned to EdDSA with an Ed25519 public key); `iss`, `aud`, `exp`, `nbf`, `iat`, `sub`
are required and checked with `leeway_seconds`; the custom claims must have the right types. A
token lives no longer than `ttl_seconds` (from its `iat`, and from now plus leeway), as issued: a
token claiming a longer life was not issued under these settings and is refused (so lowering
`ttl_seconds` also shortens tokens already out). The gateway issues bearer tokens only: one carrying
a confirmation claim (`cnf`) is refused, since nothing here could check its binding.
Every failure raises the generic `AuthenticationError`, except an otherwise valid expired token,
which raises `CredentialExpiredError` (the gateway answers 419 where the Iceberg spec allows it).

A token issued for an API key carries the key's id (`attrs.api_key_id`) and generation (`kgen`,
see `Principal.key_generation`); `verify` checks only the token itself, and the caller
(`BearerAuthenticator.authenticate`) then refuses it through `ApiKeyAuthenticator.check_token` if the
key was rotated or revoked after it was issued. Refreshing a token (see `gateway.authn.oauth`)
re-checks the key in the store.

A token issued for a user an engine acts for (delegation, `gateway.authn.delegation`) names the
user in `sub` (`user:<name>` or `oidc:<issuer>/<subject>`) and the engine in an RFC 8693 `act`
claim (`{"sub": "key:<engine>"}`); its `attrs.api_key_id` and `kgen` are the ENGINE's key, so the
engine key's rotation or revocation cuts it off like any token of that key; `dlg` holds what the
delegation decision saw of the subject (`DelegationFacts`), so a refresh is decided on the same
facts. It may live shorter than `ttl_seconds` (`issue(..., lifetime=...)`): never longer than
the actor's token or a signed subject. `verify` refuses an `act` naming anything but an API key's
principal, a delegated `sub` without `act`, and an `act` on an API key's own principal.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import secrets
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jwt
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from cedarberg.gateway.authn.errors import AuthenticationError, CredentialExpiredError
from cedarberg.gateway.authn.principal import (
    DELEGATED_NAMESPACE,
    KEY_NAMESPACE,
    OIDC_NAMESPACE,
    AuthMethod,
    Principal,
    PrincipalKind,
)
from cedarberg.gateway.authn.subject_token import DelegationFacts
from cedarberg.gateway.config.authn import DEFAULT_KEY_FILE, TokenSettings

log = logging.getLogger("cedarberg.authn.tokens")

ALGORITHM = "EdDSA"
# RFC 9068: marks the JWT as an access token, not an id token or any other JWT.
TOKEN_TYPE = "at+jwt"  # noqa: S105
_MAX_GROUPS = 64
_MAX_ATTRIBUTES = 16
_MAX_CLAIM_STRING = 1024


class TokenKeyError(Exception):
    """The signing key cannot be loaded or created (a start-up error naming the file)."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _public_jwk(public_key: Ed25519PublicKey) -> dict[str, str]:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"crv": "Ed25519", "kty": "OKP", "x": _b64url(raw)}


def _thumbprint(jwk: Mapping[str, str]) -> str:
    """RFC 7638: SHA-256 over the required members, sorted, without whitespace."""
    canonical = orjson.dumps({k: jwk[k] for k in ("crv", "kty", "x")}, option=orjson.OPT_SORT_KEYS)
    return _b64url(hashlib.sha256(canonical).digest())


def _load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise TokenKeyError(f"cannot load the token signing key {path}: {type(err).__name__}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise TokenKeyError(f"the token signing key {path} is not an Ed25519 private key")
    return key


def _group_or_other_access(path: Path) -> bool:
    return bool(stat.S_IMODE(path.stat().st_mode) & 0o077)


def _create_private_key(path: Path) -> None:
    """Write a new key to `path` unless another process got there first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # atomic, and fails if the file exists: the first writer wins
    finally:
        tmp.unlink(missing_ok=True)


class TokenIssuer:
    """Issues and verifies the gateway's access tokens with one Ed25519 key."""

    def __init__(self, settings: TokenSettings, private_key: Ed25519PrivateKey) -> None:
        self._settings = settings
        self._private_key = private_key
        self._public_key = private_key.public_key()
        jwk = _public_jwk(self._public_key)
        self._kid = _thumbprint(jwk)
        self._jwk = {**jwk, "kid": self._kid, "alg": ALGORITHM, "use": "sig"}

    @classmethod
    def open(cls, settings: TokenSettings, data_dir: Path) -> TokenIssuer:
        """Load the configured key, or load/create the one under `data_dir`. Raises TokenKeyError.

        Refuses a key under `data_dir` that group or others may access (it was created 0600, so
        someone changed it); only warns for a configured `key_file`, whose mode the operator chose.
        """
        if settings.key_file is not None:
            path = settings.key_file
            if not path.is_file():
                raise TokenKeyError(f"the token signing key {path} does not exist")
            if _group_or_other_access(path):
                log.warning("token signing key %s is accessible to group or others", path)
            return cls(settings, _load_private_key(path))
        path = data_dir / DEFAULT_KEY_FILE
        try:
            if not path.exists():
                _create_private_key(path)
                log.info("created token signing key %s", path)
            if _group_or_other_access(path):
                raise TokenKeyError(f"the token signing key {path} must not be accessible to group or others")
        except OSError as err:
            raise TokenKeyError(f"cannot create the token signing key {path}: {type(err).__name__}") from None
        return cls(settings, _load_private_key(path))

    @property
    def settings(self) -> TokenSettings:
        return self._settings

    @property
    def kid(self) -> str:
        return self._kid

    def jwks(self) -> dict[str, Any]:
        """The public JWK set that verifies issued tokens."""
        return {"keys": [dict(self._jwk)]}

    def issue(
        self, principal: Principal, lifetime: int | None = None, delegation: DelegationFacts | None = None
    ) -> tuple[str, int]:
        """A signed token for `principal` and its lifetime in seconds: `ttl_seconds`, or
        `lifetime` if shorter (at least 1). A principal with an `actor` needs `delegation`."""
        now = int(time.time())
        ttl = self._settings.ttl_seconds
        if principal.key_secret_until is not None:  # a previous key secret: not past its overlap
            lifetime = min(lifetime or ttl, int(principal.key_secret_until) - now)
        if lifetime is not None:
            ttl = max(1, min(lifetime, ttl))
        claims = {
            "iss": self._settings.issuer,
            "aud": self._settings.audience,
            "sub": principal.id,
            "iat": now,
            "nbf": now,
            "exp": now + ttl,
            "jti": secrets.token_urlsafe(16),
            "kind": principal.kind.value,
            "groups": sorted(principal.groups),
            "attrs": dict(principal.attributes),
        }
        if principal.key_generation is not None:
            claims["kgen"] = principal.key_generation
        if principal.actor is not None:
            if delegation is None:
                raise ValueError("a delegated principal's token needs the delegation facts")
            claims["act"] = {"sub": principal.actor}
            claims["dlg"] = delegation.to_claim()
        headers = {"kid": self._kid, "typ": TOKEN_TYPE}
        return jwt.encode(claims, self._private_key, algorithm=ALGORITHM, headers=headers), ttl

    def verify(self, token: str) -> Principal:
        """The principal a token was issued for. Raises AuthenticationError, CredentialExpiredError."""
        return self.verify_delegation(token)[0]

    def verify_delegation(self, token: str) -> tuple[Principal, DelegationFacts | None]:
        """`verify`, with the delegation facts of a token issued for a user an engine acts for
        (None for other tokens). Raises like `verify`."""
        if len(token) > self._settings.max_token_bytes:
            log.info("gateway token rejected: too long")
            raise AuthenticationError
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            log.info("gateway token rejected: malformed")
            raise AuthenticationError from None
        if (
            header.get("alg") != ALGORITHM
            or header.get("typ") != TOKEN_TYPE
            or header.get("kid") != self._kid
        ):
            log.info("gateway token rejected: unexpected header")
            raise AuthenticationError
        try:
            claims = jwt.decode(
                token,
                self._public_key,
                algorithms=[ALGORITHM],
                audience=self._settings.audience,
                issuer=self._settings.issuer,
                leeway=self._settings.leeway_seconds,
                options={"require": ["iss", "aud", "sub", "iat", "nbf", "exp"]},
            )
        except jwt.ExpiredSignatureError:
            log.info("gateway token rejected: expired")
            raise CredentialExpiredError from None
        except jwt.PyJWTError as err:
            log.info("gateway token rejected: %s", type(err).__name__)
            raise AuthenticationError from None
        if not self._issued_here(claims):
            raise AuthenticationError
        principal = _principal_from_claims(claims)
        facts = DelegationFacts.from_claim(claims["dlg"]) if "dlg" in claims else None
        if principal is None or (principal.actor is None) != (facts is None):
            log.info("gateway token rejected: malformed claims")
            raise AuthenticationError
        return principal, facts

    def _issued_here(self, claims: Mapping[str, Any]) -> bool:
        """Whether the lifetime and binding are those `issue` gives (logs the reason if not)."""
        exp, iat, ttl = claims["exp"], claims["iat"], self._settings.ttl_seconds
        if not all(type(value) is int for value in (exp, iat)):
            log.info("gateway token rejected: exp or iat is not an integer")
            return False
        if exp - iat > ttl or exp - time.time() > ttl + self._settings.leeway_seconds:
            log.info("gateway token rejected: lives longer than ttl_seconds")
            return False
        if "cnf" in claims:
            log.info("gateway token rejected: carries a confirmation claim it was never issued with")
            return False
        return True


def _is_short_str(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_CLAIM_STRING


def _principal_from_claims(claims: Mapping[str, Any]) -> Principal | None:
    sub, kind = claims.get("sub"), claims.get("kind")
    groups, attrs = claims.get("groups"), claims.get("attrs")
    generation = claims.get("kgen")
    if not _is_short_str(sub) or kind not in (PrincipalKind.USER.value, PrincipalKind.SERVICE.value):
        return None
    act_ok, actor = _actor(claims.get("act"))
    if not act_ok:
        return None
    # Issued only for API keys, in their namespace, or for users they act for.
    if actor is None and not str(sub).startswith(KEY_NAMESPACE):
        return None
    if actor is not None and not str(sub).startswith((DELEGATED_NAMESPACE, OIDC_NAMESPACE)):
        return None  # a delegated token names a directory or OIDC user, never a key
    if not isinstance(groups, list) or len(groups) > _MAX_GROUPS or not all(map(_is_short_str, groups)):
        return None
    if not isinstance(attrs, dict) or len(attrs) > _MAX_ATTRIBUTES:
        return None
    if not all(
        _is_short_str(k) and isinstance(v, str) and len(v) <= _MAX_CLAIM_STRING for k, v in attrs.items()
    ):
        return None
    if generation is not None and (type(generation) is not int or generation < 0):
        return None
    if actor is not None and ("api_key_id" not in attrs or generation is None):
        return None  # the actor's key is what a delegated token stays valid on
    if "api_key_id" in attrs and generation is None:
        generation = 0  # issued before generations existed: void after the key's next change
    return Principal(
        id=str(sub),
        kind=PrincipalKind(kind),
        groups=frozenset(groups),
        auth_method=AuthMethod.GATEWAY_TOKEN,
        attributes=dict(attrs),
        key_generation=generation,
        actor=actor,
    )


def _actor(claim: object) -> tuple[bool, str | None]:
    """(well-formed, the actor an `act` claim names): an API key's principal id, None without
    the claim; not well-formed otherwise (nested RFC 8693 `act` chains are never issued here)."""
    if claim is None:
        return True, None
    if not isinstance(claim, dict) or set(claim) != {"sub"}:
        return False, None
    sub = claim["sub"]
    if not _is_short_str(sub) or not str(sub).startswith(KEY_NAMESPACE):
        return False, None
    return True, str(sub)
