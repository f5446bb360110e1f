"""Token cut-offs per API key (reserved slot).

Revision ID: gw0003
Revises: gw0002
"""

revision = "gw0003"
down_revision = "gw0002"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
