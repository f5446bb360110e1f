"""The registry's migrations: 0002 (sealed registry) refuses to drop unsealed tables silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.support.migrations import downgrade, upgrade


def _seed_unsealed_table(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO namespaces VALUES ('default', 'db', NULL, '{}', 0)"))
        connection.execute(
            text(
                "INSERT INTO catalog_objects VALUES ('default', 'db', 't', 'table', "
                "'5f2c1f4e-2a43-4a0e-9d84-1f4d1f6f1a11', 'file:///w/db/t/metadata/00000-x.metadata.json', "
                "'{\"format-version\": 2}', 0, 0)"
            )
        )
    engine.dispose()


def test_sealed_registry_migration_refuses_unsealed_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001")
    _seed_unsealed_table(url)
    with pytest.raises(RuntimeError, match="cedarberg rebuild"):
        upgrade(url, "head")
    engine = create_engine(url)
    with engine.connect() as connection:  # nothing was dropped: the old registry is intact
        assert connection.execute(text("SELECT count(*) FROM catalog_objects")).scalar_one() == 1
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0001"
    engine.dispose()


def test_sealed_registry_migration_upgrades_an_empty_registry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url, "0001")
    upgrade(url, "head")
    engine = create_engine(url)
    with engine.connect() as connection:
        columns = {row[1] for row in connection.execute(text("PRAGMA table_info(catalog_objects)"))}
        tables = {
            row[0] for row in connection.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))
        }
    engine.dispose()
    assert {"metadata", "kek_uri", "kek_version", "wrapped_key"} <= columns
    assert {"dropped_objects", "registry_keys"} <= tables


def test_bound_requests_migration_adds_the_request_hash_and_the_retention_index(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bound.db'}"
    upgrade(url, "0005")
    engine = create_engine(url)
    with engine.begin() as connection:  # a record from before: kept, with no request hash
        connection.execute(
            text("INSERT INTO idempotency_records VALUES ('k', 'POST /v1/x', 'ok', NULL, 1.0)")
        )
    engine.dispose()
    upgrade(url, "head")
    engine = create_engine(url)
    with engine.connect() as connection:
        columns = {row[1] for row in connection.execute(text("PRAGMA table_info(idempotency_records)"))}
        indexes = {row[1] for row in connection.execute(text("PRAGMA index_list(metrics_reports)"))}
        hashes = connection.execute(text("SELECT request_hash FROM idempotency_records")).fetchall()
    engine.dispose()
    assert "request_hash" in columns
    assert "ix_metrics_received" in indexes
    assert hashes == [(None,)]  # never replayed: catalog.idempotency refuses a record without one

    downgrade(url, "0005")
    engine = create_engine(url)
    with engine.connect() as connection:
        columns = {row[1] for row in connection.execute(text("PRAGMA table_info(idempotency_records)"))}
        indexes = {row[1] for row in connection.execute(text("PRAGMA index_list(metrics_reports)"))}
    engine.dispose()
    assert "request_hash" not in columns
    assert "ix_metrics_received" not in indexes
