"""What the SQL store is built on: the transient-error retry every store method shares, the
engine set-up (SQLite's pragmas, migrations) and the row → record converters."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from budgeteer.core.spot.decide import Situation
from budgeteer.core.spot.replay import Mode
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.errors import BudgeteerError
from budgeteer.store.base import (
    ApiToken,
    Attempt,
    IdempotencyConflict,
    Submission,
    WebhookDelivery,
)

MIGRATIONS = Path(__file__).parent / "migrations"
log = logging.getLogger("budgeteer.store")


class StoreUnavailable(BudgeteerError):
    """The database could not be reached or was locked for too long (retry later)."""

    transient = True


#: Waits (real seconds) before each retry of a method that met a transient database error.
RETRY_DELAYS_SECONDS = (0.1, 0.3, 1.0, 2.0)
_Method = TypeVar("_Method", bound=Callable[..., Any])
_Class = TypeVar("_Class", bound=type)


def is_transient(exc: BaseException) -> bool:
    """Whether a database error is worth retrying (see the module docstring)."""
    return isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError) or (
        isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated
    )


def _retrying(method: _Method) -> _Method:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
        for delay in (*self.retry_delays, None):
            try:
                return method(self, *args, **kw)
            except sa.exc.DBAPIError as exc:
                if not is_transient(exc):
                    raise
                if delay is None:
                    raise StoreUnavailable(f"{method.__name__}: {exc.orig}") from exc
                log.warning("store %s: %s; retrying in %.1f s", method.__name__, exc.orig, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    return cast(_Method, wrapper)


def retry_transient(cls: _Class) -> _Class:
    """Wrap every public method of the store class (its own and its mixins') in the retry
    of transient errors."""
    for name in dir(cls):
        member = getattr(cls, name)
        if callable(member) and not name.startswith("_") and name not in _NOT_RETRIED:
            setattr(cls, name, _retrying(member))
    return cls


_NOT_RETRIED = frozenset({"close", "leader_lock"})


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def replay_row(row: Any, request_hash: str, key: str) -> Submission:
    if row.request_hash != request_hash:
        raise IdempotencyConflict(f"idempotency key {key!r} was used with a different request")
    return Submission(tuple(row.job_ids), replayed=True)


def attempt_row(row: Any) -> Attempt:
    return Attempt(
        row.id,
        row.job_id,
        row.number,
        row.backend,
        row.offering_id,
        row.market,
        tuple(row.instance_ids),
        row.started_at,
        row.ended_at,
        row.exit_reason,
        row.expected_cost_usd,
        row.instances,
        row.workers,
        AttemptOutcome(row.outcome) if row.outcome else None,
        row.reserve_hours,
    )


def token_row(row: Any) -> ApiToken:
    return ApiToken(
        row.id, row.name, tuple(row.teams), bool(row.admin), row.created_at, row.revoked_at
    )


def webhook_row(row: Any) -> WebhookDelivery:
    return WebhookDelivery(
        row.job_id,
        row.kind,
        dict(row.payload),
        row.attempts,
        row.next_at,
        row.delivered_at,
        row.last_error,
    )


def situation_json(situation: Situation) -> str:
    """A spot decision's situation as JSON (floats kept exactly: ``json`` writes their repr)."""
    return json.dumps(dataclasses.asdict(situation))


def situation_from_json(text: str) -> Situation:
    """Back from :func:`situation_json`."""
    fields = json.loads(text)
    return Situation(**{**fields, "mode": Mode(fields["mode"])})
