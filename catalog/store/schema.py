"""Relational schema of the registry. Alembic migrations create exactly these tables.

Tables and views share one `catalog_objects` table so that a table and a view can never hold the
same name, which the Iceberg REST spec requires, and so the uniqueness is the database's job.
Foreign keys with RESTRICT make "drop only an empty namespace" a database guarantee even under
concurrent creates.

Nothing readable about a table or view is stored: `metadata` is the sealed copy of the current
metadata (kms.envelope, bound to warehouse, object UUID and metadata version) and the object's data
key is stored only wrapped (`wrapped_key`), beside the KEK URI and version that wrapped it.
Idempotent responses are sealed under the registry's own data key (`registry_keys`), metrics
reports under their table's key.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

namespaces = Table(
    "namespaces",
    metadata,
    Column("warehouse", String(128), primary_key=True),
    Column("name", String(1024), primary_key=True),
    Column("parent", String(1024), nullable=True),
    Column("properties", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    ForeignKeyConstraint(
        ["warehouse", "parent"],
        ["namespaces.warehouse", "namespaces.name"],
        ondelete="RESTRICT",
        name="fk_namespaces_parent",
    ),
    Index("ix_namespaces_parent", "warehouse", "parent", "name"),
)


def _object_columns() -> list[Column[object]]:
    """What a table or view row holds, live or soft-deleted (fresh Column objects per table)."""
    return [
        Column("kind", String(8), nullable=False),
        Column("uuid", String(36), nullable=False),
        Column("metadata_location", Text, nullable=False),
        Column("metadata", LargeBinary, nullable=False),
        Column("version", Integer, nullable=False),
        Column("kek_uri", String(1024), nullable=False),
        Column("kek_version", String(256), nullable=False),
        Column("wrapped_key", LargeBinary, nullable=False),
    ]


catalog_objects = Table(
    "catalog_objects",
    metadata,
    Column("warehouse", String(128), primary_key=True),
    Column("namespace", String(1024), primary_key=True),
    Column("name", String(255), primary_key=True),
    *_object_columns(),
    Column("updated_at_ms", BigInteger, nullable=False),
    ForeignKeyConstraint(
        ["warehouse", "namespace"],
        ["namespaces.warehouse", "namespaces.name"],
        ondelete="RESTRICT",
        name="fk_objects_namespace",
    ),
    UniqueConstraint("uuid", name="uq_objects_uuid"),
    Index("ix_objects_kind", "warehouse", "namespace", "kind", "name"),
)

idempotency_records = Table(
    "idempotency_records",
    metadata,
    Column("key", String(36), primary_key=True),
    Column("operation", String(512), nullable=False),
    Column("outcome", String(8), nullable=False),
    Column("payload", LargeBinary, nullable=True),
    Column("created_at", Float, nullable=False),
    Index("ix_idempotency_created", "created_at"),
)

metrics_reports = Table(
    "metrics_reports",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("warehouse", String(128), nullable=False),
    Column("namespace", String(1024), nullable=False),
    Column("name", String(255), nullable=False),
    Column("report_type", String(64), nullable=False),
    Column("report", LargeBinary, nullable=False),
    Column("received_at_ms", BigInteger, nullable=False),
    Index("ix_metrics_table", "warehouse", "namespace", "name"),
)

# Soft-deleted objects of sealed warehouses, kept for the retention, then purged (files deleted,
# row and with it the data key destroyed). No foreign key: the namespace may go meanwhile.
dropped_objects = Table(
    "dropped_objects",
    metadata,
    Column("drop_id", String(36), primary_key=True),
    Column("warehouse", String(128), nullable=False),
    Column("namespace", String(1024), nullable=False),
    Column("name", String(255), nullable=False),
    *_object_columns(),
    Column("moved_files", Text, nullable=False),
    Column("dropped_at_ms", BigInteger, nullable=False),
    Column("purge_after_ms", BigInteger, nullable=False),
    Index("ix_dropped_purge", "purge_after_ms"),
    Index("ix_dropped_name", "warehouse", "namespace", "name"),
)

# Data keys that belong to the registry rather than to one object (sealing idempotent responses).
registry_keys = Table(
    "registry_keys",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("uuid", String(36), nullable=False),
    Column("kek_uri", String(1024), nullable=False),
    Column("kek_version", String(256), nullable=False),
    Column("wrapped_key", LargeBinary, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
)
