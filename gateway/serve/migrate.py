"""The registry's schema as one thing: one Alembic migration history per database
(`catalog/migrations`, version table `alembic_version`), the gateway's tables included
(catalog.store.history).

    state = await schema_state(url)      # where the history is, and its head
    await upgrade(url)                   # to head, under the registry's migration lock
    await ensure_current(url)            # raises SchemaOutdatedError naming where it is

`cedarberg db upgrade` and `cedarberg db current` use these; `cedarberg serve` upgrades at start
(`migrate_on_start`) or refuses a schema that is not at head. A database still on the two
histories of earlier releases (`alembic_version` + `alembic_version_gateway`) is behind: the
upgrade moves it onto the one history without touching its rows. Upgrades take a PostgreSQL
advisory lock (SQLite: the write lock), so gateways starting together run each migration once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection

from cedarberg.catalog.errors import CatalogError
from cedarberg.catalog.store.connect import open_store
from cedarberg.catalog.store.engine import on_schema_connection
from cedarberg.catalog.store.history import MIGRATIONS, SchemaHistoryError, TwoHistories, two_histories

_T = TypeVar("_T")


class SchemaOutdatedError(CatalogError):
    """The registry's schema is not what this gateway needs (behind: run `cedarberg db upgrade`;
    ahead: a newer cedarberg wrote it)."""


@dataclass(frozen=True, slots=True)
class SchemaState:
    current: str | None  # None: never migrated (an empty database)
    head: str
    two_histories: TwoHistories | None = None  # still on the two histories of earlier releases
    known: bool = True  # False: `current` is no revision of this version (a newer one wrote it)

    @property
    def at_head(self) -> bool:
        return self.current == self.head and self.two_histories is None

    def where(self) -> str:
        if self.two_histories is not None:
            return self.two_histories.describe()
        return self.current or "empty"

    def describe(self) -> str:
        if not self.known:
            return f"registry: {self.where()} (unknown to this version, whose head is {self.head})"
        return f"registry: {self.where()}" + ("" if self.at_head else f" (needs {self.head})")


def _revisions() -> tuple[str, set[str]]:
    # Imported here, as in catalog.store.engine: Alembic is slow to import and needed once.
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    script = ScriptDirectory.from_config(config)
    return str(script.get_current_head()), {revision.revision for revision in script.walk_revisions()}


def _state(connection: Connection) -> SchemaState:
    from alembic.runtime.migration import MigrationContext

    head, known = _revisions()
    current = MigrationContext.configure(connection).get_current_revision()
    return SchemaState(current, head, two_histories(connection), current is None or current in known)


def missing_sqlite_file(url: str) -> bool:
    """True when `url` is a SQLite file that does not exist (a registry never created)."""
    path = url.split("///", 1)[-1] if url.startswith("sqlite") else ""
    return bool(path) and path != ":memory:" and not Path(path).exists()


async def _read_schema(url: str, read: Callable[[Connection], _T]) -> _T:
    """Run `read` on a connection of its own to the registry at `url` (nothing written).
    Raises StorageUnavailableError."""
    return await on_schema_connection(url, read, failure="cannot read the registry schema", write=False)


async def schema_state(url: str) -> SchemaState:
    """Where the migration history of the registry at `url` is. Raises StorageUnavailableError."""
    if missing_sqlite_file(url):  # report an empty registry without creating its file
        return SchemaState(None, _revisions()[0])
    return await _read_schema(url, _state)


async def upgrade(url: str) -> SchemaState:
    """Upgrade the registry's schema to head (a no-op when it is there); returns the new state.
    Raises SchemaHistoryError (a newer release's schema: nothing changed),
    StorageUnavailableError."""
    before = await schema_state(url)
    if not before.known:
        raise SchemaHistoryError(
            f"the registry schema is ahead of this version ({before.describe()}): upgrade cedarberg"
        )
    store = await open_store(url)
    await store.close()
    return await schema_state(url)


async def ensure_current(url: str) -> None:
    """Raise SchemaOutdatedError unless the registry's history is at head."""
    state = await schema_state(url)
    if not state.known:
        raise SchemaOutdatedError(
            f"the registry schema is ahead of this version ({state.describe()}): upgrade cedarberg"
        )
    if not state.at_head:
        raise SchemaOutdatedError(
            f"the registry schema is outdated ({state.describe()}): run `cedarberg db upgrade` first"
        )
