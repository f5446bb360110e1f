"""Sealed registry: sealed metadata copies with wrapped per-object data keys, soft-deleted objects,
registry data keys; idempotency payloads and metrics reports become sealed bytes.

Unsealed rows cannot be converted without the KMS, and a migration must not call out to one, so
this revision refuses a registry that already holds tables or views: start from an empty registry
and run `cedarberg rebuild` (or registerTable) against the warehouse instead. Idempotency records
(short-lived by design) and stored metrics reports of the pre-encryption schema are discarded.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def _objects_table(name: str, *extra: sa.Column[object] | sa.Constraint) -> None:
    op.create_table(
        name,
        *extra,
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("metadata_location", sa.Text, nullable=False),
        sa.Column("metadata", sa.LargeBinary, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("kek_uri", sa.String(1024), nullable=False),
        sa.Column("kek_version", sa.String(256), nullable=False),
        sa.Column("wrapped_key", sa.LargeBinary, nullable=False),
    )


def upgrade() -> None:
    count = op.get_bind().execute(sa.text("SELECT count(*) FROM catalog_objects")).scalar_one()
    if count:
        raise RuntimeError(
            "this registry holds unsealed tables or views from a build without encryption; "
            "start with an empty registry and run `cedarberg rebuild` against the warehouse"
        )
    op.drop_table("catalog_objects")
    _objects_table(
        "catalog_objects",
        sa.Column("warehouse", sa.String(128), primary_key=True),
        sa.Column("namespace", sa.String(1024), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
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
    _objects_table(
        "dropped_objects",
        sa.Column("drop_id", sa.String(36), primary_key=True),
        sa.Column("warehouse", sa.String(128), nullable=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("moved_files", sa.Text, nullable=False),
        sa.Column("dropped_at_ms", sa.BigInteger, nullable=False),
        sa.Column("purge_after_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_dropped_purge", "dropped_objects", ["purge_after_ms"])
    op.create_index("ix_dropped_name", "dropped_objects", ["warehouse", "namespace", "name"])
    op.create_table(
        "registry_keys",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("kek_uri", sa.String(1024), nullable=False),
        sa.Column("kek_version", sa.String(256), nullable=False),
        sa.Column("wrapped_key", sa.LargeBinary, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.drop_table("idempotency_records")
    op.create_table(
        "idempotency_records",
        sa.Column("key", sa.String(36), primary_key=True),
        sa.Column("operation", sa.String(512), nullable=False),
        sa.Column("outcome", sa.String(8), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_idempotency_created", "idempotency_records", ["created_at"])
    op.drop_table("metrics_reports")
    op.create_table(
        "metrics_reports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("warehouse", sa.String(128), nullable=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("report_type", sa.String(64), nullable=False),
        sa.Column("report", sa.LargeBinary, nullable=False),
        sa.Column("received_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_metrics_table", "metrics_reports", ["warehouse", "namespace", "name"])


def downgrade() -> None:
    raise RuntimeError("the sealed registry cannot be downgraded to plaintext")
