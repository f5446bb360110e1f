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
  container without scanning. The generations are bounded like the entries: past `max_entries`
  containers the cache starts empty again.
- A refresh that reads a value equal to the cached one keeps the cached object (renewing its age),
  so what was built from it (a resource, a recorded plan) stays valid: identity means "unchanged".
- While a `ReadLog` is active (`recording(...)`), every value answered or stored is noted in it;
  `still_current(key, value)` tells later whether the cache would answer the same object now.
  The gateway's request plans (`gateway.web.replay`) are valid exactly that long.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TTL_SECONDS = 1.0
DEFAULT_MAX_ENTRIES = 65536
_MIN_CONTAINERS = 64  # listing generations kept at least, whatever the entry bound


@dataclass(slots=True)
class Touched:
    """What one write transaction changed (namespaces by (warehouse, name), objects by
    (warehouse, namespace, name)); `everything` for changes not tied to one name (key rewraps)."""

    namespaces: set[tuple[str, str]] = field(default_factory=set)
    objects: set[tuple[str, str, str]] = field(default_factory=set)
    everything: bool = False

    def __bool__(self) -> bool:
        return self.everything or bool(self.namespaces or self.objects)


@dataclass(slots=True)
class ReadLog:
    """The registry reads one request made: (key, value) pairs answered by or stored in the cache.
    `opaque` once any read bypassed the cache (then nothing tells when its answer changes)."""

    reads: list[tuple[Hashable, Any]] = field(default_factory=list)
    opaque: bool = False
    closed: bool = False

    def note(self, key: Hashable, value: Any) -> None:
        if not self.closed:
            self.reads.append((key, value))

    def note_uncached(self) -> None:
        if not self.closed:
            self.opaque = True


_READ_LOG: ContextVar[ReadLog | None] = ContextVar("cedarberg_registry_read_log", default=None)


@contextmanager
def recording(log: ReadLog | None) -> Iterator[ReadLog | None]:
    """Note the registry reads of the current task (and of tasks it starts meanwhile) in `log`;
    closed on exit, so a background refresh that outlives the request adds nothing."""
    token = _READ_LOG.set(log)
    try:
        yield log
    finally:
        _READ_LOG.reset(token)
        if log is not None:
            log.closed = True


def note_uncached_read() -> None:
    """Called by every registry read that does not go through the cache."""
    log = _READ_LOG.get()
    if log is not None:
        log.note_uncached()


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
        # key -> (stored at, value, how to read it again: for a refresh the cache itself cannot start)
        self._entries: OrderedDict[Hashable, tuple[float, Any, Any]] = OrderedDict()
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
        stored_at, value, _reload = entry
        age = time.monotonic() - stored_at
        if age > self.ttl_seconds:
            del self._entries[key]
            return False, None, False
        self._entries.move_to_end(key)
        log = _READ_LOG.get()
        if log is not None:
            log.note(key, value)
        return True, value, age > self.ttl_seconds / 2

    def still_current(self, key: Hashable, value: Any) -> tuple[bool, Any]:
        """(current, reload): current when a read of `key` would be answered `value` (the same
        object) now; `reload` is the entry's reader when it is in the second half of its TTL
        (the caller starts the refresh a read would start), else None. A listing page also needs
        its container's generation unchanged (a write moves listings to new keys without
        removing the old pages)."""
        entry = self._entries.get(key)
        if entry is None or entry[1] is not value:
            return False, None
        age = time.monotonic() - entry[0]
        if age > self.ttl_seconds:
            return False, None
        if isinstance(key, tuple) and key and key[0] == "list" and self._containers.get(key[1], 0) != key[2]:
            return False, None
        return True, (entry[2] if age > self.ttl_seconds / 2 else None)

    def store(self, key: Hashable, value: Any, generation: int, reload: Any = None) -> Any:
        """Keep `value`, read after `generation` was taken, unless a write ended since; `reload`
        reads it again (for a refresh started by `still_current`'s caller). Returns the value to
        use: the cached object when it equals `value` (unchanged), else `value`."""
        log = _READ_LOG.get()
        if not self.enabled or generation != self.generation:
            if log is not None:
                log.note_uncached()  # not kept: nothing will tell when it changes
            return value
        held = self._entries.get(key)
        if held is not None and held[1] == value:
            value = held[1]  # unchanged: keep the object others were built from
        if log is not None:
            log.note(key, value)
        self._entries[key] = (time.monotonic(), value, reload)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return value

    def listing_key(self, container: tuple[str, ...], *page: Hashable) -> tuple[Hashable, ...]:
        return ("list", container, self._containers.get(container, 0), *page)

    def forget(self, touched: Touched) -> None:
        """Forget what a write transaction touched (called when it ends, whatever its outcome)."""
        if not touched:
            return
        self.generation += 1
        # Listing generations are kept per container ever written; past as many containers as
        # entries, start them all again (every page keyed by an old generation goes with them).
        if touched.everything or len(self._containers) >= max(self.max_entries, _MIN_CONTAINERS):
            self._entries.clear()
            self._containers.clear()
        if touched.everything:
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
