"""Token cut-offs per API key: a key's generation, bumped by every rotation and revocation.

Gateway tokens carry the generation of the key they were issued for; a token whose generation is
older than the key's is refused (`ApiKeyAuthenticator.check_token`). The change feed carries the
generation each change produced, so every gateway process learns the cut-off within
`api_keys.change_poll_seconds`.

Revision ID: gw0003
Revises: gw0002
"""

import sqlalchemy as sa
from alembic import op

revision = "gw0003"
down_revision = "gw0002"


def upgrade() -> None:
    op.add_column(
        "api_keys", sa.Column("generation", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )
    op.add_column(
        "api_key_changes",
        sa.Column("generation", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    with op.batch_alter_table("api_key_changes") as batch:
        batch.drop_column("generation")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("generation")
