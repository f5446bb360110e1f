"""Object roots (reserved slot, filled by the location-exclusivity change).

Revision ID: 0004
Revises: 0003
"""

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
