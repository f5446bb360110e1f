"""Verified bearer JWTs (gateway-issued and OIDC), kept until they expire.

A signature check costs tens of microseconds per request; a cached verification costs one SHA-256
of the token. Invariants:
- Keyed by the SHA-256 of the token, so the cache holds no bearer secret.
- Only a token that passed full verification is stored, with the `nbf`/`exp` of its (then
  trusted) claims; a hit outside [nbf, exp) — without leeway, so never more lenient than full
  verification — is dropped and the token verified again (which raises the right error).
- Bounded: least recently used entries go first.
- What verification would learn later is not seen before `exp`: a signing key removed from an
  issuer's JWKS keeps its unexpired tokens valid here until they expire (as tokens of a revoked API
  key already do; keep token lifetimes short).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections import OrderedDict

import orjson

from gateway.authn.principal import Principal

DEFAULT_MAX_ENTRIES = 10_000


def _validity(token: str) -> tuple[float, float] | None:
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

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, tuple[Principal, float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _key(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def get(self, token: str) -> Principal | None:
        """The principal of a cached, currently valid verification of `token`, else None."""
        if self.max_entries <= 0:
            return None
        key = self._key(token)
        entry = self._entries.get(key)
        if entry is None:
            return None
        principal, nbf, exp = entry
        if not nbf <= time.time() < exp:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return principal

    def put(self, token: str, principal: Principal) -> None:
        """Remember a token that was just verified in full."""
        if self.max_entries <= 0:
            return
        validity = _validity(token)
        if validity is None:
            return
        self._entries[self._key(token)] = (principal, *validity)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
