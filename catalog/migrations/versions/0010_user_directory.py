"""The user directory: people engines may act for (delegation), and their groups.

An engine acting for a user (an unsigned subject token at the token endpoint) names the user; the
directory, which only admins change (`/admin/v1/users`), says whether that user exists and which
groups it is in. Kept in the registry's database so every gateway process sees the same directory.

The gateway's gw0004 until the registry had one migration history (see catalog.store.history).

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    op.create_table(
        "directory_users",
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("directory_users")
