"""SQLAlchemy engines on the registry's database, for Alembic migrations only (run at start-up and
by `cedarberg db`). No runtime statement uses them: the registry and the gateway's tables (API
keys, the user directory, console sessions) run on catalog.store.sqlite_driver /
catalog.store.postgres_driver.

On SQLite the engine is synchronous, on the stdlib driver (`sqlite://`), and runs in a thread;
on PostgreSQL it is SQLAlchemy's asyncpg dialect (the only PostgreSQL driver installed), imported
here only when a PostgreSQL schema is migrated. aiosqlite is never needed.

Durability is the same on every path: SQLite in WAL mode with synchronous=FULL syncs the WAL at
every commit (NORMAL may lose the last commits); PostgreSQL sessions keep synchronous_commit on
whatever the server's default says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store.history import adopt_two_histories, migration_config
from cedarberg.catalog.store.postgres_driver import POSTGRES_SERVER_SETTINGS
from cedarberg.catalog.store.sqlite_driver import SQLITE_PRAGMAS
from cedarberg.catalog.store.urls import migration_url
from cedarberg.catalog.store.urls import sqlite_path as _sqlite_path

T = TypeVar("T")
PG_MIGRATION_LOCK = 0x6365646172  # "cedar": serialises migrations of several starting gateways
SQLITE_BUSY_TIMEOUT_MS = 10_000  # migrations wait on their own thread, not on the loop


def prepare_sqlite(engine: Engine) -> None:
    """Take transaction control from pysqlite so BEGIN is explicit (and IMMEDIATE for writers)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")  # first: WAL may wait for a lock
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the lock up front; readers use WAL snapshots per statement and need no
        # transaction at all.
        if conn.get_execution_options().get("cedarberg_write", False):
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def _on_sqlite(engine_url: str, work: Callable[[Connection], T], write: bool) -> T:
    """`work` in one transaction on a synchronous stdlib-sqlite3 engine (disposed after)."""
    path = _sqlite_path(engine_url)
    if write and path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_sync_engine(engine_url, poolclass=NullPool)
    prepare_sqlite(engine)
    try:
        with engine.connect() as plain:
            conn = plain.execution_options(cedarberg_write=True) if write else plain
            with conn.begin():
                return work(conn)
    finally:
        engine.dispose()


async def _on_postgres(engine_url: str, work: Callable[[Connection], T], lock: int | None) -> T:
    """`work` in one transaction on SQLAlchemy's asyncpg dialect, after taking advisory `lock`."""
    # Imported here: the asynchronous extension is for PostgreSQL migrations only.
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(
        engine_url, poolclass=NullPool, connect_args={"server_settings": POSTGRES_SERVER_SETTINGS}
    )
    try:
        async with engine.connect() as conn, conn.begin():
            if lock is not None:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock})
            return await conn.run_sync(work)
    finally:
        await engine.dispose()


async def on_schema_connection(
    url: str, work: Callable[[Connection], T], *, failure: str, write: bool = True, lock: int | None = None
) -> T:
    """Run `work` (Alembic, schema inspection) on a synchronous SQLAlchemy connection to `url`
    in one transaction: on SQLite under the write lock (`write`) in a thread, on PostgreSQL
    under the advisory `lock` (if given). Raises StorageUnavailableError("`failure`: <class>")
    if the database fails (its message never leaves)."""
    try:
        engine_url = migration_url(url)
    except ValueError as err:
        raise StorageUnavailableError(str(err)) from None
    try:
        if _sqlite_path(engine_url) is not None:
            return await asyncio.to_thread(_on_sqlite, engine_url, work, write)
        return await _on_postgres(engine_url, work, lock)
    except (OSError, SQLAlchemyError) as err:
        raise StorageUnavailableError(f"{failure}: {type(err).__name__}") from err


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
    """Upgrade the registry's schema at `url` to head, under a lock against gateways starting at
    the same time. Raises StorageUnavailableError."""
    await on_schema_connection(
        url, run_migrations, failure="cannot open the registry", lock=PG_MIGRATION_LOCK
    )
