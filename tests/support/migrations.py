"""Run the registry's Alembic migrations up to a revision, as `cedarberg db upgrade` would, and
build registries of earlier releases with their own (frozen) migration scripts.

    upgrade(url, "0005") / downgrade(url, "0005")        the one history, synchronous SQLite URL
    await on_registry(url, build_two_histories, "0004", "gw0003")   the two histories of before
    await on_registry(url, seed_every_table)             one row in every table, as they are
    await on_registry(url, dump_rows) / schema_of        what a migration must keep

`on_registry` takes the suite's registry URLs (`sqlite+aiosqlite:///...`, `postgresql+asyncpg://`)
and runs a synchronous function on a connection in one committed transaction: SQLite through the
standard library driver, PostgreSQL through asyncpg (the only PostgreSQL driver installed).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, create_engine, inspect
from sqlalchemy.ext.asyncio import create_async_engine

from cedarberg.catalog.store.history import LEGACY_VERSION_TABLE, MIGRATIONS

LEGACY_SCHEMA = Path(__file__).resolve().parent / "legacy_schema"
VERSION_TABLES = frozenset({"alembic_version", LEGACY_VERSION_TABLE})
_T = TypeVar("_T")


def upgrade(url: str, revision: str) -> None:
    """Migrate the registry at `url` (a synchronous SQLAlchemy URL) up to `revision`."""
    _migrate(url, revision, command.upgrade)


def downgrade(url: str, revision: str) -> None:
    """Migrate the registry at `url` down to `revision`."""
    _migrate(url, revision, command.downgrade)


def _migrate(url: str, revision: str, step: Callable[[Config, str], None]) -> None:
    engine = create_engine(url)
    with engine.begin() as connection:
        step(_config(MIGRATIONS, connection), revision)
    engine.dispose()


def _config(location: Path, connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(location))
    config.attributes["connection"] = connection
    return config


async def on_registry(url: str, work: Callable[..., _T], *args: Any) -> _T:
    """Run `work(connection, *args)` on the registry at `url` in one committed transaction."""
    if url.startswith("sqlite"):
        engine = create_engine("sqlite:///" + url.split("///", 1)[1])
        try:
            with engine.begin() as connection:
                return work(connection, *args)
        finally:
            engine.dispose()
    async_engine = create_async_engine(url)
    try:
        async with async_engine.begin() as connection:
            return await connection.run_sync(work, *args)
    finally:
        await async_engine.dispose()


def migrate_one_history(connection: Connection, step: str, revision: str) -> None:
    """`alembic upgrade|downgrade revision` on the product's one history."""
    getattr(command, step)(_config(MIGRATIONS, connection), revision)


def build_two_histories(connection: Connection, catalog: str | None, gateway: str | None) -> None:
    """A registry as a release before one history per database left it: the catalog's history at
    `catalog` and the gateway's at `gateway` (None: that history never ran), built with the
    scripts of those releases (tests/support/legacy_schema)."""
    if catalog is not None:
        command.upgrade(_config(LEGACY_SCHEMA / "catalog", connection), catalog)
    if gateway is not None:
        command.upgrade(_config(LEGACY_SCHEMA / "gateway", connection), gateway)


def version_tables(connection: Connection) -> dict[str, list[str]]:
    """Each Alembic version table in the database and the revisions it holds."""
    found = {}
    for table in sorted(VERSION_TABLES & set(inspect(connection).get_table_names())):
        rows = connection.execute(sa.text(f"SELECT version_num FROM {table}"))
        found[table] = sorted(row[0] for row in rows)
    return found


def seed_every_table(connection: Connection) -> dict[str, dict[str, Any]]:
    """Insert one row into every table but the version tables, whatever they are (reflected,
    in foreign-key order, each foreign key naming the row seeded in its table); returns them."""
    tables = sa.MetaData()
    tables.reflect(connection)
    seeded: dict[str, dict[str, Any]] = {}
    for table in tables.sorted_tables:
        if table.name in VERSION_TABLES:
            continue
        row = {column.name: _value_for(table, column, seeded) for column in table.columns}
        connection.execute(table.insert().values(row))
        seeded[table.name] = row
    return seeded


def _value_for(table: sa.Table, column: sa.Column[Any], seeded: dict[str, dict[str, Any]]) -> Any:
    for foreign_key in column.foreign_keys:
        target = foreign_key.column
        if target.table.name == table.name:
            if column.nullable:  # a row's parent: the seeded row has none
                return None
            continue  # a key column shared with its own parent reference (warehouse)
        return seeded[target.table.name][target.name]
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return True
    if isinstance(kind, sa.Integer):
        return 7
    if isinstance(kind, sa.Float | sa.Numeric):
        return 1.5
    if isinstance(kind, sa.DateTime):
        return datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC if kind.timezone else None)
    if isinstance(kind, sa.Date):
        return date(2026, 1, 2)
    if isinstance(kind, sa.JSON):
        return {"seeded": table.name}
    if isinstance(kind, sa.LargeBinary):
        return f"{table.name}.{column.name}".encode()
    if isinstance(kind, sa.String):  # Text included
        return f"{table.name}.{column.name}"[: kind.length or None]
    raise TypeError(f"no seed value for {table.name}.{column.name} ({kind!r})")


def dump_rows(connection: Connection) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table but the version tables, in a stable order."""
    tables = sa.MetaData()
    tables.reflect(connection)
    dump = {}
    for table in tables.sorted_tables:
        if table.name not in VERSION_TABLES:
            rows = connection.execute(sa.select(table)).mappings()
            dump[table.name] = sorted((dict(row) for row in rows), key=repr)
    return dump


def schema_of(connection: Connection) -> dict[str, dict[str, Any]]:
    """The tables but the version tables, as the database reports them: columns (type,
    nullability, default), primary key, indexes, unique constraints and foreign keys."""
    reflected = inspect(connection)
    schema = {}
    for name in sorted(set(reflected.get_table_names()) - VERSION_TABLES):
        schema[name] = {
            "columns": {
                column["name"]: (str(column["type"]), column["nullable"], column.get("default"))
                for column in reflected.get_columns(name)
            },
            "primary_key": reflected.get_pk_constraint(name)["constrained_columns"],
            "indexes": sorted(
                (index["name"], tuple(index["column_names"]), bool(index["unique"]))
                for index in reflected.get_indexes(name)
            ),
            "unique": sorted(
                (constraint["name"] or "", tuple(constraint["column_names"]))
                for constraint in reflected.get_unique_constraints(name)
            ),
            "foreign_keys": sorted(
                (key["referred_table"], tuple(key["constrained_columns"]), tuple(key["referred_columns"]))
                for key in reflected.get_foreign_keys(name)
            ),
        }
    return schema


def as_two_histories(connection: Connection, gateway: str) -> None:
    """Put the version tables of a registry of the one history, at the revision where the
    gateway's history was at `gateway` (gwN: 0006 + N), back the way a release with two histories
    kept them: `alembic_version` at 0006, `alembic_version_gateway` at `gateway`. The tables are
    those releases' already (the one history's 0001..0012 are their scripts, unchanged)."""
    current = connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
    assert int(current) == 6 + int(gateway.removeprefix("gw")), (current, gateway)
    connection.execute(sa.text("UPDATE alembic_version SET version_num = '0006'"))
    connection.execute(sa.text(f"CREATE TABLE {LEGACY_VERSION_TABLE} (version_num VARCHAR(32) NOT NULL)"))
    connection.execute(sa.text(f"INSERT INTO {LEGACY_VERSION_TABLE} VALUES (:gateway)"), {"gateway": gateway})
