"""Pools' charges to teams: instances booted with no job (a pool's ``min``, a scheduled
``warm`` window), billed to the pool's team while they idle.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import ExactDecimal, UtcDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``pool_charges``."""
    op.create_table(
        "pool_charges",
        sa.Column("offering_id", sa.String(255), primary_key=True),
        sa.Column("team", sa.String(64), primary_key=True),
        sa.Column("start", UtcDateTime, primary_key=True),
        sa.Column("instance_ids", sa.Text, primary_key=True),
        sa.Column("end", UtcDateTime, nullable=False),
        sa.Column("usd_per_hour", ExactDecimal, nullable=False),
        sa.Column("amount_usd", ExactDecimal, nullable=False),
        sa.Column("price_source", sa.Text, nullable=False),
    )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("pool_charges")
