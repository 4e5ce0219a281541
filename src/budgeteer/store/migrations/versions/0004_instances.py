"""How many instances (and workers) an attempt holds, and how many each ledger entry bills.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``attempts.instances``, ``attempts.workers`` and ``ledger_entries.instances`` (1 for
    rows recorded before)."""
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("instances", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("workers", sa.Integer, nullable=False, server_default="1"))
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("instances", sa.Integer, nullable=False, server_default="1"))


def downgrade() -> None:
    """Drop the three columns."""
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("workers")
        batch.drop_column("instances")
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("instances")
