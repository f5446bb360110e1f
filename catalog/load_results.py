"""Unsealed load results (LoadTableResult / LoadViewResult bytes) kept per metadata version.

A metadata file is never rewritten: a new version has a new `metadata_location`, so an entry keyed
by (object UUID, metadata location, variant) can never be stale; the current location always comes
from the registry (or its short-lived cache, `catalog.store.cache`). What bounds this cache is
memory (`max_bytes`, least recently used first) and age (`max_age_seconds`, so a dropped table's
plaintext does not linger); a body larger than a quarter of the budget is not kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_SECONDS = 300.0

Key = tuple[str, str, str]


class LoadResultCache:
    """Used from the event loop only."""

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_BYTES, max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS
    ) -> None:
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self.bytes = 0
        self._entries: OrderedDict[Key, tuple[float, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: Key, render: Callable[[], Awaitable[bytes]]) -> bytes:
        """The cached body for `key`, or `render()`'s (kept if it fits)."""
        entry = self._entries.get(key)
        now = time.monotonic()
        if entry is not None:
            if now - entry[0] <= self.max_age_seconds:
                self._entries.move_to_end(key)
                return entry[1]
            self._drop(key)
        body = await render()
        if len(body) * 4 <= self.max_bytes:
            self._drop(key)
            self._entries[key] = (now, body)
            self.bytes += len(body)
            while self.bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
        return body

    def _drop(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= len(entry[1])
