"""Initial schema: jobs, events, idempotency keys, attempts, ledger, budgets, prices.

The tables are spelled out here rather than taken from ``budgeteer.store.schema``: a migration
is a frozen record of one schema version, and later changes to the schema module come as new
migrations, never as edits to this one.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import ExactDecimal, UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create every table of :mod:`budgeteer.store.schema`."""
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("team", sa.String(64), nullable=False, index=True),
        sa.Column("state", sa.String(32), nullable=False, index=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("submitted_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "job_events",
        sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("from_state", sa.String(32)),
        sa.Column("to_state", sa.String(32), nullable=False),
        sa.Column("cause", sa.Text, nullable=False),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("request_hash", sa.String(128), nullable=False),
        sa.Column("job_ids", sa.JSON, nullable=False),
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("offering_id", sa.String(255), nullable=False),
        sa.Column("market", sa.String(32), nullable=False),
        sa.Column("instance_ids", sa.JSON, nullable=False),
        sa.Column("started_at", UtcDateTime, nullable=False),
        sa.Column("ended_at", UtcDateTime),
        sa.Column("exit_reason", sa.Text),
        sa.UniqueConstraint("job_id", "number", name="uq_attempt_number"),
    )
    op.create_table(
        "ledger_entries",
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), primary_key=True),
        sa.Column("start", UtcDateTime, primary_key=True),
        sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("end", UtcDateTime, nullable=False),
        sa.Column("usd_per_hour", ExactDecimal, nullable=False),
        sa.Column("amount_usd", ExactDecimal, nullable=False),
        sa.Column("price_source", sa.Text, nullable=False),
    )
    op.create_table(
        "budgets",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
    )
    op.create_table(
        "price_observations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("offering_id", sa.String(255), nullable=False, index=True),
        sa.Column("usd_per_hour", ExactDecimal, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("observed_at", UtcDateTime, nullable=False),
    )


def downgrade() -> None:
    """Drop everything, in dependency order."""
    for table in (
        "price_observations",
        "budgets",
        "ledger_entries",
        "attempts",
        "idempotency_keys",
        "job_events",
        "jobs",
    ):
        op.drop_table(table)
