"""What keeps API key verification cheap and un-abusable: the Argon2id hasher, the verified-key
cache and the per-(key id, client) lockout. In-memory, per process; used by `gateway.authn.api_keys`.

- `SecretHasher`: Argon2id with argon2-cffi's default (RFC 9106 low-memory) parameters, run in a
  worker thread behind a semaphore, so hashing never blocks the event loop and at most
  `concurrency` hashes run at once. `hash_count` counts every hash and verify actually run.
- `VerifiedCache`: presented keys that verified, keyed by HMAC-SHA256 of the whole key under a
  random per-process key. A hit proves the caller presented exactly a key that verified before,
  without Argon2 and without keeping the key itself in memory. Bounded (LRU) in entries and in
  estimated bytes (`gateway.byte_lru`), with a TTL; entries of one key id are evicted together on
  revoke or rotate. Each entry's principal carries a `Proof` whose lease (`gateway.authn.credential`)
  is current exactly while the entry would be a hit by age and is retired the moment the entry
  leaves the cache for any reason (TTL, expiry, eviction, rotation, revocation, a stale change
  feed's clear), so whatever remembers the principal beyond the cache (request plans,
  `gateway.web.replay`) ends with the entry, in O(1) and without the key.
- `Lockout`: failed verifications per subject (the API key authenticator uses the key id together
  with the client address, so a guesser locks out only itself). After `threshold` failures within
  `window` seconds (counting verifications still in flight, so a burst of concurrent guesses
  cannot overshoot), the subject is locked out for `duration` seconds: no lookup and no hash
  happen for it until then. At most `max_tracked` subjects are tracked (least recently used go).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from cedarberg.gateway.authn.credential import Freshness, KeyLease, Proof
from cedarberg.gateway.authn.principal import Principal, principal_bytes
from cedarberg.gateway.byte_lru import ByteBoundedLru
from cedarberg.gateway.config.authn import DEFAULT_CACHE_BYTES

MAX_ENTRY_BYTES = 64 * 1024
_ENTRY_BYTES = 150  # the digest, the key id and three floats


class SecretHasher:
    """Argon2id hashing off the event loop with bounded concurrency."""

    def __init__(self, concurrency: int) -> None:
        self._hasher = PasswordHasher()  # argon2id, library defaults
        self._slots = asyncio.Semaphore(concurrency)
        self.hash_count = 0

    async def hash(self, secret: str) -> str:
        async with self._slots:
            self.hash_count += 1
            return await asyncio.to_thread(self._hasher.hash, secret)

    async def verify(self, encoded: str, secret: str) -> bool:
        """True if `secret` matches `encoded`; False on mismatch or an unreadable hash.

        argon2 recomputes the hash and compares it in constant time.
        """
        async with self._slots:
            self.hash_count += 1
            try:
                return await asyncio.to_thread(self._hasher.verify, encoded, secret)
            except (VerificationError, InvalidHashError):
                return False

    def needs_rehash(self, encoded: str) -> bool:
        """True if `encoded` was made with parameters other than the current defaults."""
        try:
            return self._hasher.check_needs_rehash(encoded)
        except InvalidHashError:
            return False


@dataclass(frozen=True, slots=True)
class CacheEntry:
    principal: Principal
    key_id: str
    expires_at: float | None  # wall-clock epoch seconds of the key's expiry
    cached_at: float  # monotonic
    lease: KeyLease  # current while this entry is a hit; retired when it leaves the cache


class VerifiedCache:
    """LRU + TTL map from a keyed digest of a presented key to the principal it proved."""

    def __init__(self, max_entries: int, ttl_seconds: float, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._ttl = ttl_seconds
        self._digest_key = secrets.token_bytes(32)
        self._entries: ByteBoundedLru[bytes, CacheEntry] = ByteBoundedLru(
            max_entries, max_bytes, MAX_ENTRY_BYTES, on_evict=self._unindex
        )
        self._by_key_id: dict[str, set[bytes]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def estimated_bytes(self) -> int:
        """Estimated bytes held (at most `max_bytes`)."""
        return self._entries.estimated_bytes

    def digest(self, presented: str) -> bytes:
        return hmac.new(self._digest_key, presented.encode(), hashlib.sha256).digest()

    def get(self, digest: bytes, now_mono: float, now_wall: float) -> CacheEntry | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if now_mono - entry.cached_at >= self._ttl or (
            entry.expires_at is not None and now_wall >= entry.expires_at
        ):
            self._entries.pop(digest)
            return None
        return entry

    def remember(
        self, digest: bytes, principal: Principal, key_id: str, expires_at: float | None, *, keep: bool = True
    ) -> Principal:
        """Cache a verification that just succeeded (unless `keep` is False: a rotation or
        revocation raced it) and return its principal, carrying the `Proof` of the entry (see the
        module docstring; retired at once if nothing was cached) and `valid_until` = `expires_at`."""
        cached_at = time.monotonic()
        freshness = Freshness()
        freshness.until = cached_at + self._ttl  # the entry's TTL, on the same clock as `get`'s
        lease = KeyLease(freshness)
        principal = dataclasses.replace(principal, proof=Proof(lease), valid_until=expires_at)
        entry = CacheEntry(principal, key_id, expires_at, cached_at, lease)
        if keep and self._entries.put(digest, entry, _ENTRY_BYTES + principal_bytes(principal)):
            self._by_key_id.setdefault(key_id, set()).add(digest)
        else:
            lease.retire()
        return principal

    def evict_key(self, key_id: str) -> None:
        for digest in list(self._by_key_id.get(key_id, ())):
            self._entries.pop(digest)

    def clear(self) -> None:
        self._entries.clear()

    def _unindex(self, digest: bytes, entry: CacheEntry) -> None:
        entry.lease.retire()
        digests = self._by_key_id.get(entry.key_id)
        if digests is not None:
            digests.discard(digest)
            if not digests:
                del self._by_key_id[entry.key_id]


@dataclass(slots=True)
class _Failures:
    window_start: float
    count: int = 0
    in_flight: int = 0
    locked_until: float = 0.0


class Lockout:
    """Per-subject failure counting and lockout. Only subjects naming a key that exists are ever
    tracked (the caller looks the key up before `begin`)."""

    def __init__(
        self, threshold: int, window_seconds: float, duration_seconds: float, max_tracked: int
    ) -> None:
        self._threshold = threshold
        self._window = window_seconds
        self._duration = duration_seconds
        self._max = max_tracked
        self._state: OrderedDict[str, _Failures] = OrderedDict()

    def _current(self, key_id: str, now: float) -> _Failures | None:
        state = self._state.get(key_id)
        if state is None:
            return None
        if state.locked_until and now >= state.locked_until:
            state.locked_until = 0.0
            state.count = 0
            state.window_start = now
        elif now - state.window_start >= self._window:
            state.count = 0
            state.window_start = now
        if not state.count and not state.in_flight and not state.locked_until:
            del self._state[key_id]
            return None
        return state

    def is_locked(self, key_id: str, now: float) -> bool:
        state = self._current(key_id, now)
        return state is not None and (
            now < state.locked_until or state.count + state.in_flight >= self._threshold
        )

    def begin(self, key_id: str, now: float) -> bool:
        """Reserve one verification attempt; False (and nothing reserved) if the id is locked."""
        if self.is_locked(key_id, now):
            return False
        state = self._state.get(key_id)
        if state is None:
            state = self._state[key_id] = _Failures(window_start=now)
            while len(self._state) > self._max:
                self._state.popitem(last=False)
        self._state.move_to_end(key_id)
        state.in_flight += 1
        return True

    def finish(self, key_id: str, succeeded: bool, now: float) -> None:
        """Release a reservation made by `begin`, recording its outcome."""
        state = self._state.get(key_id)
        if state is None:  # pushed out of the bounded table meanwhile
            return
        state.in_flight = max(0, state.in_flight - 1)
        if succeeded:
            state.count = 0
        else:
            state.count += 1
            if state.count >= self._threshold:
                state.locked_until = now + self._duration
        self._current(key_id, now)
