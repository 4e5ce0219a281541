"""Dashboard sessions kept server side (the browser holds a random id; only its hash is here).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``web_sessions``."""
    op.create_table(
        "web_sessions",
        sa.Column("session_hash", sa.String(128), primary_key=True),
        sa.Column("credential", sa.String(255), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_web_sessions_expires_at", "web_sessions", ["expires_at"])


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_web_sessions_expires_at", "web_sessions")
    op.drop_table("web_sessions")
