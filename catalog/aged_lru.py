"""A least-recently-used map bounded in bytes and in age: what the catalog keeps per immutable
metadata version (unsealed load results, parsed models).

An entry is answered for `max_age_seconds` after it was stored (plaintext of a dropped object does
not linger), and the entries' sizes (as the caller counts them) never add up to more than
`max_bytes`; an entry larger than a quarter of the budget is not kept, so one huge table cannot
empty the cache. Used from the event loop only.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class AgedLru(Generic[K, V]):
    """See the module docstring."""

    def __init__(self, max_bytes: int, max_age_seconds: float) -> None:
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self.bytes = 0
        self._entries: OrderedDict[K, tuple[float, V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value stored for `key` within its age, else None (an expired entry is dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if time.monotonic() - entry[0] > self.max_age_seconds:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep `value` as `size` bytes, if it fits; the least recently used entries make room."""
        if size * 4 > self.max_bytes:
            return
        self._drop(key)
        self._entries[key] = (time.monotonic(), value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: K) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry[2]
