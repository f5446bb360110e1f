"""Commits to one table wait for each other within a process.

Compare-and-swap keeps concurrent commits correct anywhere (several workers, several instances):
the loser of a race re-plans on the newer metadata. Within one process that race is pure waste:
every loser has already parsed, updated, serialised, sealed and written a metadata file that it
then deletes, and with eight writers on one table most of the CPU went to such losers (and some
exhausted their retries: 409). Holding a per-table lock around plan-write-swap lets commits to
one table run one after the other in a process, and commits to different tables side by side.

Locks are taken in sorted order (a multi-table transaction holds all of its tables' locks, so two
transactions cannot wait for each other), and a lock is dropped as soon as nobody holds or waits
for it, so memory follows the tables being committed, not every table ever committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

TableKey = tuple[str, str, str]  # (warehouse, namespace, name)


class CommitLocks:
    """Used from the event loop only."""

    def __init__(self) -> None:
        self._locks: dict[TableKey, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, keys: Iterable[TableKey]) -> AsyncIterator[None]:
        """Hold the locks of every table in `keys` (waiting for other holders)."""
        referenced: list[TableKey] = []
        locked: list[asyncio.Lock] = []
        try:
            for key in sorted(set(keys)):
                lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
                self._locks[key] = (lock, users + 1)
                referenced.append(key)
                await lock.acquire()
                locked.append(lock)
            yield
        finally:
            for lock in reversed(locked):
                lock.release()
            for key in referenced:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)
