"""The registry's two Alembic histories as they were at the last release that had two (the
catalog's, 0001..0006 in `alembic_version`; the gateway's, gw0001..gw0006 in
`alembic_version_gateway`), copied verbatim from the git history. They build the old databases
that `tests/catalog/test_schema_history.py` upgrades; the product has one history only."""
