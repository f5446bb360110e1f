"""Purge failures per dropped object (reserved slot).

Revision ID: 0005
Revises: 0004
"""

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
