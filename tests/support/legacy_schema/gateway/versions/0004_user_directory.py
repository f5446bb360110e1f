"""The user directory: people engines may act for (delegation), and their groups.

An engine acting for a user (an unsigned subject token at the token endpoint) names the user; the
directory, which only admins change (`/admin/v1/users`), says whether that user exists and which
groups it is in. Kept in the registry's database so every gateway process sees the same directory.

Revision ID: gw0004
Revises: gw0003
"""

import sqlalchemy as sa
from alembic import op

revision = "gw0004"
down_revision = "gw0003"


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
