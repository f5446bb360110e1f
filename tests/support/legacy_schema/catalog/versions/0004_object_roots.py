"""Object roots: the index behind exclusive locations (catalog.confinement), and dropped objects
by UUID (registration refuses a dropped object's UUID).

Rows for objects that exist already are recorded when a gateway starts (catalog.confinement
backfill), since they need each object's metadata, which only the KMS can open.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "object_roots",
        sa.Column("root", sa.LargeBinary, primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("owner", sa.String(1024), primary_key=True),
        sa.Column("warehouse", sa.String(128), nullable=False),
    )
    op.create_index("ix_object_roots_owner", "object_roots", ["kind", "owner"])
    op.create_index("ix_dropped_uuid", "dropped_objects", ["uuid"])


def downgrade() -> None:
    op.drop_index("ix_dropped_uuid", table_name="dropped_objects")
    op.drop_index("ix_object_roots_owner", table_name="object_roots")
    op.drop_table("object_roots")
