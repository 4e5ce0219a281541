"""The spot decider's moves, kept as data (``explain`` reads them; events keep the words).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``spot_decisions``."""
    op.create_table(
        "spot_decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("attempt_id", sa.Integer),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("offering_id", sa.String(255), nullable=False),
        sa.Column("decided", sa.String(16), nullable=False),
        sa.Column("safety_net", sa.Text, nullable=False),
        sa.Column("situation", sa.Text, nullable=False),
    )
    op.create_index("ix_spot_decisions_job_id", "spot_decisions", ["job_id"])


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_spot_decisions_job_id", table_name="spot_decisions")
    op.drop_table("spot_decisions")
