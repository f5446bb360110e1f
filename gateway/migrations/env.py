"""Alembic environment: runs on the connection handed over by `gateway.authn.key_store`.

The gateway's tables have their own version table so that these migrations and the catalog's
(`alembic_version`) can share one database without seeing each other's revisions.
"""

from alembic import context

from cedarberg.gateway.authn.key_store import VERSION_TABLE, metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()
