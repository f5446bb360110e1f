"""The registry of a test gateway read and changed behind its back, on either store.

Tests that look at (or tamper with) the registry a `GatewayProcess` uses go through these, so the
same test runs on SQLite (the ``catalog.db`` file in the data directory) and on PostgreSQL (the
database of its ``store_url``). SQL is written once with ``?`` placeholders, in the dialect both
stores share.

- ``query(gw, sql, *params)``: the rows, as tuples.
- ``execute(gw, sql, *params)``: a statement, committed.
- ``dump(gw)``: every row of every table as text (bytes), to look for what must not be at rest;
  binary columns appear as they are stored (SQLite) or hex-encoded (PostgreSQL's JSON of a row):
  search for both spellings (``at_rest_spellings``).
- ``lose(gw)``: the registry gone (files deleted, or the database dropped and created empty).
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import asyncpg

from tests.support import postgres
from tests.support.gateway import GatewayProcess

_PLACEHOLDER = re.compile(r"\?")
_T = TypeVar("_T")


def _sqlite(gw: GatewayProcess) -> sqlite3.Connection:
    return sqlite3.connect(gw.data_dir / "catalog.db")


def _dsn(gw: GatewayProcess) -> str:
    assert gw.store_url is not None
    return gw.store_url.replace("postgresql+asyncpg://", "postgresql://", 1)


def _numbered(sql: str) -> str:
    counter = iter(range(1, 1000))
    return _PLACEHOLDER.sub(lambda _match: f"${next(counter)}", sql)


def _run(work: Coroutine[Any, Any, _T]) -> _T:
    """Run `work` on a loop of its own in a thread (callers may be inside a running loop)."""
    results: list[_T] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            results.append(asyncio.run(work))
        except BaseException as exc:  # re-raised in the caller's thread
            failures.append(exc)

    thread = threading.Thread(target=run, name="registry-query")
    thread.start()
    thread.join()
    if failures:
        raise failures[0]
    return results[0]


async def _pg_fetch(dsn: str, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    connection = await asyncpg.connect(dsn)
    try:
        return [tuple(record) for record in await connection.fetch(sql, *params)]
    finally:
        await connection.close()


async def _pg_execute(dsn: str, sql: str, params: tuple[Any, ...]) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(sql, *params)
    finally:
        await connection.close()


def query_url(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """The rows `sql` selects from the registry at `url` (the ``registry_url`` fixture's form:
    ``sqlite+aiosqlite:///PATH`` or a PostgreSQL URL), on a connection of its own: what another
    process would see at this moment."""
    if url.startswith("postgresql"):
        dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
        return _run(_pg_fetch(dsn, _numbered(sql), params))
    with sqlite3.connect(url.split(":///", 1)[1]) as db:
        return [tuple(row) for row in db.execute(sql, params).fetchall()]


def query(gw: GatewayProcess, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """The rows `sql` selects from `gw`'s registry."""
    return query_url(gw.store_url or f"sqlite:///{gw.data_dir / 'catalog.db'}", sql, *params)


def execute(gw: GatewayProcess, sql: str, *params: Any) -> None:
    """Run `sql` on `gw`'s registry and commit."""
    if gw.store_kind == "postgres":
        _run(_pg_execute(_dsn(gw), _numbered(sql), params))
        return
    with _sqlite(gw) as db:
        db.execute(sql, params)


def dump(gw: GatewayProcess) -> bytes:
    """Everything `gw`'s registry holds, as bytes: the SQLite files (with their journal), or the
    JSON text of every row of every table of the PostgreSQL database."""
    if gw.store_kind == "postgres":
        tables = query(gw, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        parts = []
        for (table,) in tables:
            rows = query(gw, f'SELECT row_to_json(t)::text FROM "{table}" AS t')
            parts.extend(str(row[0]).encode() for row in rows)
        return b"\n".join(parts)
    return b"".join(path.read_bytes() for path in sorted(gw.data_dir.glob("catalog.db*")))


def at_rest_spellings(marker: str) -> list[bytes]:
    """How `marker` would appear in a `dump`: its bytes, or their hex in a PostgreSQL bytea."""
    return [marker.encode(), marker.encode().hex().encode()]


def lose(gw: GatewayProcess) -> None:
    """Lose `gw`'s registry (the gateway stopped): delete its SQLite files, or drop its
    PostgreSQL database and create it again, empty."""
    if gw.store_kind == "postgres":
        assert gw.store_url is not None
        postgres.get_server().create_database(postgres.database_name(gw.store_url))
        return
    for path in gw.data_dir.glob("catalog.db*"):
        path.unlink()
