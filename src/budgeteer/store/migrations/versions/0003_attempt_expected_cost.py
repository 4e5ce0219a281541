"""The cost an attempt's plan expected (for committed spend after a restart).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import ExactDecimal

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``attempts.expected_cost_usd`` (0 for attempts recorded before)."""
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(
            sa.Column("expected_cost_usd", ExactDecimal, nullable=False, server_default="0")
        )


def downgrade() -> None:
    """Drop ``attempts.expected_cost_usd``."""
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("expected_cost_usd")
