"""The reserve each attempt's plan kept for the jobs waiting on it (``attempts.reserve_hours``):
how long before the job's deadline the plan that launched it was to finish. The spot decider
plans a running attempt to that time; rows recorded before have none (the decider falls back to
the dependency graph's reserve, as it did).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``attempts.reserve_hours`` (nullable: unknown for the rows before)."""
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("reserve_hours", sa.Float))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("reserve_hours")
