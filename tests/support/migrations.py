"""Run the registry's Alembic migrations up to a revision, as `cedarberg db upgrade` would."""

from __future__ import annotations

from collections.abc import Callable

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine

from cedarberg.catalog.store.engine import MIGRATIONS


def upgrade(url: str, revision: str) -> None:
    """Migrate the registry at `url` (a synchronous SQLAlchemy URL) up to `revision`."""
    _migrate(url, revision, command.upgrade)


def downgrade(url: str, revision: str) -> None:
    """Migrate the registry at `url` down to `revision`."""
    _migrate(url, revision, command.downgrade)


def _migrate(url: str, revision: str, step: Callable[[Config, str], None]) -> None:
    engine = create_engine(url)
    with engine.begin() as connection:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        step(config, revision)
    engine.dispose()
