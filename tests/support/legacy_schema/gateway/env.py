"""Alembic environment of the gateway's history as it was before one history per database
(version table `alembic_version_gateway`, revisions gw0001..gw0006): frozen, for building old
registries."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table="alembic_version_gateway", render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
