"""What the service has seen of each spot offering's market (the spot decider's estimates
survive a restart).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``market_histories``."""
    op.create_table(
        "market_histories",
        sa.Column("offering_id", sa.String(255), primary_key=True),
        sa.Column("up", sa.Boolean),
        sa.Column("since", UtcDateTime),
        sa.Column("seen_start", sa.Boolean, nullable=False),
        sa.Column("observations", sa.Integer, nullable=False),
        sa.Column("periods", sa.Text, nullable=False),
    )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("market_histories")
