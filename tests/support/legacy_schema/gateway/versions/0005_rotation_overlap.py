"""Key rotation with an overlap window: the previous secret's hash and when it stops working.

A rotation may keep the key's previous secret working for a while (`overlap_seconds`, bounded by
`api_keys.max_rotation_overlap_seconds`), so the engines holding it can be moved to the new one.
Only one previous secret is kept: a second rotation replaces it, a revocation clears it. The
change feed carries the end of the overlap with each rotation, so every gateway process stops
accepting the previous secret, and the gateway tokens it proved, at that time.

Revision ID: gw0005
Revises: gw0004
"""

import sqlalchemy as sa
from alembic import op

revision = "gw0005"
down_revision = "gw0004"


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("previous_secret_hash", sa.String(255), nullable=True))
    op.add_column("api_keys", sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True))
    op.add_column("api_key_changes", sa.Column("previous_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_key_changes") as batch:
        batch.drop_column("previous_until")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("previous_secret_until")
        batch.drop_column("previous_secret_hash")
