"""API keys: one row per key; only an Argon2id hash of the secret is stored.

Revision ID: gw0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "gw0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("principal", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("groups", sa.JSON, nullable=False),
        sa.Column("secret_hash", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("description", sa.String(1024), nullable=False),
    )
    op.create_index("ix_api_keys_principal", "api_keys", ["principal"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_principal", table_name="api_keys")
    op.drop_table("api_keys")
