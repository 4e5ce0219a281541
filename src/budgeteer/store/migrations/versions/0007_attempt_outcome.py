"""How each attempt ended, as a value (``attempts.outcome``) beside its exit reason's text.

Rows recorded before are filled from the prefixes their exit reasons were written with — the
last place those prefixes are read.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: (outcome, exit reason LIKE pattern), first match wins.
_LEGACY = (
    ("succeeded", "succeeded:%"),
    ("failed", "failed:%"),
    ("preempted", "preempted:%"),
    ("capacity", "capacity:%"),
    ("launch_failed", "launch failed:%"),
    ("lost", "lost:%"),
    ("early_stop", "stopped: early stop%"),
    ("to_on_demand", "stopped: switch to on-demand%"),
    ("scale_up", "stopped: scale up to%"),
    ("shutdown", "stopped: service shutdown%"),
    ("cancelled", "stopped:%"),
)


def upgrade() -> None:
    """Add ``attempts.outcome`` and fill it for ended attempts."""
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("outcome", sa.String(32)))
    attempts = sa.table(
        "attempts", sa.column("outcome", sa.String), sa.column("exit_reason", sa.Text)
    )
    for outcome, pattern in _LEGACY:
        op.execute(
            attempts.update()
            .where(attempts.c.outcome.is_(None) & attempts.c.exit_reason.like(pattern))
            .values(outcome=outcome)
        )


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("outcome")
