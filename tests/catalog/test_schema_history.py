"""One migration history per database (catalog.store.history), on SQLite and PostgreSQL.

The registries of earlier releases, with two histories (`alembic_version` 0001..0006 and
`alembic_version_gateway` gw0001..gw0006), are built with those releases' own scripts
(tests/support/legacy_schema) and upgraded by the product as `cedarberg db upgrade` and
`cedarberg serve` do (`migrate_registry`, under the registry's migration lock).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Connection

from cedarberg.catalog.store.engine import migrate_registry
from cedarberg.catalog.store.history import LEGACY_VERSION_TABLE, SchemaHistoryError
from cedarberg.gateway.serve.migrate import SchemaOutdatedError, ensure_current, schema_state, upgrade
from tests.support.migrations import (
    build_two_histories,
    dump_rows,
    migrate_one_history,
    on_registry,
    schema_of,
    seed_every_table,
    version_tables,
)

HEAD = "0015"
GATEWAY_TABLES = {"api_keys", "api_key_changes", "directory_users", "console_sessions"}


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="store-sqlite"),
        pytest.param("postgres", id="store-postgres", marks=pytest.mark.postgres),
    ]
)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty registry database (the URL the gateway would be given)."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}"
    return str(request.getfixturevalue("postgres_url"))


async def _legacy(url: str, catalog: str | None, gateway: str | None) -> None:
    await on_registry(url, build_two_histories, catalog, gateway)


async def _fresh_head_schema(tmp_path: Path, url: str) -> dict[str, Any]:
    """The schema the one history builds on an empty database of the same kind as `url`."""
    if url.startswith("sqlite"):
        fresh = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    else:
        from tests.support import postgres

        fresh = postgres.create_database()
    await migrate_registry(fresh)
    return await on_registry(fresh, schema_of)


async def test_a_fresh_database_migrates_to_the_head_of_one_history(url: str) -> None:
    await migrate_registry(url)
    assert await on_registry(url, version_tables) == {"alembic_version": [HEAD]}
    tables = set(await on_registry(url, schema_of))
    assert GATEWAY_TABLES | {"namespaces", "catalog_objects", "dropped_objects"} <= tables
    state = await schema_state(url)
    assert (state.current, state.head, state.at_head) == (HEAD, HEAD, True)
    await ensure_current(url)


async def test_the_one_history_builds_what_the_two_histories_built(url: str, tmp_path: Path) -> None:
    await _legacy(url, "0006", "gw0006")
    assert await on_registry(url, schema_of) == await _fresh_head_schema(tmp_path, url)


async def test_a_registry_at_both_old_heads_is_adopted_without_touching_a_row(url: str) -> None:
    await _legacy(url, "0006", "gw0006")
    seeded = await on_registry(url, seed_every_table)
    assert GATEWAY_TABLES | {"namespaces", "catalog_objects", "idempotency_records"} <= set(seeded)
    before = await on_registry(url, dump_rows)
    schema_before = await on_registry(url, schema_of)

    state = await schema_state(url)
    assert not state.at_head
    assert "0006 + gateway gw0006 (two histories" in state.describe()
    with pytest.raises(SchemaOutdatedError, match=r"outdated .*two histories.*cedarberg db upgrade"):
        await ensure_current(url)

    after = await upgrade(url)
    assert (after.current, after.at_head) == (HEAD, True)
    # The old version table is dropped: one version table per database.
    assert await on_registry(url, version_tables) == {"alembic_version": [HEAD]}
    assert await on_registry(url, dump_rows) == before
    assert all(len(rows) == 1 for rows in before.values())
    assert await on_registry(url, schema_of) == schema_before
    await upgrade(url)  # again: nothing to do
    assert await on_registry(url, dump_rows) == before


@pytest.mark.parametrize(
    ("catalog", "gateway"),
    [("0004", "gw0003"), ("0006", "gw0001"), ("0005", None), (None, "gw0006")],
)
async def test_an_older_pair_upgrades_through_the_one_history(
    url: str, tmp_path: Path, catalog: str | None, gateway: str | None
) -> None:
    await _legacy(url, catalog, gateway)
    seeded = await on_registry(url, seed_every_table)
    await migrate_registry(url)
    assert await on_registry(url, version_tables) == {"alembic_version": [HEAD]}
    assert await on_registry(url, schema_of) == await _fresh_head_schema(tmp_path, url)
    rows = await on_registry(url, dump_rows)
    for table, row in seeded.items():  # each row kept, its columns as they were
        assert [{column: kept[column] for column in row} for kept in rows[table]] == [row], table


async def test_gateways_starting_together_adopt_once(url: str) -> None:
    await _legacy(url, "0004", "gw0006")
    seeded = await on_registry(url, seed_every_table)
    await asyncio.gather(*(migrate_registry(url) for _ in range(3)))
    assert await on_registry(url, version_tables) == {"alembic_version": [HEAD]}
    rows = await on_registry(url, dump_rows)
    assert all(len(rows[table]) == 1 for table in seeded)


async def test_a_failed_upgrade_leaves_the_two_histories_as_they_were(url: str) -> None:
    await _legacy(url, "0001", "gw0006")
    seed = (
        "INSERT INTO namespaces VALUES ('default', 'db', NULL, '{}', 0)",
        "INSERT INTO catalog_objects VALUES ('default', 'db', 't', 'table', "
        "'5f2c1f4e-2a43-4a0e-9d84-1f4d1f6f1a11', 'file:///w/db/t/metadata/00000-x.metadata.json', "
        "'{\"format-version\": 2}', 0, 0)",
    )

    def unsealed_table(connection: Connection) -> None:
        for statement in seed:
            connection.execute(sa.text(statement))

    await on_registry(url, unsealed_table)
    before = await on_registry(url, dump_rows)
    with pytest.raises(RuntimeError, match="cedarberg rebuild"):  # 0002 refuses plaintext tables
        await migrate_registry(url)
    assert await on_registry(url, version_tables) == {
        "alembic_version": ["0001"],
        LEGACY_VERSION_TABLE: ["gw0006"],
    }
    assert await on_registry(url, dump_rows) == before


async def test_a_gateway_history_of_a_newer_release_is_refused_unchanged(url: str) -> None:
    await _legacy(url, "0006", "gw0006")

    def newer(connection: Connection) -> None:
        connection.execute(sa.text(f"UPDATE {LEGACY_VERSION_TABLE} SET version_num = 'gw0007'"))

    await on_registry(url, newer)
    with pytest.raises(SchemaHistoryError, match="gw0007, which this version does not know"):
        await migrate_registry(url)
    assert await on_registry(url, version_tables) == {
        "alembic_version": ["0006"],
        LEGACY_VERSION_TABLE: ["gw0007"],
    }


async def test_a_schema_of_a_newer_release_is_refused_not_called_outdated(url: str) -> None:
    await migrate_registry(url)

    def newer(connection: Connection) -> None:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))

    await on_registry(url, newer)
    with pytest.raises(SchemaOutdatedError, match=r"ahead of this version .*0099.*upgrade cedarberg"):
        await ensure_current(url)
    with pytest.raises(SchemaHistoryError, match="ahead of this version"):
        await upgrade(url)
    assert await on_registry(url, version_tables) == {"alembic_version": ["0099"]}


async def test_downgrade_steps_back_through_the_one_history(url: str) -> None:
    await _legacy(url, "0006", "gw0006")
    seeded = await on_registry(url, seed_every_table)
    await migrate_registry(url)
    # As before, downgrades are Alembic's, one revision's script at a time: the gateway's
    # revisions first (they come last), then the catalog's.
    await on_registry(url, migrate_one_history, "downgrade", "0006")
    tables = set(await on_registry(url, schema_of))
    assert not tables & GATEWAY_TABLES
    await on_registry(url, migrate_one_history, "downgrade", "0005")
    assert await on_registry(url, version_tables) == {"alembic_version": ["0005"]}
    rows = await on_registry(url, dump_rows)
    assert rows["catalog_objects"] == [{column: value for column, value in seeded["catalog_objects"].items()}]
    await migrate_registry(url)  # and up again
    assert await on_registry(url, version_tables) == {"alembic_version": [HEAD]}
