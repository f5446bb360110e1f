"""SQLAlchemy async engines on the registry's database: for Alembic migrations (run once at
start-up) and the gateway's API key store. The registry's own statements do not use them: they
run on catalog.store.sqlite_driver / catalog.store.postgres_driver.

Durability is the same on every path: SQLite in WAL mode with synchronous=FULL syncs the WAL at
every commit (NORMAL may lose the last commits); PostgreSQL sessions keep synchronous_commit on
whatever the server's default says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store.history import adopt_two_histories, migration_config
from cedarberg.catalog.store.postgres_driver import POSTGRES_SERVER_SETTINGS
from cedarberg.catalog.store.sqlite_driver import SQLITE_PRAGMAS

PG_MIGRATION_LOCK = 0x6365646172  # "cedar": serialises migrations of several starting gateways
SQLITE_BUSY_TIMEOUT_MS = 10_000  # these engines wait on their driver thread, not on the loop


def sqlite_path(url: str) -> str:
    """The file of a `sqlite+aiosqlite:///path` URL."""
    return url.split("///", 1)[-1]


def create_engine(url: str, pool_size: int, max_overflow: int) -> AsyncEngine:
    """An engine for `url` (SQLite or PostgreSQL) with the durable settings."""
    if url.startswith("sqlite"):
        db_path = sqlite_path(url)
        if db_path and db_path != ":memory:":
            Path(db_path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, pool_size=pool_size, max_overflow=max_overflow)
        prepare_sqlite(engine)
        return engine
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        connect_args={"server_settings": POSTGRES_SERVER_SETTINGS},
    )


def prepare_sqlite(engine: AsyncEngine) -> None:
    """Take transaction control from pysqlite so BEGIN is explicit (and IMMEDIATE for writers)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")  # first: WAL may wait for a lock
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the lock up front; readers use WAL snapshots per statement and need no
        # transaction at all.
        if conn.get_execution_options().get("cedarberg_write", False):
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def run_migrations(connection: Connection) -> None:
    """Upgrade the registry's schema (its one migration history, the gateway's tables included)
    to head on `connection`; a database still on the two histories of before is moved onto the
    one first (catalog.store.history). Raises SchemaHistoryError."""
    # Imported here: Alembic is needed once at start-up and is slow to import.
    from alembic import command

    config = migration_config(connection)
    adopt_two_histories(connection, config)
    command.upgrade(config, "head")


async def migrate_registry(url: str) -> None:
    """Upgrade the registry's schema at `url` to head, on an engine of its own (disposed after),
    under a lock against gateways starting at the same time. Raises StorageUnavailableError."""
    engine = create_engine(url, 1, 0)
    is_sqlite = engine.dialect.name == "sqlite"
    try:
        async with engine.connect() as plain:
            conn = await plain.execution_options(cedarberg_write=True) if is_sqlite else plain
            async with conn.begin():
                if not is_sqlite:
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_MIGRATION_LOCK})
                await conn.run_sync(run_migrations)
    except (OSError, SQLAlchemyError) as err:
        raise StorageUnavailableError(f"cannot open the registry: {type(err).__name__}") from err
    finally:
        await engine.dispose()
