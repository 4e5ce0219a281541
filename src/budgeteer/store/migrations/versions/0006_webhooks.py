"""The webhook outbox.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``webhook_deliveries``."""
    op.create_table(
        "webhook_deliveries",
        sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("next_at", UtcDateTime),
        sa.Column("delivered_at", UtcDateTime),
        sa.Column("last_error", sa.Text),
    )
    op.create_index("ix_webhook_deliveries_next_at", "webhook_deliveries", ["next_at"])


def downgrade() -> None:
    """Drop it."""
    op.drop_table("webhook_deliveries")
