"""The API key change feed: one row per revocation or rotation, so every gateway process can
evict its cached verifications of that key within `api_keys.change_poll_seconds`.

Revision ID: gw0002
Revises: gw0001
"""

import sqlalchemy as sa
from alembic import op

revision = "gw0002"
down_revision = "gw0001"


def upgrade() -> None:
    op.create_table(
        "api_key_changes",
        # BIGINT on PostgreSQL; SQLite autoincrements only an INTEGER PRIMARY KEY.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("key_id", sa.String(16), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_api_key_changes_changed_at", "api_key_changes", ["changed_at"])


def downgrade() -> None:
    op.drop_index("ix_api_key_changes_changed_at", table_name="api_key_changes")
    op.drop_table("api_key_changes")
