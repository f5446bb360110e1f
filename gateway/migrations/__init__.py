"""Alembic migrations of the gateway's own tables (version table `alembic_version_gateway`)."""
