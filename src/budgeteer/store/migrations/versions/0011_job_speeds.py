"""Each job family's learned speed per accelerator (throughput learned from the jobs).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``job_speeds``."""
    op.create_table(
        "job_speeds",
        sa.Column("family", sa.String(128), primary_key=True),
        sa.Column("accelerator", sa.String(64), primary_key=True),
        sa.Column("factor", sa.Float, nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    """Drop it."""
    op.drop_table("job_speeds")
