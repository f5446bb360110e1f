"""Sessions of the browser console, and its sign-ins in progress.

A console session is the principal someone signed in as (with an API key, or an OpenID Connect
issuer's id_token), kept server-side so that every gateway process and worker sees it and a
sign-out ends it everywhere at once. Rows are found by the SHA-256 of the secret the browser
holds (the session cookie, or a sign-in's `state`), never by the secret itself.

Revision ID: gw0006
Revises: gw0005
"""

import sqlalchemy as sa
from alembic import op

revision = "gw0006"
down_revision = "gw0005"


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_seen_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_console_sessions_state_expires", "console_sessions", ["state", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_state_expires", "console_sessions")
    op.drop_table("console_sessions")
