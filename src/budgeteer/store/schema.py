"""Tables of the SQL store (SQLAlchemy Core). The Alembic migrations create exactly these.

Money columns are exact: ``NUMERIC(20, 8)`` on PostgreSQL, decimal text on SQLite (whose
NUMERIC would round through a binary float). Times are stored in UTC and read back aware.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine


class ExactDecimal(TypeDecorator[Decimal]):
    """Decimal without binary floats on any backend."""

    impl = sa.Numeric(20, 8)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.String(48))
        return dialect.type_descriptor(sa.Numeric(20, 8, asdecimal=True))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, Decimal):
            raise TypeError(f"money must be a Decimal, got {type(value).__name__}")
        return str(value) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        return None if value is None else Decimal(str(value))


class UtcDateTime(TypeDecorator[datetime]):
    """Aware datetimes stored as UTC."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: times must carry a time zone")
        return (
            value.astimezone(UTC).replace(tzinfo=None)
            if dialect.name == "sqlite"
            else (value.astimezone(UTC))
        )

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = sa.MetaData()

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("team", sa.String(64), nullable=False, index=True),
    sa.Column("state", sa.String(32), nullable=False, index=True),
    sa.Column("tier", sa.String(8)),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("submitted_at", UtcDateTime, nullable=False),
    sa.Column("cancel_requested_at", UtcDateTime),
)

sa.Index("ix_jobs_seq_id", jobs.c.seq, jobs.c.id)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("from_state", sa.String(32)),
    sa.Column("to_state", sa.String(32), nullable=False),
    sa.Column("cause", sa.Text, nullable=False),
)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("request_hash", sa.String(128), nullable=False),
    sa.Column("job_ids", sa.JSON, nullable=False),
)

attempts = sa.Table(
    "attempts",
    metadata,
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
    sa.Column("expected_cost_usd", ExactDecimal, nullable=False, server_default="0"),
    sa.Column("instances", sa.Integer, nullable=False, server_default="1"),
    sa.Column("workers", sa.Integer, nullable=False, server_default="1"),
    sa.Column("outcome", sa.String(32)),
    sa.Column("reserve_hours", sa.Float),  # kept for the jobs waiting on it (None: not recorded)
    sa.UniqueConstraint("job_id", "number", name="uq_attempt_number"),
)

ledger_entries = sa.Table(
    "ledger_entries",
    metadata,
    sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempts.id"), primary_key=True),
    sa.Column("start", UtcDateTime, primary_key=True),
    sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), nullable=False, index=True),
    sa.Column("end", UtcDateTime, nullable=False),
    sa.Column("usd_per_hour", ExactDecimal, nullable=False),
    sa.Column("amount_usd", ExactDecimal, nullable=False),
    sa.Column("price_source", sa.Text, nullable=False),
    sa.Column("instances", sa.Integer, nullable=False, server_default="1"),
)

budgets = sa.Table(
    "budgets",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("spec", sa.JSON, nullable=False),
)

price_observations = sa.Table(
    "price_observations",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("offering_id", sa.String(255), nullable=False, index=True),
    sa.Column("usd_per_hour", ExactDecimal, nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("observed_at", UtcDateTime, nullable=False),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("token_hash", sa.String(128), nullable=False, unique=True),
    sa.Column("teams", sa.JSON, nullable=False),
    sa.Column("admin", sa.Boolean, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("revoked_at", UtcDateTime),
)

web_sessions = sa.Table(
    "web_sessions",
    metadata,
    sa.Column("session_hash", sa.String(128), primary_key=True),
    sa.Column("credential", sa.String(255), nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False, index=True),
)

offering_backoffs = sa.Table(
    "offering_backoffs",
    metadata,
    sa.Column("offering_id", sa.String(255), primary_key=True),
    sa.Column("instances", sa.Integer, nullable=False),
    sa.Column("until", UtcDateTime, nullable=False),
    sa.Column("misses", sa.Integer, nullable=False),
    sa.Column("since", UtcDateTime, nullable=False),
    sa.Column("room_at", UtcDateTime),
)

market_histories = sa.Table(
    "market_histories",
    metadata,
    sa.Column("offering_id", sa.String(255), primary_key=True),
    sa.Column("up", sa.Boolean),
    sa.Column("since", UtcDateTime),
    sa.Column("seen_start", sa.Boolean, nullable=False),
    sa.Column("observations", sa.Integer, nullable=False),
    sa.Column("periods", sa.Text, nullable=False),  # JSON: [[up, hours, complete], ...]
)

price_points = sa.Table(
    "price_points",
    metadata,
    sa.Column("offering_id", sa.String(255), primary_key=True),
    sa.Column("at", UtcDateTime, primary_key=True),
    sa.Column("usd_per_hour", sa.Numeric(18, 8), nullable=False),
    sa.Column("source", sa.String(255), nullable=False),
)

signals = sa.Table(
    "signals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("model", sa.String(128), nullable=False, index=True),
    sa.Column("team", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("severity", sa.String(32), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("job_id", sa.String(128)),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("statistics", sa.Text, nullable=False),  # JSON: [[feature, psi, ks, js], ...]
)

spot_decisions = sa.Table(
    "spot_decisions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(128), nullable=False, index=True),
    sa.Column("attempt_id", sa.Integer),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("offering_id", sa.String(255), nullable=False),
    sa.Column("decided", sa.String(16), nullable=False),
    sa.Column("safety_net", sa.Text, nullable=False),
    sa.Column("situation", sa.Text, nullable=False),  # JSON: the Situation's fields
)

pool_charges = sa.Table(
    "pool_charges",
    metadata,
    sa.Column("offering_id", sa.String(255), primary_key=True),
    sa.Column("team", sa.String(64), primary_key=True),
    sa.Column("start", UtcDateTime, primary_key=True),
    # JSON: ["i-…", …]; in the key — two groups of a pool's instances may start at one time
    sa.Column("instance_ids", sa.Text, primary_key=True),
    sa.Column("end", UtcDateTime, nullable=False),
    sa.Column("usd_per_hour", ExactDecimal, nullable=False),
    sa.Column("amount_usd", ExactDecimal, nullable=False),
    sa.Column("price_source", sa.Text, nullable=False),
)

job_speeds = sa.Table(
    "job_speeds",
    metadata,
    sa.Column("family", sa.String(128), primary_key=True),
    sa.Column("accelerator", sa.String(64), primary_key=True),
    sa.Column("factor", sa.Float, nullable=False),  # learned speed ÷ the catalog's
    sa.Column("runs", sa.Integer, nullable=False),
)

webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), primary_key=True),
    sa.Column("kind", sa.String(32), primary_key=True),
    sa.Column("payload", sa.JSON, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("next_at", UtcDateTime, index=True),
    sa.Column("delivered_at", UtcDateTime),
    sa.Column("last_error", sa.Text),
)

progress_reports = sa.Table(
    "progress_reports",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.id"), nullable=False, index=True),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),
)
