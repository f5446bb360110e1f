"""Idempotency records bound to principal and request; metrics report retention.

- `idempotency_records.request_hash`: a keyed hash of the request a record answered, so the same
  Idempotency-Key with a different request is refused (422) rather than replayed. Records are now
  stored under a keyed hash of (principal, Idempotency-Key); older records, stored under the raw
  key, are never found again and expire with the key lifetime.
- `ix_metrics_received`: the retention sweep deletes reports by age.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.add_column("idempotency_records", sa.Column("request_hash", sa.String(64), nullable=True))
    op.create_index("ix_metrics_received", "metrics_reports", ["received_at_ms"])


def downgrade() -> None:
    op.drop_index("ix_metrics_received", table_name="metrics_reports")
    with op.batch_alter_table("idempotency_records") as batch:
        batch.drop_column("request_hash")
