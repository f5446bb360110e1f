"""Signing keys of one OIDC issuer: discovery, JWKS download, parsing and a bounded refresh.

Invariants:
- Only asymmetric public keys are kept (RSA >= 2048 bits, EC P-256/384/521, Ed25519/Ed448), each
  with the set of algorithms it may verify: the JWK's own `alg` if it names one, else what its key
  type and curve allow, intersected with the issuer's pinned algorithms. Symmetric (`oct`) keys,
  keys with private members, encryption keys and unparsable keys are dropped, so an HMAC token can
  never be checked against a public key.
- Downloads use a bounded total timeout, refuse redirects and any status but 200, and stop reading
  past `max_document_bytes` (after decompression).
- A refresh starts at most once per `min_interval` seconds whatever triggered it (first use, the
  cache TTL, an unknown `kid`), and concurrent callers share one download (single flight, shielded
  from a caller's cancellation). A failed refresh keeps the last good key set.
- Every key carries a `KeyLease` (`gateway.authn.credential`): a refresh that drops a key (same
  `kid` and public key material) retires its lease before any later request is served, a key kept
  across a refresh keeps its lease, and all leases read as stale once the set is `ttl` old, so a
  remembered verification (the verified-token cache, request plans) never outlives its key.
- An https issuer's keys come over https: a discovered (or configured) `jwks_uri` that is not
  https is refused for such an issuer, whatever `allow_http` says; redirects are never followed.

Errors: every failure is a `JwksError` whose message is for the log only (never for a client).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.ed448 import Ed448PublicKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from jwt.algorithms import get_default_algorithms
from jwt.exceptions import PyJWTError

from cedarberg.gateway.authn.credential import Freshness, KeyLease
from cedarberg.gateway.config.authn import EC_ALGORITHMS, RSA_ALGORITHMS, keys_url_allowed

log = logging.getLogger("cedarberg.authn.oidc")

PublicKey = RSAPublicKey | EllipticCurvePublicKey | Ed25519PublicKey | Ed448PublicKey

OKP_CURVES = frozenset({"Ed25519", "Ed448"})
MIN_RSA_BITS = 2048
MAX_KEYS = 100  # JWKS entries looked at; real issuers publish a handful
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


class JwksError(Exception):
    """Discovery or key lookup failed; the message names why, for the log only."""


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """A public key from an issuer's JWKS, the algorithms it may verify and its lease (`None`
    until its key set is installed by `IssuerKeys`)."""

    kid: str | None
    key: PublicKey
    algorithms: frozenset[str]
    lease: KeyLease | None = None

    @property
    def identity(self) -> tuple[str | None, bytes, frozenset[str]]:
        """What makes two downloads of a key the same key: kid, public key material, algorithms."""
        der = self.key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return self.kid, der, self.algorithms


def key_algorithms(jwk: Mapping[str, Any]) -> frozenset[str]:
    """The asymmetric algorithms a JWK can verify (empty for symmetric or unknown keys)."""
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "RSA":
        algorithms = RSA_ALGORITHMS
    elif kty == "EC" and isinstance(crv, str) and crv in EC_ALGORITHMS:
        algorithms = frozenset({EC_ALGORITHMS[crv]})
    elif kty == "OKP" and crv in OKP_CURVES:
        algorithms = frozenset({"EdDSA"})
    else:
        return frozenset()
    declared = jwk.get("alg")
    if declared is not None:
        algorithms = algorithms & {declared} if isinstance(declared, str) else frozenset()
    return algorithms


def parse_jwks(document: Mapping[str, Any], allowed: frozenset[str]) -> tuple[VerificationKey, ...]:
    """The usable verification keys of a JWKS document; unusable entries are skipped (and logged).

    Raises `JwksError` if the document is not a JWK set at all.
    """
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise JwksError("JWKS document has no 'keys' list")
    keys: list[VerificationKey] = []
    for entry in entries[:MAX_KEYS]:
        key = _parse_key(entry, allowed)
        if key is not None:
            keys.append(key)
    return tuple(keys)


def _parse_key(entry: object, allowed: frozenset[str]) -> VerificationKey | None:
    if not isinstance(entry, dict):
        return None
    kid = entry.get("kid")
    if kid is not None and not isinstance(kid, str):
        return None
    if entry.get("use", "sig") != "sig":
        return None
    key_ops = entry.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        return None
    if _PRIVATE_MEMBERS & entry.keys():
        log.warning("JWKS key %s carries private or symmetric key material; ignored", short_repr(kid))
        return None
    algorithms = key_algorithms(entry) & allowed
    if not algorithms:
        return None
    try:
        parsed = get_default_algorithms()[min(algorithms)].from_jwk(entry)
    except (PyJWTError, ValueError, TypeError, KeyError) as exc:
        log.warning("JWKS key %s cannot be parsed (%s); ignored", short_repr(kid), type(exc).__name__)
        return None
    if not isinstance(parsed, PublicKey):
        return None
    if isinstance(parsed, RSAPublicKey) and parsed.key_size < MIN_RSA_BITS:
        log.warning("JWKS key %s is a %d-bit RSA key; ignored", short_repr(kid), parsed.key_size)
        return None
    return VerificationKey(kid=kid, key=parsed, algorithms=algorithms)


async def fetch_json(
    session: aiohttp.ClientSession, url: str, *, time_limit: float, max_bytes: int
) -> dict[str, Any]:
    """GET `url` and parse a JSON object from it, within `time_limit` seconds and `max_bytes`."""
    body = bytearray()
    try:
        async with session.get(
            url,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=time_limit),
            headers={"Accept": "application/json, application/jwk-set+json"},
        ) as response:
            if response.status != 200:
                raise JwksError(f"{url} answered HTTP {response.status}")
            if response.content_length is not None and response.content_length > max_bytes:
                raise JwksError(f"{url} sent {response.content_length} bytes (limit {max_bytes})")
            async for chunk in response.content.iter_chunked(64 * 1024):
                body += chunk
                if len(body) > max_bytes:
                    raise JwksError(f"{url} sent more than {max_bytes} bytes")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise JwksError(f"{url} could not be fetched: {type(exc).__name__}: {exc}") from exc
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise JwksError(f"{url} did not return JSON") from exc
    if not isinstance(document, dict):
        raise JwksError(f"{url} did not return a JSON object")
    return document


@dataclass(frozen=True, slots=True)
class KeySource:
    """Where an issuer's keys come from and which algorithms they may be used with."""

    issuer: str
    discovery_url: str | None  # None: the issuer's /.well-known/openid-configuration
    jwks_uri: str | None  # None: discovered
    algorithms: frozenset[str]
    allow_http: bool  # plain-HTTP URLs accepted (tests and closed networks only)


