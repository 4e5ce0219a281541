"""API tokens (hashes only) and progress reports sent through the API.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from budgeteer.store.schema import UtcDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``api_tokens`` and ``progress_reports``; ``jobs.tier`` (filled from the spec)
    and an index for paging."""
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=False, unique=True),
        sa.Column("teams", sa.JSON, nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("revoked_at", UtcDateTime),
    )
    op.create_table(
        "progress_reports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
    )
    op.create_index("ix_progress_reports_job_id", "progress_reports", ["job_id"])
    op.create_index("ix_jobs_seq_id", "jobs", ["seq", "id"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("tier", sa.String(8)))
    jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("spec", sa.JSON))
    tier = sa.table("jobs", sa.column("id", sa.String), sa.column("tier", sa.String))
    bind = op.get_bind()
    for row in bind.execute(sa.select(jobs.c.id, jobs.c.spec)).all():
        bind.execute(tier.update().where(tier.c.id == row.id).values(tier=row.spec["tier"]))


def downgrade() -> None:
    """Drop them."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tier")
    op.drop_index("ix_jobs_seq_id", "jobs")
    op.drop_table("progress_reports")
    op.drop_table("api_tokens")
