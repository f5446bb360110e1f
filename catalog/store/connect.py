"""The registry for a URL, and its driver: SQLite (embedded default) or PostgreSQL (scale-out).

Statements are written in SQLAlchemy Core, compiled once per dialect (catalog.store.statements)
and run on the plain drivers: sqlite3 inline on the event loop (catalog.store.sqlite_driver) or
asyncpg with prepared statements (catalog.store.postgres_driver). Writes on SQLite are
serialised in-process and start with `BEGIN IMMEDIATE`, so concurrent writers wait for the lock
(asynchronously, up to the busy timeout) instead of failing half-way with "database is locked".
"""

from __future__ import annotations

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store.cache import RegistryCache
from cedarberg.catalog.store.driver import Driver
from cedarberg.catalog.store.engine import migrate_registry
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.postgres_driver import PostgresDriver
from cedarberg.catalog.store.sqlite_driver import SqliteDriver
from cedarberg.catalog.store.sqlite_handoff import HandedOffSqliteDriver, writer_socket_for
from cedarberg.catalog.store.urls import SUPPORTED_FORMS, is_postgres, sqlite_path

SQLITE_READERS = 4  # SQLite reads run inline in microseconds: a few connections serve them all
SQLITE_BUSY_TIMEOUT_SECONDS = 10.0  # as long as the busy_timeout the registry always had


def open_driver(url: str, capacity: int, *, sqlite_readers: int = SQLITE_READERS) -> Driver:
    """The driver for a registry URL (catalog.store.urls: SQLite or PostgreSQL, either spelling),
    opening at most `capacity` PostgreSQL connections or `sqlite_readers` idle SQLite readers (on
    SQLite a writer waits up to SQLITE_BUSY_TIMEOUT_SECONDS for another process's write lock).
    Connects lazily. Raises StorageUnavailableError for any other URL. A SQLite file whose
    writes this process hands to a writer process (catalog.store.sqlite_handoff) gets a driver
    that writes there and reads here."""
    path = sqlite_path(url)
    if path is not None:
        writer = writer_socket_for(path)
        if writer is not None:
            return HandedOffSqliteDriver(
                path, writer, readers=sqlite_readers, busy_timeout=SQLITE_BUSY_TIMEOUT_SECONDS
            )
        return SqliteDriver(path, readers=sqlite_readers, busy_timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
    if is_postgres(url):
        return PostgresDriver(url, capacity)
    raise StorageUnavailableError(f"the registry URL must be {SUPPORTED_FORMS}")


async def open_store(
    url: str,
    *,
    migrate: bool = True,
    pool_size: int = 10,
    max_overflow: int = 10,
    cache: RegistryCache | None = None,
) -> Store:
    """Connect and (unless `migrate` is False: the caller made sure the schema is current)
    apply migrations. The pool sizes apply to PostgreSQL (SQLite needs only a few
    connections: its statements run inline, its writers are serialised). Raises
    StorageUnavailableError if unreachable."""
    if migrate:
        await migrate_registry(url)
    return Store(open_driver(url, pool_size + max_overflow), cache)
