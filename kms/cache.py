"""A bounded in-memory cache of unwrapped data keys.

Every table read needs its data key in plaintext, and asking the KMS each time would make the KMS
a per-request dependency (latency, cost, throttling). So unwrapped keys are kept here, bounded
three ways, so that a key pulled out of the KMS does not stay in memory indefinitely:

- `max_entries`: at most this many keys; the least recently used is evicted. 0 disables caching.
- `max_age_seconds`: a key is dropped this long after it entered the cache (not after last use,
  so a hot key still goes back to the KMS periodically and a disabled KEK takes effect).
- `max_uses`: a key is dropped after it has been served this many times.

A limit of 0 means exactly that (no caching), never "unlimited": a setting mistaken for a
disable switch fails towards more KMS calls, not towards keys living forever.

The cache key is (KEK URI, KEK version, wrapped ciphertext, canonical context). The context is
part of it because a KMS that binds the context refuses a wrapped key copied onto another object;
a cache keyed by the ciphertext alone would serve that copy without asking, bypassing the check.

Python cannot wipe `bytes`, so dropped keys linger until the garbage collector reuses the memory;
the limits bound how many are reachable. Keys are never logged, and `repr` shows only counts.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from cedarberg.kms.keys import Context, WrappedKey, context_bytes
from cedarberg.kms.settings import CacheSettings

# (kek_uri, kek_version, wrapped ciphertext, context_bytes(context))
CacheKey = tuple[str, str, bytes, bytes]
_WrappedId = tuple[str, str, bytes]


def cache_key(wrapped: WrappedKey, context: Context) -> CacheKey:
    return (wrapped.kek_uri, wrapped.kek_version, wrapped.ciphertext, context_bytes(context))


@dataclass(slots=True)
class _Entry:
    plaintext: bytes = field(repr=False)
    expires_at: float
    uses: int = 0


class DataKeyCache:
    """LRU cache of plaintext data keys with age and use limits. Not thread-safe: it lives on one
    event loop. `clock` is injectable so tests can move time without sleeping."""

    def __init__(self, settings: CacheSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._entries: OrderedDict[CacheKey, _Entry] = OrderedDict()
        # wrapped key -> the context encodings it is cached under, so `forget` need not scan.
        self._by_wrapped: dict[_WrappedId, set[bytes]] = {}
        self.hits = 0
        self.misses = 0
        self.evictions = 0  # dropped to make room (LRU)
        self.expirations = 0  # dropped for age or uses

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"DataKeyCache(entries={len(self._entries)}, hits={self.hits}, misses={self.misses},"
            f" evictions={self.evictions}, expirations={self.expirations})"
        )

    def get(self, wrapped: WrappedKey, context: Context) -> bytes | None:
        """The cached plaintext of `wrapped` under `context`, counting one use; None on a miss."""
        key = cache_key(wrapped, context)
        entry = self._entries.get(key)
        if entry is not None and self._clock() >= entry.expires_at:
            self._drop(key)
            self.expirations += 1
            entry = None
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        entry.uses += 1
        if entry.uses >= self._settings.max_uses:
            # This use is served; the next one goes back to the KMS.
            self._drop(key)
            self.expirations += 1
        else:
            self._entries.move_to_end(key)
        return entry.plaintext

    def put(self, wrapped: WrappedKey, context: Context, plaintext: bytes) -> None:
        """Cache `plaintext` as the unwrapped form of `wrapped` under `context` (no-op if disabled)."""
        if not self.enabled:
            return
        key = cache_key(wrapped, context)
        if key in self._entries:
            self._drop(key)
        while len(self._entries) >= self._settings.max_entries:
            oldest = next(iter(self._entries))
            self._drop(oldest)
            self.evictions += 1
        self._entries[key] = _Entry(plaintext, self._clock() + self._settings.max_age_seconds)
        self._by_wrapped.setdefault(key[:3], set()).add(key[3])

    def forget(self, wrapped: WrappedKey) -> None:
        """Drop `wrapped` under every context (its data key is being destroyed)."""
        wrapped_id = (wrapped.kek_uri, wrapped.kek_version, wrapped.ciphertext)
        for ctx in list(self._by_wrapped.get(wrapped_id, ())):
            self._drop((*wrapped_id, ctx))

    def clear(self) -> None:
        self._entries.clear()
        self._by_wrapped.clear()

    def _drop(self, key: CacheKey) -> None:
        del self._entries[key]
        contexts = self._by_wrapped[key[:3]]
        contexts.discard(key[3])
        if not contexts:
            del self._by_wrapped[key[:3]]
