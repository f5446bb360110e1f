"""Alembic environment of the catalog's history as it was before one history per database
(version table `alembic_version`, revisions 0001..0006): frozen, for building old registries."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
