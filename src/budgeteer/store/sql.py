"""The SQL store: SQLite (WAL, the embedded default) or PostgreSQL, through SQLAlchemy 2.

The schema comes from the Alembic migrations in ``migrations/`` (run on open). Every method is
one transaction. On SQLite, writers take the lock up front (``BEGIN IMMEDIATE``) and wait for it
(``busy_timeout``); on PostgreSQL, a transition locks the job's row (``SELECT … FOR UPDATE``).
Transient database errors are handled in one place for every method (the way APScheduler 4's
stores share a retry mixin): a lost connection, a server that is restarting, a lock timeout —
SQLAlchemy's ``OperationalError`` and ``InterfaceError``, or any error that invalidated the
connection — are retried after ``RETRY_DELAYS_SECONDS`` (the pool reconnects, ``pre_ping``
discards dead connections), then reported as :class:`StoreUnavailable` (``transient``): the
scheduler's driver retries the cycle, the API answers 503. Other errors are final and never
retried. Every method is one transaction, so a failed try wrote nothing; the writes a retry
could repeat after a commit whose answer was lost are guarded by the store's own checks (the
ledger's key per attempt and start, idempotency keys, the lifecycle table).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from budgeteer.domain.job import Job, JobState
from budgeteer.domain.lifecycle import IllegalTransition, JobEvent, check_transition
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.errors import BudgeteerError
from budgeteer.store import schema as t
from budgeteer.store.base import (
    AlreadyExists,
    ApiToken,
    Attempt,
    IdempotencyConflict,
    JobFilter,
    LedgerEntry,
    NotFound,
    ProgressReport,
    Submission,
    UnknownJob,
    WebhookDelivery,
)
from budgeteer.store.codec import job_from_dict, job_to_dict
from budgeteer.store.leader import (
    FileLeaderLock,
    LeaderLock,
    LocalLeaderLock,
    PostgresLeaderLock,
)

MIGRATIONS = Path(__file__).parent / "migrations"
log = logging.getLogger("budgeteer.store")


class StoreUnavailable(BudgeteerError):
    """The database could not be reached or was locked for too long (retry later)."""

    transient = True


#: Waits (real seconds) before each retry of a method that met a transient database error.
RETRY_DELAYS_SECONDS = (0.1, 0.3, 1.0, 2.0)
_Method = TypeVar("_Method", bound=Callable[..., Any])


def is_transient(exc: BaseException) -> bool:
    """Whether a database error is worth retrying (see the module docstring)."""
    return isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError) or (
        isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated
    )


def _retrying(method: _Method) -> _Method:
    @functools.wraps(method)
    def wrapper(self: SqlStore, *args: Any, **kw: Any) -> Any:
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


def _retry_transient(cls: type[SqlStore]) -> type[SqlStore]:
    """Wrap every public method of the store in :func:`_retrying`."""
    for name, member in list(vars(cls).items()):
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


@_retry_transient
class SqlStore:
    """Implements :class:`~budgeteer.store.base.Store` on SQLite or PostgreSQL."""

    retry_delays: tuple[float, ...] = RETRY_DELAYS_SECONDS

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = sa.create_engine(url, future=True, pool_pre_ping=True)
        self._writer: threading.Lock | None = None
        if self.engine.dialect.name == "sqlite":
            _sqlite_setup(self.engine)
            self._writer = threading.Lock()
        try:
            migrate(self.engine)
        except sa.exc.OperationalError as exc:
            raise StoreUnavailable(f"cannot open store {self.engine.url!r}: {exc.orig}") from exc

    def close(self) -> None:
        """Release the connections."""
        self.engine.dispose()

    def leader_lock(self) -> LeaderLock:
        """Leadership for schedulers sharing this store (see :mod:`budgeteer.store.leader`)."""
        if self.engine.dialect.name == "postgresql":
            return PostgresLeaderLock(self.engine)
        database = self.engine.url.database
        if not database or database == ":memory:":
            return LocalLeaderLock()
        return FileLeaderLock(Path(f"{database}.leader"))

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One write transaction. On SQLite the writers of this process queue on a lock
        first: SQLite admits one writer, and its busy handler waits by sleeping in growing
        steps, which turns contention between threads into 100 ms stalls; other processes
        still meet ``busy_timeout``."""
        if self._writer is None:
            with self.engine.begin() as conn:
                yield conn
            return
        with self._writer, self.engine.begin() as conn:
            yield conn

    # -- jobs -------------------------------------------------------------------------------
    def submit(
        self,
        jobs: Sequence[Job],
        *,
        at: datetime,
        idempotency_key: str | None = None,
        request_hash: str = "",
    ) -> Submission:
        """See :class:`~budgeteer.store.base.Store`."""
        try:
            with self._tx() as conn:
                if idempotency_key is not None:
                    known = conn.execute(
                        sa.select(t.idempotency_keys).where(
                            t.idempotency_keys.c.key == idempotency_key
                        )
                    ).first()
                    if known is not None:
                        return _replay(known, request_hash, idempotency_key)
                ids = [j.id for j in jobs]
                match = t.jobs.c.id == ids[0] if len(ids) == 1 else t.jobs.c.id.in_(ids)
                clash = conn.execute(sa.select(t.jobs.c.id).where(match)).first() if ids else None
                if clash is not None:
                    raise IdempotencyConflict(f"job id {clash.id!r} exists already")
                for job in jobs:
                    check_transition(job.id, None, JobState.SUBMITTED)
                if jobs:
                    conn.execute(
                        t.jobs.insert(),
                        [
                            {
                                "id": j.id,
                                "seq": j.seq,
                                "team": j.team,
                                "tier": j.tier.name,
                                "state": "submitted",
                                "spec": job_to_dict(j),
                                "submitted_at": j.submitted_at,
                            }
                            for j in jobs
                        ],
                    )
                    conn.execute(
                        t.job_events.insert(),
                        [
                            {
                                "job_id": j.id,
                                "seq": 0,
                                "at": at,
                                "from_state": None,
                                "to_state": "submitted",
                                "cause": "submitted",
                            }
                            for j in jobs
                        ],
                    )
                if idempotency_key is not None:
                    conn.execute(
                        t.idempotency_keys.insert().values(
                            key=idempotency_key, request_hash=request_hash, job_ids=ids
                        )
                    )
                return Submission(tuple(ids), replayed=False)
        except sa.exc.IntegrityError:
            if idempotency_key is None:
                raise IdempotencyConflict("a job id in this batch exists already") from None
            with self._tx() as conn:  # a concurrent retry with the same key won the race
                known = conn.execute(
                    sa.select(t.idempotency_keys).where(t.idempotency_keys.c.key == idempotency_key)
                ).first()
            if known is None:
                raise IdempotencyConflict("a job id in this batch exists already") from None
            return _replay(known, request_hash, idempotency_key)

    def job(self, job_id: str) -> Job:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.jobs).where(t.jobs.c.id == job_id)).first()
        if row is None:
            raise UnknownJob(f"no job {job_id!r}")
        return job_from_dict(row.spec, JobState(row.state))

    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        """See :class:`~budgeteer.store.base.Store`."""
        query = sa.select(t.jobs).order_by(t.jobs.c.seq, t.jobs.c.id)
        if states is not None:
            query = query.where(t.jobs.c.state.in_([s.value for s in states]))
        with self.engine.connect() as conn:
            return [job_from_dict(r.spec, JobState(r.state)) for r in conn.execute(query)]

    def transition(self, job_id: str, to_state: JobState, *, at: datetime, cause: str) -> JobEvent:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._tx() as conn:
            query = sa.select(t.jobs.c.state).where(t.jobs.c.id == job_id)
            if self.engine.dialect.name == "postgresql":
                query = query.with_for_update()
            row = conn.execute(query).first()
            if row is None:
                raise UnknownJob(f"no job {job_id!r}")
            current = JobState(row.state)
            check_transition(job_id, current, to_state)
            seq = conn.execute(
                sa.select(sa.func.count())
                .select_from(t.job_events)
                .where(t.job_events.c.job_id == job_id)
            ).scalar_one()
            conn.execute(
                t.job_events.insert().values(
                    job_id=job_id,
                    seq=seq,
                    at=at,
                    from_state=current.value,
                    to_state=to_state.value,
                    cause=cause,
                )
            )
            conn.execute(t.jobs.update().where(t.jobs.c.id == job_id).values(state=to_state.value))
            return JobEvent(job_id, seq, at, current, to_state, cause)

    def events(self, job_id: str) -> list[JobEvent]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            if conn.execute(sa.select(t.jobs.c.id).where(t.jobs.c.id == job_id)).first() is None:
                raise UnknownJob(f"no job {job_id!r}")
            rows = conn.execute(
                sa.select(t.job_events)
                .where(t.job_events.c.job_id == job_id)
                .order_by(t.job_events.c.seq)
            )
            return [
                JobEvent(
                    r.job_id,
                    r.seq,
                    r.at,
                    JobState(r.from_state) if r.from_state else None,
                    JobState(r.to_state),
                    r.cause,
                )
                for r in rows
            ]

    def change_token(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            events = conn.execute(sa.select(sa.func.count()).select_from(t.job_events)).scalar_one()
            cancels = conn.execute(
                sa.select(sa.func.count())
                .select_from(t.jobs)
                .where(t.jobs.c.cancel_requested_at.is_not(None))
            ).scalar_one()
        return int(events) + int(cancels)

    def request_cancel(self, job_id: str, *, at: datetime) -> JobState:
        """See :class:`~budgeteer.store.base.Store`."""
        job = self.job(job_id)
        if job.state.is_pending:
            try:
                self.transition(job_id, JobState.CANCELLED, at=at, cause="cancel requested")
                return JobState.CANCELLED
            except IllegalTransition:  # it was launched meanwhile: cancel the running one
                job = self.job(job_id)
        if job.state.is_active:
            with self._tx() as conn:
                conn.execute(
                    t.jobs.update()
                    .where((t.jobs.c.id == job_id) & t.jobs.c.cancel_requested_at.is_(None))
                    .values(cancel_requested_at=at)
                )
        return job.state

    def cancel_requested(self) -> set[str]:
        """See :class:`~budgeteer.store.base.Store`."""
        active = [s.value for s in JobState if s.is_active]
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t.jobs.c.id).where(
                    t.jobs.c.cancel_requested_at.is_not(None) & t.jobs.c.state.in_(active)
                )
            )
            return {r.id for r in rows}

    # -- attempts and ledger ----------------------------------------------------------------
    def start_attempt(
        self,
        job_id: str,
        *,
        backend: str,
        offering_id: str,
        market: str,
        instance_ids: Sequence[str],
        at: datetime,
        expected_cost_usd: Decimal = Decimal(0),
        instances: int = 1,
        workers: int = 1,
    ) -> Attempt:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._tx() as conn:
            if conn.execute(sa.select(t.jobs.c.id).where(t.jobs.c.id == job_id)).first() is None:
                raise UnknownJob(f"no job {job_id!r}")
            number = (
                1
                + conn.execute(
                    sa.select(sa.func.count())
                    .select_from(t.attempts)
                    .where(t.attempts.c.job_id == job_id)
                ).scalar_one()
            )
            attempt_id = conn.execute(
                t.attempts.insert()
                .values(
                    job_id=job_id,
                    number=number,
                    backend=backend,
                    offering_id=offering_id,
                    market=market,
                    instance_ids=list(instance_ids),
                    started_at=at,
                    expected_cost_usd=expected_cost_usd,
                    instances=instances,
                    workers=workers,
                )
                .returning(t.attempts.c.id)
            ).scalar_one()
        return Attempt(
            attempt_id,
            job_id,
            number,
            backend,
            offering_id,
            market,
            tuple(instance_ids),
            at,
            expected_cost_usd=expected_cost_usd,
            instances=instances,
            workers=workers,
        )

    def end_attempt(
        self, attempt_id: int, *, at: datetime, exit_reason: str, outcome: AttemptOutcome
    ) -> Attempt:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._tx() as conn:
            conn.execute(
                t.attempts.update()
                .where((t.attempts.c.id == attempt_id) & t.attempts.c.ended_at.is_(None))
                .values(ended_at=at, exit_reason=exit_reason, outcome=outcome.value)
            )
            row = conn.execute(sa.select(t.attempts).where(t.attempts.c.id == attempt_id)).first()
        if row is None:
            raise UnknownJob(f"no attempt {attempt_id}")
        return _attempt(row)

    def attempts(self, job_id: str | None = None) -> list[Attempt]:
        """See :class:`~budgeteer.store.base.Store`."""
        query = sa.select(t.attempts)
        if job_id is None:
            query = query.order_by(t.attempts.c.id)
        else:
            query = query.where(t.attempts.c.job_id == job_id).order_by(t.attempts.c.number)
        with self.engine.connect() as conn:
            return [_attempt(r) for r in conn.execute(query)]

    def attempts_of(self, job_ids: Collection[str]) -> list[Attempt]:
        """See :class:`~budgeteer.store.base.Store`."""
        wanted = sorted(set(job_ids))
        if not wanted:
            return []
        out: list[Attempt] = []
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):  # bounded IN lists
                query = sa.select(t.attempts).where(t.attempts.c.job_id.in_(wanted[i : i + 500]))
                out += [_attempt(r) for r in conn.execute(query)]
        return sorted(out, key=lambda a: a.id)

    def add_ledger_entry(self, entry: LedgerEntry) -> bool:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._tx() as conn:
            if (
                conn.execute(
                    sa.select(t.attempts.c.id).where(t.attempts.c.id == entry.attempt_id)
                ).first()
                is None
            ):
                raise UnknownJob(f"no attempt {entry.attempt_id}")
            exists = conn.execute(
                sa.select(t.ledger_entries.c.attempt_id).where(
                    (t.ledger_entries.c.attempt_id == entry.attempt_id)
                    & (t.ledger_entries.c.start == entry.start)
                )
            ).first()
            if exists is not None:
                return False
            conn.execute(
                t.ledger_entries.insert().values(
                    attempt_id=entry.attempt_id,
                    start=entry.start,
                    job_id=entry.job_id,
                    end=entry.end,
                    usd_per_hour=entry.usd_per_hour,
                    amount_usd=entry.amount_usd,
                    price_source=entry.price_source,
                    instances=entry.instances,
                )
            )
            return True

    def ledger(self, job_id: str | None = None) -> list[LedgerEntry]:
        """See :class:`~budgeteer.store.base.Store`."""
        query = sa.select(t.ledger_entries).order_by(
            t.ledger_entries.c.start, t.ledger_entries.c.attempt_id
        )
        if job_id is not None:
            query = query.where(t.ledger_entries.c.job_id == job_id)
        with self.engine.connect() as conn:
            return [
                LedgerEntry(
                    r.attempt_id,
                    r.job_id,
                    r.start,
                    r.end,
                    r.usd_per_hour,
                    r.amount_usd,
                    r.price_source,
                    r.instances,
                )
                for r in conn.execute(query)
            ]

    def ledger_count(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            count = conn.execute(sa.select(sa.func.count()).select_from(t.ledger_entries))
            return int(count.scalar_one())

    # -- API records ------------------------------------------------------------------------
    def list_jobs(self, where: JobFilter) -> list[Job]:
        """See :class:`~budgeteer.store.base.Store`."""
        j = t.jobs
        query = sa.select(j).order_by(j.c.seq, j.c.id).limit(where.limit)
        if where.teams is not None:
            query = query.where(j.c.team.in_(sorted(where.teams)))
        if where.states is not None:
            query = query.where(j.c.state.in_(sorted(s.value for s in where.states)))
        if where.tier is not None:
            query = query.where(j.c.tier == where.tier.name)
        if where.after is not None:
            seq, last = where.after
            query = query.where((j.c.seq > seq) | ((j.c.seq == seq) & (j.c.id > last)))
        with self.engine.connect() as conn:
            return [job_from_dict(r.spec, JobState(r.state)) for r in conn.execute(query)]

    def next_seq(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            top = conn.execute(sa.select(sa.func.max(t.jobs.c.seq))).scalar_one()
        return 0 if top is None else int(top) + 1

    def add_token(self, token: ApiToken, token_hash: str) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        try:
            with self._tx() as conn:
                conn.execute(
                    t.api_tokens.insert().values(
                        id=token.id,
                        name=token.name,
                        token_hash=token_hash,
                        teams=list(token.teams),
                        admin=token.admin,
                        created_at=token.created_at,
                        revoked_at=token.revoked_at,
                    )
                )
        except sa.exc.IntegrityError:
            raise AlreadyExists(f"token {token.id!r} exists already") from None

    def token_by_hash(self, token_hash: str) -> ApiToken | None:
        """See :class:`~budgeteer.store.base.Store`."""
        query = sa.select(t.api_tokens).where(t.api_tokens.c.token_hash == token_hash)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _token(row)

    def tokens(self) -> list[ApiToken]:
        """See :class:`~budgeteer.store.base.Store`."""
        query = sa.select(t.api_tokens).order_by(t.api_tokens.c.created_at, t.api_tokens.c.id)
        with self.engine.connect() as conn:
            return [_token(r) for r in conn.execute(query)]

    def revoke_token(self, token_id: str, *, at: datetime) -> ApiToken:
        """See :class:`~budgeteer.store.base.Store`."""
        tok = t.api_tokens
        with self._tx() as conn:
            conn.execute(
                tok.update()
                .where((tok.c.id == token_id) & tok.c.revoked_at.is_(None))
                .values(revoked_at=at)
            )
            row = conn.execute(sa.select(tok).where(tok.c.id == token_id)).first()
        if row is None:
            raise NotFound(f"no token {token_id!r}")
        return _token(row)

    def put_budget(self, spec: Mapping[str, Any], *, create: bool) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        budget_id = str(spec["id"])
        b = t.budgets
        with self._tx() as conn:
            exists = conn.execute(sa.select(b.c.id).where(b.c.id == budget_id)).first()
            if create and exists is not None:
                raise AlreadyExists(f"budget {budget_id!r} exists already")
            if not create and exists is None:
                raise NotFound(f"no budget {budget_id!r}")
            if exists is None:
                conn.execute(b.insert().values(id=budget_id, spec=dict(spec)))
            else:
                conn.execute(b.update().where(b.c.id == budget_id).values(spec=dict(spec)))

    def budget_specs(self) -> list[dict[str, Any]]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.budgets.c.spec).order_by(t.budgets.c.id))
            return [dict(r.spec) for r in rows]

    def add_progress(self, job_id: str, record: Mapping[str, Any], *, at: datetime) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._tx() as conn:
            if conn.execute(sa.select(t.jobs.c.id).where(t.jobs.c.id == job_id)).first() is None:
                raise UnknownJob(f"no job {job_id!r}")
            return int(
                conn.execute(
                    t.progress_reports.insert()
                    .values(job_id=job_id, at=at, record=dict(record))
                    .returning(t.progress_reports.c.id)
                ).scalar_one()
            )

    def progress(self, job_id: str, after_id: int = 0) -> list[ProgressReport]:
        """See :class:`~budgeteer.store.base.Store`."""
        p = t.progress_reports
        query = sa.select(p).where((p.c.job_id == job_id) & (p.c.id > after_id)).order_by(p.c.id)
        with self.engine.connect() as conn:
            return [
                ProgressReport(r.id, r.job_id, r.at, dict(r.record)) for r in conn.execute(query)
            ]

    # -- webhook outbox ---------------------------------------------------------------------
    def enqueue_webhook(
        self, job_id: str, kind: str, payload: Mapping[str, Any], *, at: datetime
    ) -> bool:
        """See :class:`~budgeteer.store.base.Store`."""
        w = t.webhook_deliveries
        with self._tx() as conn:
            if conn.execute(sa.select(t.jobs.c.id).where(t.jobs.c.id == job_id)).first() is None:
                raise UnknownJob(f"no job {job_id!r}")
            known = conn.execute(
                sa.select(w.c.kind).where((w.c.job_id == job_id) & (w.c.kind == kind))
            ).first()
            if known is not None:
                return False
            conn.execute(
                w.insert().values(
                    job_id=job_id,
                    kind=kind,
                    payload=dict(payload),
                    attempts=0,
                    created_at=at,
                    next_at=at,
                )
            )
            return True

    def due_webhooks(self, now: datetime, limit: int = 100) -> list[WebhookDelivery]:
        """See :class:`~budgeteer.store.base.Store`."""
        w = t.webhook_deliveries
        query = (
            sa.select(w)
            .where(w.c.next_at.is_not(None) & (w.c.next_at <= now))
            .order_by(w.c.next_at, w.c.job_id, w.c.kind)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [_webhook(r) for r in conn.execute(query)]

    def record_webhook(
        self, job_id: str, kind: str, *, at: datetime, error: str | None, next_at: datetime | None
    ) -> WebhookDelivery:
        """See :class:`~budgeteer.store.base.Store`."""
        w = t.webhook_deliveries
        match = (w.c.job_id == job_id) & (w.c.kind == kind)
        with self._tx() as conn:
            row = conn.execute(sa.select(w).where(match)).first()
            if row is None:
                raise NotFound(f"no webhook {kind!r} for job {job_id!r}")
            values: dict[str, Any] = {"attempts": row.attempts + 1}
            if error is None:
                values |= {"next_at": None, "delivered_at": at, "last_error": None}
            else:
                values |= {"next_at": next_at, "last_error": error[:2000]}
            conn.execute(w.update().where(match).values(**values))
            row = conn.execute(sa.select(w).where(match)).first()
        return _webhook(row)

    def webhooks(self, job_id: str) -> list[WebhookDelivery]:
        """See :class:`~budgeteer.store.base.Store`."""
        w = t.webhook_deliveries
        query = sa.select(w).where(w.c.job_id == job_id).order_by(w.c.kind)
        with self.engine.connect() as conn:
            return [_webhook(r) for r in conn.execute(query)]


def _replay(row: Any, request_hash: str, key: str) -> Submission:
    if row.request_hash != request_hash:
        raise IdempotencyConflict(f"idempotency key {key!r} was used with a different request")
    return Submission(tuple(row.job_ids), replayed=True)


def _attempt(row: Any) -> Attempt:
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
    )


def _token(row: Any) -> ApiToken:
    return ApiToken(
        row.id, row.name, tuple(row.teams), bool(row.admin), row.created_at, row.revoked_at
    )


def _webhook(row: Any) -> WebhookDelivery:
    return WebhookDelivery(
        row.job_id,
        row.kind,
        dict(row.payload),
        row.attempts,
        row.next_at,
        row.delivered_at,
        row.last_error,
    )
