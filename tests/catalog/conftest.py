"""Fixtures of the catalog's store tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.postgres import PostgresServer, database_name
from tests.support.writer_sessions import Writer, serving_writer


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[Writer]:
    """A SQLite registry's writer process, served in the test's event loop (namespace `w`.`ns`)."""
    async with serving_writer(tmp_path) as serving:
        yield serving


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A PostgreSQL registry migrated to head, dropped after the test."""
    url = postgres_server.migrated_database()
    yield url
    postgres_server.drop_database(database_name(url))
