"""Alembic environment of the registry's one migration history (catalog.store.history): runs on
the connection handed over by `catalog.store.engine.run_migrations`.

`target_metadata` (used only by `alembic revision --autogenerate`) is the catalog's; the gateway's
tables (revisions 0007 on) are defined in the gateway, which the catalog may not import, so
autogenerate leaves tables it finds in the database but not in the catalog's metadata alone rather
than proposing to drop them.
"""

from typing import Any

from alembic import context

from cedarberg.catalog.store.schema import metadata


def _known_or_new(_object: Any, _name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    return not (type_ == "table" and reflected and compare_to is None)


connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=True,
    include_object=_known_or_new,
)
with context.begin_transaction():
    context.run_migrations()
