"""The registry's one Alembic migration history (version table `alembic_version`): the catalog's
tables (0001..0006) and the gateway's (0007 on); see catalog.store.history."""
