"""A bounded, short-lived cache of registry reads for the read path (loadTable, listings, the
namespace chains authorization needs).

    value = await store.cached(RegistryKey.object(warehouse, namespace, name), load)

Invariants:
- Only reads go through it; mutations read the registry directly (compare-and-swap never trusts a
  cached row).
- Every write transaction of this process names what it touched (`Touched`); when it ends (commit,
  rollback or unknown outcome) those entries are forgotten before the caller answers, so this
  process never serves a read older than its own writes.
- A read that raced a write is not stored: the cache's generation is taken before the database is
  read, and a value is kept only if no write ended in between.
- Writes made by other processes (another worker, another instance, an offline CLI command) are
  seen within `ttl_seconds` (plus the time of one registry read): an entry is answered as it is for
  half its TTL; in the second half it is still answered while one background read refreshes it
  (so a busy worker never stalls its requests on a refresh); past its TTL it is not answered.
  A TTL of 0 turns the cache off.
- Listings are keyed by a per-container generation, so one change forgets every page of that
  container without scanning.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TTL_SECONDS = 1.0
DEFAULT_MAX_ENTRIES = 65536


@dataclass(slots=True)
class Touched:
    """What one write transaction changed (namespaces by (warehouse, name), objects by
    (warehouse, namespace, name)); `everything` for changes not tied to one name (key rewraps)."""

    namespaces: set[tuple[str, str]] = field(default_factory=set)
    objects: set[tuple[str, str, str]] = field(default_factory=set)
    everything: bool = False

    def __bool__(self) -> bool:
        return self.everything or bool(self.namespaces or self.objects)


class RegistryKey:
    """Cache keys: one constructor per kind of read."""

    @staticmethod
    def namespace(warehouse: str, name: str) -> tuple[str, ...]:
        return ("ns", warehouse, name)

    @staticmethod
    def object(warehouse: str, namespace: str, name: str) -> tuple[str, ...]:
        return ("obj", warehouse, namespace, name)


class RegistryCache:
    """LRU of registry reads with a TTL and write invalidation. Used from the event loop only."""

    def __init__(
        self, ttl_seconds: float = DEFAULT_TTL_SECONDS, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self.generation = 0
        self._entries: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        # Listing generations: a namespace listing is keyed by its warehouse's, an object listing
        # by its namespace's; bumping one makes every cached page of that container unreachable.
        self._containers: dict[tuple[str, ...], int] = {}

    @property
    def enabled(self) -> bool:
        return self.ttl_seconds > 0 and self.max_entries > 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: Hashable) -> tuple[bool, Any]:
        """(True, value) for a fresh entry, else (False, None)."""
        found, value, stale = self.lookup_stale(key)
        return (found and not stale), (None if stale else value)

    def lookup_stale(self, key: Hashable) -> tuple[bool, Any, bool]:
        """(found, value, stale): an entry in the second half of its TTL is answered as stale
        (the caller refreshes it); one past its TTL is forgotten and not answered."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None, False
        stored_at, value = entry
        age = time.monotonic() - stored_at
        if age > self.ttl_seconds:
            del self._entries[key]
            return False, None, False
        self._entries.move_to_end(key)
        return True, value, age > self.ttl_seconds / 2

    def store(self, key: Hashable, value: Any, generation: int) -> None:
        """Keep `value`, read after `generation` was taken, unless a write ended since."""
        if not self.enabled or generation != self.generation:
            return
        self._entries[key] = (time.monotonic(), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def listing_key(self, container: tuple[str, ...], *page: Hashable) -> tuple[Hashable, ...]:
        return ("list", container, self._containers.get(container, 0), *page)

    def forget(self, touched: Touched) -> None:
        """Forget what a write transaction touched (called when it ends, whatever its outcome)."""
        if not touched:
            return
        self.generation += 1
        if touched.everything:
            self._entries.clear()
            self._containers.clear()
            return
        for warehouse, name in touched.namespaces:
            self._entries.pop(RegistryKey.namespace(warehouse, name), None)
            self._bump(("namespaces", warehouse))
            self._bump(("objects", warehouse, name))
        for warehouse, namespace, name in touched.objects:
            self._entries.pop(RegistryKey.object(warehouse, namespace, name), None)
            self._bump(("objects", warehouse, namespace))

    def _bump(self, container: tuple[str, ...]) -> None:
        self._containers[container] = self._containers.get(container, 0) + 1
