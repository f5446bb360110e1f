"""A least-recently-used map bounded in entries *and* in estimated bytes, with an entry-size cap.

Every in-memory cache of the gateway that holds something a caller influences (request context,
names, tokens, claims) is one of these, so no sequence of requests can grow memory past the
configured bound, however large each request's values are:

- `put(key, value, size)` stores the value under an estimate of the memory the entry holds (key
  and value; the caller estimates, see `estimate`). An entry whose size exceeds `max_entry_bytes`
  is not stored (and replaces nothing: an older entry under the key is dropped), so one large
  entry never evicts the whole cache.
- After a `put`, least recently used entries are evicted until at most `max_entries` entries and
  `max_bytes` estimated bytes remain. `get` marks an entry used.
- `max_entries <= 0` or `max_bytes <= 0` turns the cache off: nothing is stored.
- `on_evict(key, value)` is called for every entry that leaves through eviction, replacement,
  `pop` or `clear` (for secondary indexes).

Estimates are approximate (CPython object overheads are counted roughly, shared objects are
counted once per entry that holds them), and err on the side of counting more. Not thread-safe:
callers on several threads hold their own lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

ENTRY_OVERHEAD = 200  # an OrderedDict slot, a tuple and small ints: roughly, per entry
_OBJECT_OVERHEAD = 56  # a small str or bytes object's header, roughly


def estimate(*parts: str | bytes | Iterable[str] | Mapping[str, str] | None) -> int:
    """Estimated bytes of strings, bytes, collections of strings and string maps (UTF-8 length
    plus a per-object overhead), for `ByteBoundedLru.put`."""
    total = 0
    for part in parts:
        if part is None:
            continue
        if isinstance(part, str | bytes):
            total += _OBJECT_OVERHEAD + len(part)
        elif isinstance(part, Mapping):
            total += _OBJECT_OVERHEAD + sum(estimate(k, v) for k, v in part.items())
        else:
            total += _OBJECT_OVERHEAD + sum(estimate(item) for item in part)
    return total


class ByteBoundedLru(Generic[K, V]):
    """See the module docstring."""

    def __init__(
        self,
        max_entries: int,
        max_bytes: int,
        max_entry_bytes: int,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self._on_evict = on_evict
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    @property
    def estimated_bytes(self) -> int:
        """Estimated bytes held now (never above `max_bytes` after a `put` returns)."""
        return self._bytes

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_bytes > 0

    def get(self, key: K) -> V | None:
        """The value under `key` (marking it recently used), or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def peek(self, key: K) -> V | None:
        """The value under `key` without marking it used, or None."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: K, value: V, size: int) -> bool:
        """Store `value` under `key` as `size` estimated bytes (plus `ENTRY_OVERHEAD`). Returns
        False, storing nothing, if the cache is off or the entry is larger than the cap."""
        self.pop(key)
        size += ENTRY_OVERHEAD
        if not self.enabled or size > self.max_entry_bytes or size > self.max_bytes:
            return False
        self._entries[key] = (value, size)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self.pop(oldest)
        return True

    def pop(self, key: K) -> V | None:
        """Remove and return the value under `key`, or None."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        value, size = entry
        self._bytes -= size
        if self._on_evict is not None:
            self._on_evict(key, value)
        return value

    def clear(self) -> None:
        for key in list(self._entries):
            self.pop(key)