@dataclass(frozen=True, slots=True)
class FetchBounds:
    """How key sets are fetched and kept: shared by every issuer."""

    timeout: float  # seconds per fetch
    max_bytes: int  # the largest document read
    min_interval: float  # seconds between two refreshes of one issuer
    ttl: float  # seconds a fetched key set (and a discovered jwks_uri) is used


class IssuerKeys:
    """The cached key set of one issuer, refreshed on demand within the bounds described above."""

    def __init__(
        self, session: Callable[[], Awaitable[aiohttp.ClientSession]], source: KeySource, bounds: FetchBounds
    ) -> None:
        issuer, discovery_url, jwks_uri = source.issuer, source.discovery_url, source.jwks_uri
        algorithms, allow_http = source.algorithms, source.allow_http
        timeout, max_bytes, min_interval, ttl = (
            bounds.timeout,
            bounds.max_bytes,
            bounds.min_interval,
            bounds.ttl,
        )
        self._session = session
        self._issuer = issuer
        self._discovery_url = discovery_url or issuer.rstrip("/") + "/.well-known/openid-configuration"
        self._configured_jwks_uri = jwks_uri
        self._jwks_uri = jwks_uri  # discovered value, cached for `ttl`
        self._discovered_at = 0.0
        self._algorithms = algorithms
        self._allow_http = allow_http
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._min_interval = min_interval
        self._ttl = ttl
        self._keys: tuple[VerificationKey, ...] | None = None
        self._last_attempt: float | None = None
        self._inflight: asyncio.Task[bool] | None = None
        self._freshness = Freshness()

    @property
    def keys(self) -> tuple[VerificationKey, ...]:
        """The key set currently cached (empty before the first successful load)."""
        return self._keys or ()

    async def key_for(self, kid: str | None, alg: str) -> VerificationKey:
        """The key that verifies a token with header `kid` and `alg`.

        A token without `kid` is matched only when the set holds exactly one usable key. An unknown
        `kid` triggers a refresh, subject to the refresh bounds. Raises `JwksError`.
        """
        if self._keys is None or time.monotonic() >= self._freshness.until:
            await self.refresh()
        key = self._find(kid, alg)
        if key is None and kid is not None and await self.refresh():
            key = self._find(kid, alg)
        if key is None:
            if self._keys is None:
                raise JwksError(f"no keys loaded for issuer {self._issuer}")
            if kid is None:
                raise JwksError(f"token has no kid and the JWKS holds {len(self._keys)} usable keys")
            raise JwksError(f"unknown kid {short_repr(kid)}")
        if alg not in key.algorithms:
            raise JwksError(
                f"key {short_repr(kid)} is not usable with {alg} (allows {sorted(key.algorithms)})"
            )
        return key

    def _find(self, kid: str | None, alg: str) -> VerificationKey | None:
        keys = self._keys or ()
        if kid is None:
            return keys[0] if len(keys) == 1 else None
        matching = [key for key in keys if key.kid == kid]
        return next((key for key in matching if alg in key.algorithms), matching[0] if matching else None)

    async def refresh(self) -> bool:
        """Reload the key set unless one was attempted less than `min_interval` seconds ago.

        Returns whether a new key set is in place (also when another caller's download, joined
        here, succeeded). Never raises for download problems: they are logged and the old set stays.
        """
        if self._inflight is None:
            now = time.monotonic()
            if self._last_attempt is not None and now - self._last_attempt < self._min_interval:
                return False
            self._last_attempt = now
            task = asyncio.create_task(self._reload())
            self._inflight = task
            task.add_done_callback(self._clear_inflight)
        return await asyncio.shield(self._inflight)

    def _clear_inflight(self, task: asyncio.Task[bool]) -> None:
        if self._inflight is task:
            self._inflight = None

    async def _reload(self) -> bool:
        try:
            keys = await self._download()
        except JwksError as exc:
            log.warning("OIDC issuer %s: key refresh failed: %s", self._issuer, exc)
            return False
        except Exception:
            log.exception("OIDC issuer %s: key refresh failed unexpectedly", self._issuer)
            return False
        if not keys:
            log.warning(
                "OIDC issuer %s: JWKS holds no key usable with %s", self._issuer, sorted(self._algorithms)
            )
        self._install(keys)
        log.info("OIDC issuer %s: loaded %d signing keys", self._issuer, len(keys))
        return True

    def _install(self, downloaded: tuple[VerificationKey, ...]) -> None:
        """Put a new key set in place: keys it keeps keep their lease, keys it drops are retired
        (in the same step, so no later request sees a dropped key's lease as current)."""
        previous = {key.identity: key.lease for key in self._keys or () if key.lease is not None}
        installed = tuple(
            dataclasses.replace(key, lease=previous.pop(key.identity, None) or KeyLease(self._freshness))
            for key in downloaded
        )
        for lease in previous.values():
            lease.retire()
        self._keys = installed
        self._freshness.renew(self._ttl)
        if previous:
            log.info("OIDC issuer %s: %d signing keys withdrawn", self._issuer, len(previous))

    def retire_all(self) -> None:
        """End every verification made with this issuer's keys (the issuer is going away)."""
        for key in self._keys or ():
            if key.lease is not None:
                key.lease.retire()
        self._keys = None

    async def _download(self) -> tuple[VerificationKey, ...]:
        session = await self._session()
        jwks_uri = await self._current_jwks_uri(session)
        try:
            document = await fetch_json(
                session, jwks_uri, time_limit=self._timeout, max_bytes=self._max_bytes
            )
        except JwksError:
            if self._configured_jwks_uri is None:
                self._jwks_uri = None  # discover again next time: the issuer may have moved it
            raise
        return parse_jwks(document, self._algorithms)

    async def _current_jwks_uri(self, session: aiohttp.ClientSession) -> str:
        if self._configured_jwks_uri is not None:
            return self._configured_jwks_uri
        if self._jwks_uri is not None and time.monotonic() - self._discovered_at < self._ttl:
            return self._jwks_uri
        document = await fetch_json(
            session, self._discovery_url, time_limit=self._timeout, max_bytes=self._max_bytes
        )
        if document.get("issuer") != self._issuer:
            raise JwksError(
                f"discovery document names issuer {short_repr(document.get('issuer'))}, not {self._issuer}"
            )
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not keys_url_allowed(
            jwks_uri, issuer=self._issuer, allow_http=self._allow_http
        ):
            raise JwksError(
                f"discovery document has no acceptable jwks_uri: {short_repr(jwks_uri)} "
                "(an https issuer's keys must come over https)"
            )
        self._jwks_uri = jwks_uri
        self._discovered_at = time.monotonic()
        return jwks_uri

    async def close(self) -> None:
        """Cancel a download in progress and retire every key (see `retire_all`)."""
        task = self._inflight
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.retire_all()


def short_repr(value: object, limit: int = 80) -> str:
    """A bounded repr of an untrusted value, safe to put in a log line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
