"""Offerings backing off after refusals for capacity (a spot drought survives a restart).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``offering_backoffs``."""
    op.create_table(
        "offering_backoffs",
        sa.Column("offering_id", sa.String(255), primary_key=True),
        sa.Column("instances", sa.Integer, nullable=False),
        sa.Column("until", UtcDateTime, nullable=False),
        sa.Column("misses", sa.Integer, nullable=False),
        sa.Column("since", UtcDateTime, nullable=False),
        sa.Column("room_at", UtcDateTime),
    )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("offering_backoffs")
