"""Relational schema of the registry. Alembic migrations create exactly these tables.

Tables and views share one `catalog_objects` table so that a table and a view can never hold the
same name, which the Iceberg REST spec requires, and so the uniqueness is the database's job.
Foreign keys with RESTRICT make "drop only an empty namespace" a database guarantee even under
concurrent creates.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
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

catalog_objects = Table(
    "catalog_objects",
    metadata,
    Column("warehouse", String(128), primary_key=True),
    Column("namespace", String(1024), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("uuid", String(36), nullable=False),
    Column("metadata_location", Text, nullable=False),
    Column("metadata", Text, nullable=False),
    Column("version", Integer, nullable=False),
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
    Column("payload", Text, nullable=True),
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
    Column("report", Text, nullable=False),
    Column("received_at_ms", BigInteger, nullable=False),
    Index("ix_metrics_table", "warehouse", "namespace", "name"),
)
