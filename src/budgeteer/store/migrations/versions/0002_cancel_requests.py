"""Cancellation requests for active jobs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``jobs.cancel_requested_at``."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("cancel_requested_at", UtcDateTime, nullable=True))


def downgrade() -> None:
    """Drop ``jobs.cancel_requested_at``."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("cancel_requested_at")
