"""Initial registry schema: namespaces, catalog objects, idempotency records, metrics reports.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "namespaces",
        sa.Column("warehouse", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(1024), primary_key=True),
        sa.Column("parent", sa.String(1024), nullable=True),
        sa.Column("properties", sa.Text, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.ForeignKeyConstraint(
            ["warehouse", "parent"],
            ["namespaces.warehouse", "namespaces.name"],
            ondelete="RESTRICT",
            name="fk_namespaces_parent",
        ),
    )
    op.create_index("ix_namespaces_parent", "namespaces", ["warehouse", "parent", "name"])
    op.create_table(
        "catalog_objects",
        sa.Column("warehouse", sa.String(128), primary_key=True),
        sa.Column("namespace", sa.String(1024), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("metadata_location", sa.Text, nullable=False),
        sa.Column("metadata", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
        sa.ForeignKeyConstraint(
            ["warehouse", "namespace"],
            ["namespaces.warehouse", "namespaces.name"],
            ondelete="RESTRICT",
            name="fk_objects_namespace",
        ),
        sa.UniqueConstraint("uuid", name="uq_objects_uuid"),
    )
    op.create_index("ix_objects_kind", "catalog_objects", ["warehouse", "namespace", "kind", "name"])
    op.create_table(
        "idempotency_records",
        sa.Column("key", sa.String(36), primary_key=True),
        sa.Column("operation", sa.String(512), nullable=False),
        sa.Column("outcome", sa.String(8), nullable=False),
        sa.Column("payload", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_idempotency_created", "idempotency_records", ["created_at"])
    op.create_table(
        "metrics_reports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("warehouse", sa.String(128), nullable=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("report_type", sa.String(64), nullable=False),
        sa.Column("report", sa.Text, nullable=False),
        sa.Column("received_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_metrics_table", "metrics_reports", ["warehouse", "namespace", "name"])


def downgrade() -> None:
    op.drop_table("metrics_reports")
    op.drop_table("idempotency_records")
    op.drop_table("catalog_objects")
    op.drop_table("namespaces")
