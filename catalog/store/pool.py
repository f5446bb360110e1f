"""The registry's connection pool: transactions (`read`, `write`), one-statement writes
(`write_alone`) and the read cache in front of them.

Invariant: every database error that is not a known constraint violation becomes
StorageUnavailableError; driver messages never reach clients.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import text

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store.cache import RegistryCache, Touched, note_uncached_read
from cedarberg.catalog.store.driver import CallingDriver, DatabaseError, Driver, IntegrityViolation
from cedarberg.catalog.store.postgres_driver import PostgresDriver
from cedarberg.catalog.store.statements import Sql
from cedarberg.catalog.store.tx import StoreTx

T = TypeVar("T")
log = logging.getLogger(__name__)
_PING = Sql(text("SELECT 1"))
_STORE_NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _unavailable(dialect: str, err: Exception) -> StorageUnavailableError:
    """What a client is told when the registry failed a statement: which database, and the
    driver's exception class (a DatabaseError carries only that; never a driver message or a path)."""
    cause = str(err) if isinstance(err, DatabaseError) else type(err).__name__
    return StorageUnavailableError(
        f"the registry ({_STORE_NAMES.get(dialect, dialect)}) is unavailable: {cause}"
    )


class Store:
    """The registry connection pool. Open with `catalog.store.connect.open_store`, close with
    `close`."""

    def __init__(self, driver: Driver, cache: RegistryCache | None = None) -> None:
        self._driver = driver
        self.pool_capacity = driver.capacity  # most connections the pool opens at once
        # The one place that chooses how the common writes run (catalog.store.server_writes): as
        # one statement each on PostgreSQL (a server-side function: one round trip instead of one
        # per statement plus BEGIN and COMMIT), as one message each to a SQLite writer process
        # (catalog.store.writer_calls), as a transaction of several statements on a SQLite file
        # this process writes itself (where a statement is no round trip).
        self.writes_alone = isinstance(driver, PostgresDriver | CallingDriver)
        # Off unless the caller gives one: CLI commands and migrations read the registry directly.
        self.cache = cache if cache is not None else RegistryCache(ttl_seconds=0)
        self._reading: dict[Hashable, asyncio.Future[Any]] = {}
        self._refreshes: set[asyncio.Task[Any]] = set()  # held so they are not collected mid-read

    @property
    def dialect(self) -> str:
        return str(self._driver.dialect.name)

    def watch_pool(self, checked_out: Callable[[], None], checked_in: Callable[[], None]) -> None:
        """Count connections taken from and given back to the pool (for the pool gauge)."""
        self._driver.watch(checked_out, checked_in)

    async def ping(self) -> bool:
        """True if the registry answers a trivial query (callers bound the wait)."""
        try:
            async with self._driver.read() as conn:
                await conn.execute(_PING)
        except (DatabaseError, OSError):
            return False
        return True

    async def close(self) -> None:
        for task in list(self._refreshes):
            task.cancel()
        await asyncio.gather(*self._refreshes, return_exceptions=True)
        await self._driver.close()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[StoreTx]:
        """A read-write transaction: committed on normal exit, rolled back on error. An error
        while committing means the outcome is unknown (CommitStateUnknownError)."""
        tx: StoreTx | None = None
        try:
            async with self._driver.write() as conn:
                tx = StoreTx(conn)
                yield tx
        except (DatabaseError, IntegrityViolation, OSError) as err:
            raise _unavailable(self.dialect, err) from err
        finally:
            # Committed, rolled back or unknown: cached reads of what it touched are not trusted.
            if tx is not None:
                self.cache.forget(tx.touched)

    async def write_alone(self, sql: Sql, params: Mapping[str, Any], touched: Touched) -> Any:
        """Run one writing statement as its own transaction (only where `writes_alone`) and return
        its scalar result; cached reads of what it `touched` are forgotten whatever happens.
        Raises IntegrityViolation (a constraint refused it: nothing written),
        StorageUnavailableError (refused otherwise: nothing written), CommitStateUnknownError
        (sent, not confirmed)."""
        driver = self._driver
        if not isinstance(driver, PostgresDriver):
            raise TypeError("this store runs its writes as transactions")
        try:
            rows = await driver.write_alone(sql, params)
        except (DatabaseError, OSError) as err:
            raise _unavailable(self.dialect, err) from err
        finally:
            self.cache.forget(touched)
        return rows.scalar()

    async def call_writer(self, procedure: str, args: Mapping[str, Any], touched: Touched) -> int:
        """Run one of the SQLite writer process's procedures (catalog.store.writer_calls; only
        where `writes_alone` on SQLite) and return its outcome; cached reads of what it `touched`
        are forgotten whatever happens. Raises StorageUnavailableError (nothing written),
        CommitStateUnknownError (sent, not confirmed)."""
        driver = self._driver
        if not isinstance(driver, CallingDriver):
            raise TypeError("this store has no writer process")
        try:
            return await driver.call(procedure, args)
        except (DatabaseError, OSError) as err:
            raise _unavailable(self.dialect, err) from err
        finally:
            self.cache.forget(touched)

    async def cached(self, key: Hashable, load: Callable[[StoreTx], Awaitable[T]]) -> T:
        """`load` run in a read transaction, or its cached result (see `catalog.store.cache`)."""
        cache = self.cache
        if not cache.enabled:
            async with self.read() as tx:
                return await load(tx)
        found, value, stale = cache.lookup_stale(key)
        if found:
            if stale:
                self.refresh_later(key, load)
            return value  # type: ignore[no-any-return]
        pending = self._reading.get(key)
        if pending is not None:  # single flight: misses of one entry share one read
            note_uncached_read()  # noted by the reader that started it, not by this request
            return await asyncio.shield(pending)
        return await self._read_into_cache(key, load, self._claim(key))

    def refresh_later(self, key: Hashable, load: Callable[[StoreTx], Awaitable[Any]]) -> None:
        """Re-read a stale entry in the background (once at a time per entry)."""
        if key in self._reading:
            return
        task = asyncio.get_running_loop().create_task(self._read_into_cache(key, load, self._claim(key)))
        self._refreshes.add(task)
        task.add_done_callback(self._refreshed)

    def _claim(self, key: Hashable) -> asyncio.Future[Any]:
        """Mark `key` as being read (synchronously, so no second read of it can start)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._reading[key] = future
        return future

    def _refreshed(self, task: asyncio.Task[Any]) -> None:
        self._refreshes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The stale entry ages out; the next request reads (and reports) for itself.
            log.warning("registry cache refresh failed: %s", type(task.exception()).__name__)

    async def _read_into_cache(
        self, key: Hashable, load: Callable[[StoreTx], Awaitable[T]], future: asyncio.Future[Any]
    ) -> T:
        """Read `key` for the claim `future` (see `_claim`), share the outcome, cache the value."""
        cache = self.cache
        generation = cache.generation
        try:
            async with self.read(for_cache=True) as tx:
                value = await load(tx)
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._reading[key]
        value = cache.store(key, value, generation, load)
        future.set_result(value)
        return value

    @asynccontextmanager
    async def read(self, *, for_cache: bool = False) -> AsyncIterator[StoreTx]:
        """A read-only transaction (each statement reads the latest committed state). `for_cache`:
        its results go into the read cache (which notes them for request plans); any other read
        is noted as one that bypassed the cache."""
        if not for_cache:
            note_uncached_read()
        try:
            async with self._driver.read() as conn:
                yield StoreTx(conn)
        except (DatabaseError, IntegrityViolation, OSError) as err:
            raise _unavailable(self.dialect, err) from err
