"""Unsealed load results (LoadTableResult / LoadViewResult bytes) kept per metadata version.

A metadata file is never rewritten: a new version has a new `metadata_location`, so an entry keyed
by (object UUID, metadata location, variant) can never be stale; the current location always comes
from the registry (or its short-lived cache, `catalog.store.cache`). What bounds this cache is
memory (`max_bytes`, least recently used first) and age (`max_age_seconds`, so a dropped table's
plaintext does not linger); a body larger than a quarter of the budget is not kept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from cedarberg.catalog.aged_lru import AgedLru

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_SECONDS = 300.0

Key = tuple[str, str, str]


class LoadResultCache(AgedLru[Key, bytes]):
    """Used from the event loop only."""

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_BYTES, max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS
    ) -> None:
        super().__init__(max_bytes, max_age_seconds)

    async def get_or_render(self, key: Key, render: Callable[[], Awaitable[bytes]]) -> bytes:
        """The cached body for `key`, or `render()`'s (kept if it fits)."""
        body = self.get(key)
        if body is None:
            body = await render()
            self.put(key, body, len(body))
        return body
