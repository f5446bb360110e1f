"""Purge failures per dropped object: attempts, last error, next attempt (catalog.purge_failures).

The sweeper picks due objects by `next_purge_attempt_ms` (indexed) instead of `purge_after_ms`,
so an object whose purge keeps failing waits its backoff instead of being first in every sweep.
Existing rows start with no attempts and their next attempt at their purge time.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    with op.batch_alter_table("dropped_objects") as batch:
        batch.add_column(sa.Column("purge_attempts", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("last_purge_error", sa.Text, nullable=True))
        batch.add_column(sa.Column("next_purge_attempt_ms", sa.BigInteger, nullable=True))
    op.execute("UPDATE dropped_objects SET next_purge_attempt_ms = purge_after_ms")
    with op.batch_alter_table("dropped_objects") as batch:
        batch.alter_column("next_purge_attempt_ms", existing_type=sa.BigInteger, nullable=False)
        batch.drop_index("ix_dropped_purge")
        batch.create_index("ix_dropped_next_attempt", ["next_purge_attempt_ms"])


def downgrade() -> None:
    with op.batch_alter_table("dropped_objects") as batch:
        batch.drop_index("ix_dropped_next_attempt")
        batch.create_index("ix_dropped_purge", ["purge_after_ms"])
        batch.drop_column("next_purge_attempt_ms")
        batch.drop_column("last_purge_error")
        batch.drop_column("purge_attempts")
