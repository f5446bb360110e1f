"""One migration history per database: the registry's schema, the gateway's tables included, is
one Alembic tree (`catalog/migrations`, version table `alembic_version`).

Until revision 0007 a registry held two histories: the catalog's (0001..0006 in
`alembic_version`) and the gateway's (gw0001..gw0006 in `alembic_version_gateway`). The gateway's
revisions are now 0007..0012 of the one history, unchanged. A database the two histories left
behind is moved onto the one history without touching a row:

    config = migration_config(connection)
    adopt_two_histories(connection, config)   # then `alembic upgrade head` as always

The tree lives in the catalog package because the catalog must build its schema by itself
(`catalog.store.connect.open_store`) and may not import the gateway; its revisions are plain DDL
that import nothing of either package, so the gateway's tables cost the catalog no dependency.

Invariants:
- Adoption runs on the caller's connection, inside its transaction and under its migration lock
  (catalog.store.engine.migrate_registry): it is all or nothing, and gateways starting together
  adopt once.
- The old version table is dropped in the same transaction: afterwards a database has exactly
  one version table, and a previous release refuses it (it cannot find revision 0007..0012)
  instead of migrating the gateway's tables a second time.
- A revision this version cannot place (written by a newer release) is refused, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

from cedarberg.catalog.errors import CatalogError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"  # catalog/migrations
LEGACY_VERSION_TABLE = "alembic_version_gateway"
LAST_CATALOG_ONLY = "0006"  # the catalog's head while the gateway had a history of its own
_CATALOG_ONLY = ("0001", "0002", "0003", "0004", "0005", LAST_CATALOG_ONLY)
# The gateway's old revisions and the same migration in the one history.
_ADOPTED = {
    "gw0001": "0007",
    "gw0002": "0008",
    "gw0003": "0009",
    "gw0004": "0010",
    "gw0005": "0011",
    "gw0006": "0012",
}


class SchemaHistoryError(CatalogError):
    """The registry's version tables name revisions this version cannot place in its history
    (a newer release wrote them): nothing was changed."""


@dataclass(frozen=True, slots=True)
class TwoHistories:
    """Where a database still on the two histories is (None: that history never ran)."""

    catalog: str | None
    gateway: str | None

    def describe(self) -> str:
        return (
            f"{self.catalog or 'empty'} + gateway {self.gateway or 'empty'} "
            f"(two histories, from before {LEGACY_VERSION_TABLE} was merged)"
        )

    def adopted_revision(self) -> str | None:
        """The revision of the one history this database is at, once its catalog part is at
        LAST_CATALOG_ONLY; None when the gateway's history never ran. Raises SchemaHistoryError."""
        if self.catalog is not None and self.catalog not in _CATALOG_ONLY:
            raise SchemaHistoryError(
                f"the registry is at {self.catalog} and still has the gateway's version table "
                f"{LEGACY_VERSION_TABLE} ({self.gateway}): this version cannot place them in "
                "its migration history; restore the backup taken before the upgrade"
            )
        if self.gateway is None:
            return None
        if self.gateway not in _ADOPTED:
            raise SchemaHistoryError(
                f"the registry's gateway history is at {self.gateway}, which this version does "
                "not know (a newer cedarberg wrote it): upgrade cedarberg"
            )
        return _ADOPTED[self.gateway]


def two_histories(connection: Connection) -> TwoHistories | None:
    """The revisions of both histories when the database still has the gateway's version table;
    None when it has one history (or none: an empty database)."""
    if not inspect(connection).has_table(LEGACY_VERSION_TABLE):
        return None
    from alembic.runtime.migration import MigrationContext

    catalog = MigrationContext.configure(connection).get_current_revision()
    gateway = MigrationContext.configure(
        connection, opts={"version_table": LEGACY_VERSION_TABLE}
    ).get_current_revision()
    return TwoHistories(catalog, gateway)


def migration_config(connection: Connection) -> Config:
    """An Alembic configuration of the one history, running on `connection`."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def adopt_two_histories(connection: Connection, config: Config) -> TwoHistories | None:
    """Move a database still on the two histories onto the one: its catalog part is upgraded to
    LAST_CATALOG_ONLY (catalog tables only, with the same scripts as before), the one history is
    stamped with the gateway's revision there, and the old version table is dropped. Returns
    what was adopted (None: nothing to do). Raises SchemaHistoryError, before any change."""
    found = two_histories(connection)
    if found is None:
        return None
    adopted = found.adopted_revision()
    if adopted is not None:
        from alembic import command

        command.upgrade(config, LAST_CATALOG_ONLY)
        command.stamp(config, adopted)
    # An old version table with no row: the gateway's history never completed a revision, and
    # the one history creates its tables from 0007.
    connection.execute(text(f"DROP TABLE {LEGACY_VERSION_TABLE}"))
    return found
