"""Purge failures per dropped object: attempts, last error, next attempt (catalog.purge_failures).

The sweeper picks due objects by `next_purge_attempt_ms` (indexed) instead of `purge_after_ms`,
so an object whose purge keeps failing waits its backoff instead of being first in every sweep.
Existing rows start with no attempts and their next attempt at their purge time. Columns are only
added (with defaults), so SQLite does not rebuild the table.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.add_column(
        "dropped_objects", sa.Column("purge_attempts", sa.Integer, nullable=False, server_default="0")
    )
    op.add_column("dropped_objects", sa.Column("last_purge_error", sa.Text, nullable=True))
    op.add_column(
        "dropped_objects",
        sa.Column("next_purge_attempt_ms", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.execute("UPDATE dropped_objects SET next_purge_attempt_ms = purge_after_ms")
    op.drop_index("ix_dropped_purge", table_name="dropped_objects")
    op.create_index("ix_dropped_next_attempt", "dropped_objects", ["next_purge_attempt_ms"])


def downgrade() -> None:
    op.drop_index("ix_dropped_next_attempt", table_name="dropped_objects")
    op.create_index("ix_dropped_purge", "dropped_objects", ["purge_after_ms"])
    with op.batch_alter_table("dropped_objects") as batch:
        batch.drop_column("next_purge_attempt_ms")
        batch.drop_column("last_purge_error")
        batch.drop_column("purge_attempts")
