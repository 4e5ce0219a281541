"""Live prices: each offering's price readings from the clouds' feeds, exact, with their source.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``price_points``."""
    op.create_table(
        "price_points",
        sa.Column("offering_id", sa.String(255), primary_key=True),
        sa.Column("at", UtcDateTime, primary_key=True),
        sa.Column("usd_per_hour", sa.Numeric(18, 8), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
    )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("price_points")
