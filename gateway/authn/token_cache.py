"""Verified bearer JWTs (gateway-issued and OIDC), kept until they expire.

A signature check costs tens of microseconds per request; a cached verification costs one SHA-256
of the token. Invariants:
- Keyed by the SHA-256 of the token, so the cache holds no bearer secret.
- Only a token that passed full verification is stored, with the `nbf`/`exp` of its (then
  trusted) claims; a hit outside [nbf, exp) — without leeway, so never more lenient than full
  verification — is dropped and the token verified again (which raises the right error).
- Bounded in entries and in estimated bytes (the principals' ids, groups and attributes, which
  an OIDC issuer's tokens choose), least recently used first; a principal larger than
  `MAX_ENTRY_BYTES` is verified on every request instead of being cached
  (`gateway.byte_lru`).
- A hit is used only while the principal's `Proof` holds (`gateway.authn.credential`, O(1)): the
  OIDC signing key is still in its issuer's key set and that set is not due for a refresh (else the
  token is verified again, which refreshes the set and refuses a withdrawn key), and a token bound
  to a client certificate is presented on a connection with that certificate. So an entry lives
  at most until min(`exp`, its key's withdrawal), and never serves another connection's
  certificate. Gateway tokens carry no proof: their key is the gateway's own, and rotation or
  revocation of their API key is checked by the caller on every use.
"""

from __future__ import annotations

import base64
import hashlib
import time

import orjson

from cedarberg.gateway.authn.credential import PeerCertificate, no_peer_certificate
from cedarberg.gateway.authn.principal import Principal, principal_bytes
from cedarberg.gateway.byte_lru import ByteBoundedLru
from cedarberg.gateway.config.authn import DEFAULT_VERIFIED_CACHE_BYTES, DEFAULT_VERIFIED_CACHE_SIZE

DEFAULT_MAX_ENTRIES = DEFAULT_VERIFIED_CACHE_SIZE
DEFAULT_MAX_BYTES = DEFAULT_VERIFIED_CACHE_BYTES
MAX_ENTRY_BYTES = 64 * 1024
_KEY_BYTES = 90  # a 32-byte digest and two floats


def validity(token: str) -> tuple[float, float] | None:
    """(nbf, exp) from a verified token's payload; None if it has no numeric exp."""
    try:
        payload = token.split(".")[1]
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    exp, nbf = claims.get("exp"), claims.get("nbf", 0)
    if not isinstance(exp, int | float) or not isinstance(nbf, int | float):
        return None
    return float(nbf), float(exp)


class VerifiedTokenCache:
    """Used from the event loop only."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_entries = max_entries
        self._entries: ByteBoundedLru[bytes, tuple[Principal, float, float]] = ByteBoundedLru(
            max_entries, max_bytes, MAX_ENTRY_BYTES
        )

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def estimated_bytes(self) -> int:
        """Estimated bytes held (at most `max_bytes`)."""
        return self._entries.estimated_bytes

    @staticmethod
    def _key(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def get(self, token: str, peer: PeerCertificate = no_peer_certificate) -> Principal | None:
        """The principal of a cached, currently valid verification of `token` on a connection
        presenting `peer`, else None (verify in full)."""
        if not self._entries.enabled:
            return None
        key = self._key(token)
        entry = self._entries.get(key)
        if entry is None:
            return None
        principal, nbf, exp = entry
        proof = principal.proof
        if not nbf <= time.time() < exp or (proof is not None and not proof.lease.current):
            self._entries.pop(key)
            return None
        if proof is not None and not proof.holds(peer):
            return None  # another connection's certificate: verify in full (which refuses it)
        return principal

    def put(self, token: str, principal: Principal) -> None:
        """Remember a token that was just verified in full."""
        if not self._entries.enabled:
            return
        bounds = validity(token)
        if bounds is None:
            return
        self._entries.put(self._key(token), (principal, *bounds), _KEY_BYTES + principal_bytes(principal))
