"""The registry's schema as one thing: the catalog's migrations (`catalog/migrations`, version table
`alembic_version`) and the gateway's (`gateway/migrations`, API keys, `alembic_version_gateway`).

    states = await schema_states(url)    # where each migration tree is, and its head
    await upgrade(url)                   # both trees to head, under each tree's lock
    await ensure_current(url)            # raises SchemaOutdatedError naming what is behind

`cedarberg db upgrade` and `cedarberg db current` use these; `cedarberg serve` upgrades at start
(`migrate_on_start`) or refuses an outdated schema. Upgrades take a PostgreSQL advisory lock per
tree (SQLite: the write lock), so gateways starting together run each migration once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection

from cedarberg.catalog.errors import CatalogError
from cedarberg.catalog.store.engine import MIGRATIONS as CATALOG_MIGRATIONS
from cedarberg.catalog.store.engine import on_schema_connection
from cedarberg.catalog.store.sql import Store
from cedarberg.gateway.authn.key_store import MIGRATIONS as GATEWAY_MIGRATIONS
from cedarberg.gateway.authn.key_store import VERSION_TABLE as GATEWAY_VERSION_TABLE
from cedarberg.gateway.authn.key_store import open_key_store


class SchemaOutdatedError(CatalogError):
    """The registry's schema is behind what this gateway needs (run `cedarberg db upgrade`)."""


@dataclass(frozen=True, slots=True)
class SchemaState:
    tree: str  # "catalog" | "gateway"
    current: str | None  # None: never migrated (an empty database)
    head: str

    @property
    def at_head(self) -> bool:
        return self.current == self.head

    def describe(self) -> str:
        where = self.current or "empty"
        return f"{self.tree}: {where}" + ("" if self.at_head else f" (needs {self.head})")


_TREES: tuple[tuple[str, Path, str], ...] = (
    ("catalog", CATALOG_MIGRATIONS, "alembic_version"),
    ("gateway", GATEWAY_MIGRATIONS, GATEWAY_VERSION_TABLE),
)


def _heads() -> list[SchemaState]:
    # Imported here, as in catalog.store.sql: Alembic is slow to import and needed once.
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    heads = []
    for tree, location, _ in _TREES:
        config = Config()
        config.set_main_option("script_location", str(location))
        heads.append(SchemaState(tree, None, str(ScriptDirectory.from_config(config).get_current_head())))
    return heads


def _states(connection: Connection) -> list[SchemaState]:
    from alembic.runtime.migration import MigrationContext

    states = []
    for head, (_, _, version_table) in zip(_heads(), _TREES, strict=True):
        context = MigrationContext.configure(connection, opts={"version_table": version_table})
        states.append(SchemaState(head.tree, context.get_current_revision(), head.head))
    return states


def missing_sqlite_file(url: str) -> bool:
    """True when `url` is a SQLite file that does not exist (a registry never created)."""
    path = url.split("///", 1)[-1] if url.startswith("sqlite") else ""
    return bool(path) and path != ":memory:" and not Path(path).exists()


async def schema_states(url: str) -> list[SchemaState]:
    """Where each migration tree of the registry at `url` is. Raises StorageUnavailableError."""
    if missing_sqlite_file(url):  # report an empty registry without creating its file
        return [SchemaState(state.tree, None, state.head) for state in _heads()]
    return await on_schema_connection(url, _states, failure="cannot read the registry schema", write=False)


async def upgrade(url: str) -> list[SchemaState]:
    """Upgrade both trees to head (a no-op when they are there); returns the new states."""
    store = await Store.open(url)
    await store.close()
    keys = await open_key_store(url)
    await keys.close()
    return await schema_states(url)


async def ensure_current(url: str) -> None:
    """Raise SchemaOutdatedError unless both trees are at head."""
    behind = [state for state in await schema_states(url) if not state.at_head]
    if behind:
        detail = "; ".join(state.describe() for state in behind)
        raise SchemaOutdatedError(
            f"the registry schema is outdated ({detail}): run `cedarberg db upgrade` first"
        )
