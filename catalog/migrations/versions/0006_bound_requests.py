"""Idempotency records bound to principal and request; metrics report retention (reserved slot).

Revision ID: 0006
Revises: 0005
"""

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
