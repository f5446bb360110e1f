"""A PostgreSQL that accepts connections but answers nothing (paused, overloaded, a half-open
network path) makes the registry unavailable within bounded time, never a request held for ever:
opening a connection gives up after `CONNECT_TIMEOUT_SECONDS`, a statement on a pooled connection
after `STATEMENT_TIMEOUT_SECONDS` (shortened here), and the registry serves again once it answers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import postgres_driver
from cedarberg.catalog.store.connect import open_store
from tests.support.postgres import PostgresServer

BOUND_SECONDS = 1.0


@pytest.fixture
def paused_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own (it is paused, which a shared one must never be)."""
    server = PostgresServer()
    server.start()
    yield server
    server.unpause()
    server.stop()


@pytest.mark.postgres
async def test_a_paused_postgres_is_unavailable_within_the_bounds(
    paused_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_driver, "CONNECT_TIMEOUT_SECONDS", BOUND_SECONDS)
    monkeypatch.setattr(postgres_driver, "STATEMENT_TIMEOUT_SECONDS", BOUND_SECONDS)
    url = paused_server.create_database("paused")
    pooled = await open_store(url)
    fresh = await open_store(url, migrate=False)
    try:
        async with pooled.write() as tx:  # control: the registry answers
            await namespace_rows.insert_namespace(tx, "w", "before", None, {})
        paused_server.pause()
        try:
            for store in (pooled, fresh):  # a statement on a pooled connection; a new connection
                started = time.monotonic()
                with pytest.raises(
                    StorageUnavailableError, match=r"^the registry \(PostgreSQL\) is unavailable"
                ):
                    async with store.read() as tx:
                        await namespace_rows.get_namespace(tx, "w", "before")
                assert time.monotonic() - started < BOUND_SECONDS + 2.0
            assert not await fresh.ping()
        finally:
            paused_server.unpause()
        async with pooled.write() as tx:  # the same store serves again, on a fresh connection
            await namespace_rows.insert_namespace(tx, "w", "after", None, {})
        async with fresh.read() as tx:
            assert await namespace_rows.get_namespace(tx, "w", "before") == {}
            assert await namespace_rows.get_namespace(tx, "w", "after") == {}
    finally:
        await pooled.close()
        await fresh.close()
