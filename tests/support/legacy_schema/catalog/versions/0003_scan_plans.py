"""Server-side scan plans and their sealed result pages (catalog.planning).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "scan_plans",
        sa.Column("plan_id", sa.String(64), primary_key=True),
        sa.Column("warehouse", sa.String(128), nullable=False),
        sa.Column("table_uuid", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("owner", sa.String(512), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error_kind", sa.String(64), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_scan_plans_expires", "scan_plans", ["expires_at_ms"])
    op.create_table(
        "scan_plan_pages",
        sa.Column("token", sa.String(64), primary_key=True),
        sa.Column("plan_id", sa.String(64), nullable=False),
        sa.Column("page_no", sa.Integer, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.UniqueConstraint("plan_id", "page_no", name="uq_scan_plan_pages_page"),
    )


def downgrade() -> None:
    op.drop_table("scan_plan_pages")
    op.drop_index("ix_scan_plans_expires", table_name="scan_plans")
    op.drop_table("scan_plans")
