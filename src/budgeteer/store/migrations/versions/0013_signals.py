"""Retraining signals and what each caused (``budgeteer trigger``, ``POST /v1/signals``).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``signals``."""
    op.create_table(
        "signals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("team", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("severity", sa.String(32), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(128)),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("statistics", sa.Text, nullable=False),
    )
    op.create_index("ix_signals_model", "signals", ["model"])


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_signals_model", table_name="signals")
    op.drop_table("signals")
