"""The SQL store: SQLite (WAL, the embedded default) or PostgreSQL, through SQLAlchemy 2.

The schema comes from the Alembic migrations in ``migrations/`` (run on open). Every method is
one transaction. On SQLite, writers take the lock up front (``BEGIN IMMEDIATE``) and wait for it
(``busy_timeout``); on PostgreSQL, a transition locks the job's row (``SELECT … FOR UPDATE``).
Transient database errors are handled in one place for every method (the way APScheduler 4's
stores share a retry mixin): a lost connection, a server that is restarting, a lock timeout —
SQLAlchemy's ``OperationalError`` and ``InterfaceError``, or any error that invalidated the
connection — are retried after ``RETRY_DELAYS_SECONDS`` (the first error on a dead connection
makes SQLAlchemy discard the whole pool, so the retry reconnects; no ``pre_ping``, which cost
a round trip per transaction), then reported as :class:`StoreUnavailable` (``transient``): the
scheduler's driver retries the cycle, the API answers 503. Other errors are final and never
retried. Every method is one transaction, so a failed try wrote nothing; the writes a retry
could repeat after a commit whose answer was lost are guarded by the store's own checks (the
ledger's key per attempt and start, idempotency keys, the lifecycle table).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from budgeteer.domain.job import Job, JobState
from budgeteer.domain.lifecycle import IllegalTransition, JobEvent
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.store import schema as t
from budgeteer.store.base import (
    Attempt,
    IdempotencyConflict,
    LedgerEntry,
    Move,
    Submission,
    SubmitRequest,
    UnknownJob,
)
from budgeteer.store.codec import job_from_dict
from budgeteer.store.group_commit import GroupCommit
from budgeteer.store.leader import (
    FileLeaderLock,
    LeaderLock,
    LocalLeaderLock,
    PostgresLeaderLock,
)
from budgeteer.store.sql_charges import PoolChargeTables
from budgeteer.store.sql_moves import move_in
from budgeteer.store.sql_service import ServiceTables
from budgeteer.store.sql_submit import KeysSeen, submit_fresh, submit_in
from budgeteer.store.sql_support import (
    MIGRATIONS,
    RETRY_DELAYS_SECONDS,
    StoreUnavailable,
    _sqlite_setup,
    attempt_row,
    migrate,
    replay_row,
    retry_transient,
)


@retry_transient
class SqlStore(ServiceTables, PoolChargeTables):
    """Implements :class:`~budgeteer.store.base.Store` on SQLite or PostgreSQL."""

    retry_delays: tuple[float, ...] = RETRY_DELAYS_SECONDS

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = sa.create_engine(url, future=True)
        self._writer: threading.Lock | None = None
        self._decoded: dict[str, Job] = {}  # job id → its job as stored (see ``jobs``)
        if self.engine.dialect.name == "sqlite":
            _sqlite_setup(self.engine)
            self._writer = threading.Lock()
        self._submissions: GroupCommit[SubmitRequest, Submission] = GroupCommit(self.submit_many)
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
        """See :class:`~budgeteer.store.base.Store`. Concurrent submissions of this process
        share a transaction (:mod:`budgeteer.store.group_commit`); each keeps its own
        outcome."""
        return self._submissions.submit(
            SubmitRequest(tuple(jobs), at, idempotency_key, request_hash)
        )

    def submit_many(self, requests: Sequence[SubmitRequest]) -> list[Submission | BaseException]:
        """See :class:`~budgeteer.store.base.Store`: one transaction for the batch, written
        optimistically (new keys and ids: the fewest statements), else carefully (read the
        keys and ids first); on a race with another process (a unique key taken meanwhile),
        each alone."""
        try:
            with self._tx() as conn:
                return submit_fresh(conn, requests)
        except KeysSeen:
            pass  # retries among them: written the careful way below
        except sa.exc.IntegrityError:
            pass  # a job id exists: the careful way finds which
        try:
            with self._tx() as conn:
                return submit_in(conn, requests)
        except sa.exc.IntegrityError:
            if len(requests) > 1:
                return [self._submit_alone(r) for r in requests]
            return [self._after_race(requests[0])]

    def _submit_alone(self, request: SubmitRequest) -> Submission | BaseException:
        try:
            with self._tx() as conn:
                outcome = submit_in(conn, [request])[0]
        except sa.exc.IntegrityError:
            return self._after_race(request)
        return outcome

    def _after_race(self, request: SubmitRequest) -> Submission | BaseException:
        """A unique key was taken by a concurrent writer: a retry with the same idempotency
        key replays what won; otherwise a job id exists already."""
        key = request.idempotency_key
        if key is None:
            return IdempotencyConflict("a job id in this batch exists already")
        with self._tx() as conn:
            known = conn.execute(
                sa.select(t.idempotency_keys).where(t.idempotency_keys.c.key == key)
            ).first()
        if known is None:
            return IdempotencyConflict("a job id in this batch exists already")
        try:
            return replay_row(known, request.request_hash, key)
        except IdempotencyConflict as exc:
            return exc

    def job(self, job_id: str) -> Job:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.jobs).where(t.jobs.c.id == job_id)).first()
        if row is None:
            raise UnknownJob(f"no job {job_id!r}")
        return job_from_dict(row.spec, JobState(row.state))

    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        """See :class:`~budgeteer.store.base.Store`. A job's spec never changes once stored,
        so specs decoded before are kept (:attr:`_decoded`): the scheduler reads every live job
        each cycle, and only the new ones' specs are fetched and decoded again."""
        query = sa.select(t.jobs.c.id, t.jobs.c.state).order_by(t.jobs.c.seq, t.jobs.c.id)
        if states is not None:
            query = query.where(t.jobs.c.state.in_([s.value for s in states]))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
            decoded = self._decoded
            missing = [r.id for r in rows if r.id not in decoded]
            for start in range(0, len(missing), 500):
                chunk = missing[start : start + 500]
                for r in conn.execute(
                    sa.select(t.jobs.c.id, t.jobs.c.spec).where(t.jobs.c.id.in_(chunk))
                ):
                    decoded[r.id] = job_from_dict(r.spec, JobState.SUBMITTED)
        out = []
        for r in rows:
            job = decoded[r.id]
            if job.state.value != r.state:
                job = decoded[r.id] = dataclasses.replace(job, state=JobState(r.state))
            out.append(job)
        if len(decoded) > 2 * len(out) + 1024:  # forget jobs no longer asked for
            self._decoded = {j.id: decoded[j.id] for j in out}
        return out

    def transition(self, job_id: str, to_state: JobState, *, at: datetime, cause: str) -> JobEvent:
        """See :class:`~budgeteer.store.base.Store`."""
        return self.transitions([Move(job_id, to_state, cause)], at=at)[0]

    def transitions(self, moves: Sequence[Move], *, at: datetime) -> list[JobEvent]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._tx() as conn:
            return move_in(conn, moves, at)

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
        reserve_hours: float | None = None,
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
                    reserve_hours=reserve_hours,
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
            reserve_hours=reserve_hours,
        )

    def record_instances(self, attempt_id: int, instance_ids: Sequence[str]) -> Attempt:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._tx() as conn:
            row = conn.execute(sa.select(t.attempts).where(t.attempts.c.id == attempt_id)).first()
            if row is None:
                raise UnknownJob(f"no attempt {attempt_id}")
            if row.instance_ids:
                return attempt_row(row)
            conn.execute(
                t.attempts.update()
                .where(t.attempts.c.id == attempt_id)
                .values(instance_ids=list(instance_ids))
            )
            row = conn.execute(sa.select(t.attempts).where(t.attempts.c.id == attempt_id)).first()
        assert row is not None
        return attempt_row(row)

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
        return attempt_row(row)

    def attempts(self, job_id: str | None = None) -> list[Attempt]:
        """See :class:`~budgeteer.store.base.Store`."""
        query = sa.select(t.attempts)
        if job_id is None:
            query = query.order_by(t.attempts.c.id)
        else:
            query = query.where(t.attempts.c.job_id == job_id).order_by(t.attempts.c.number)
        with self.engine.connect() as conn:
            return [attempt_row(r) for r in conn.execute(query)]

    def attempts_of(self, job_ids: Collection[str]) -> list[Attempt]:
        """See :class:`~budgeteer.store.base.Store`."""
        wanted = sorted(set(job_ids))
        if not wanted:
            return []
        out: list[Attempt] = []
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):  # bounded IN lists
                query = sa.select(t.attempts).where(t.attempts.c.job_id.in_(wanted[i : i + 500]))
                out += [attempt_row(r) for r in conn.execute(query)]
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


__all__ = ["MIGRATIONS", "SqlStore", "StoreUnavailable", "migrate"]
