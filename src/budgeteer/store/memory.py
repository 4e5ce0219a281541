"""The in-memory reference store: the contract in its plainest form (tests, simulations)."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from budgeteer.domain.job import Job, JobState
from budgeteer.domain.lifecycle import IllegalTransition, JobEvent, check_transition
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.store.base import (
    AlreadyExists,
    ApiToken,
    Attempt,
    IdempotencyConflict,
    JobFilter,
    LedgerEntry,
    Move,
    NotFound,
    ProgressReport,
    Submission,
    SubmitRequest,
    UnknownJob,
    WebhookDelivery,
    WebSession,
    check_distinct,
)
from budgeteer.store.memory_records import MemoryRecords


class MemoryStore(MemoryRecords):
    """Implements :class:`~budgeteer.store.base.Store` in process memory, thread-safely (the
    service's records beside jobs: :class:`~budgeteer.store.memory_records.MemoryRecords`)."""

    def __init__(self) -> None:
        super().__init__()
        self._jobs: dict[str, Job] = {}
        self._in_state: dict[JobState, dict[str, None]] = {}  # job ids by state, in order
        self._position: dict[str, int] = {}  # submission order
        self._events: dict[str, list[JobEvent]] = {}
        self._keys: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._attempts: list[Attempt] = []
        self._ledger: dict[tuple[int, datetime], LedgerEntry] = {}
        self._cancel: set[str] = set()
        self._tokens: dict[str, tuple[ApiToken, str]] = {}
        self._sessions: dict[str, WebSession] = {}
        self._budgets: dict[str, dict[str, Any]] = {}
        self._progress: list[ProgressReport] = []
        self._progress_of: dict[str, list[ProgressReport]] = {}  # by job, in id order
        self._attempts_of: dict[str, list[int]] = {}  # attempt ids by job, in order
        self._webhooks: dict[tuple[str, str], WebhookDelivery] = {}

    def submit(
        self,
        jobs: Sequence[Job],
        *,
        at: datetime,
        idempotency_key: str | None = None,
        request_hash: str = "",
    ) -> Submission:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if idempotency_key is not None and idempotency_key in self._keys:
                known_hash, ids = self._keys[idempotency_key]
                if known_hash != request_hash:
                    raise IdempotencyConflict(
                        f"idempotency key {idempotency_key!r} was used with a different request"
                    )
                return Submission(ids, replayed=True)
            new = [j.id for j in jobs]
            clash = [i for n, i in enumerate(new) if i in self._jobs or i in new[:n]]
            if clash:
                raise IdempotencyConflict(f"job id {clash[0]!r} exists already")
            for job in jobs:
                check_transition(job.id, None, JobState.SUBMITTED)
            for job in jobs:
                self._jobs[job.id] = dataclasses.replace(job, state=JobState.SUBMITTED)
                self._position[job.id] = len(self._position)
                self._in_state.setdefault(JobState.SUBMITTED, {})[job.id] = None
                self._events[job.id] = [
                    JobEvent(job.id, 0, at, None, JobState.SUBMITTED, "submitted")
                ]
            ids = tuple(j.id for j in jobs)
            if idempotency_key is not None:
                self._keys[idempotency_key] = (request_hash, ids)
            return Submission(ids, replayed=False)

    def submit_many(self, requests: Sequence[SubmitRequest]) -> list[Submission | BaseException]:
        """See :class:`~budgeteer.store.base.Store`."""
        out: list[Submission | BaseException] = []
        for r in requests:
            try:
                out.append(
                    self.submit(
                        r.jobs,
                        at=r.at,
                        idempotency_key=r.idempotency_key,
                        request_hash=r.request_hash,
                    )
                )
            except (IdempotencyConflict, IllegalTransition) as exc:
                out.append(exc)
        return out

    def job(self, job_id: str) -> Job:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if job_id not in self._jobs:
                raise UnknownJob(f"no job {job_id!r}")
            return self._jobs[job_id]

    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if states is None:
                return list(self._jobs.values())
            ids = [i for s in set(states) for i in self._in_state.get(s, ())]
            ids.sort(key=self._position.__getitem__)
            return [self._jobs[i] for i in ids]

    def transition(self, job_id: str, to_state: JobState, *, at: datetime, cause: str) -> JobEvent:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if job_id not in self._jobs:
                raise UnknownJob(f"no job {job_id!r}")
            job = self._jobs[job_id]
            check_transition(job_id, job.state, to_state)
            event = JobEvent(job_id, len(self._events[job_id]), at, job.state, to_state, cause)
            self._events[job_id].append(event)
            self._jobs[job_id] = dataclasses.replace(job, state=to_state)
            del self._in_state[job.state][job_id]
            self._in_state.setdefault(to_state, {})[job_id] = None
            return event

    def transitions(self, moves: Sequence[Move], *, at: datetime) -> list[JobEvent]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            check_distinct(moves)
            for move in moves:
                if move.job_id not in self._jobs:
                    raise UnknownJob(f"no job {move.job_id!r}")
                check_transition(move.job_id, self._jobs[move.job_id].state, move.to_state)
            return [self.transition(m.job_id, m.to_state, at=at, cause=m.cause) for m in moves]

    def events(self, job_id: str) -> list[JobEvent]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if job_id not in self._events:
                raise UnknownJob(f"no job {job_id!r}")
            return list(self._events[job_id])

    def change_token(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return sum(len(e) for e in self._events.values()) + len(self._cancel)

    def request_cancel(self, job_id: str, *, at: datetime) -> JobState:
        """See :class:`~budgeteer.store.base.Store`."""
        job = self.job(job_id)
        if job.state.is_pending:
            self.transition(job_id, JobState.CANCELLED, at=at, cause="cancel requested")
            return JobState.CANCELLED
        if job.state.is_active:
            with self._lock:
                self._cancel.add(job_id)
        return job.state

    def cancel_requested(self) -> set[str]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return {j for j in self._cancel if self._jobs[j].state.is_active}

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
        with self._lock:
            if job_id not in self._jobs:
                raise UnknownJob(f"no job {job_id!r}")
            number = 1 + len(self._attempts_of.get(job_id, ()))
            attempt = Attempt(
                len(self._attempts) + 1,
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
            self._attempts.append(attempt)
            self._attempts_of.setdefault(job_id, []).append(attempt.id)
            return attempt

    def record_instances(self, attempt_id: int, instance_ids: Sequence[str]) -> Attempt:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if not 1 <= attempt_id <= len(self._attempts):
                raise UnknownJob(f"no attempt {attempt_id}")
            attempt = self._attempts[attempt_id - 1]
            if not attempt.instance_ids:
                attempt = dataclasses.replace(attempt, instance_ids=tuple(instance_ids))
                self._attempts[attempt_id - 1] = attempt
            return attempt

    def end_attempt(
        self, attempt_id: int, *, at: datetime, exit_reason: str, outcome: AttemptOutcome
    ) -> Attempt:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if not 1 <= attempt_id <= len(self._attempts):
                raise UnknownJob(f"no attempt {attempt_id}")
            attempt = self._attempts[attempt_id - 1]
            if attempt.ended_at is None:
                attempt = dataclasses.replace(
                    attempt, ended_at=at, exit_reason=exit_reason, outcome=outcome
                )
                self._attempts[attempt_id - 1] = attempt
            return attempt

    def attempts(self, job_id: str | None = None) -> list[Attempt]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if job_id is None:
                return list(self._attempts)
            return [self._attempts[i - 1] for i in self._attempts_of.get(job_id, ())]

    def attempts_of(self, job_ids: Collection[str]) -> list[Attempt]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            ids = sorted(i for j in set(job_ids) for i in self._attempts_of.get(j, ()))
            return [self._attempts[i - 1] for i in ids]

    def add_ledger_entry(self, entry: LedgerEntry) -> bool:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if not 1 <= entry.attempt_id <= len(self._attempts):
                raise UnknownJob(f"no attempt {entry.attempt_id}")
            key = (entry.attempt_id, entry.start)
            if key in self._ledger:
                return False
            self._ledger[key] = entry
            return True

    def ledger(self, job_id: str | None = None) -> list[LedgerEntry]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            rows = [e for e in self._ledger.values() if job_id is None or e.job_id == job_id]
        return sorted(rows, key=lambda e: (e.start, e.attempt_id))

    def ledger_count(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return len(self._ledger)

    def list_jobs(self, where: JobFilter) -> list[Job]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            rows = sorted(self._jobs.values(), key=lambda j: (j.seq, j.id))
        return [
            j
            for j in rows
            if (where.teams is None or j.team in where.teams)
            and (where.states is None or j.state in where.states)
            and (where.tier is None or j.tier is where.tier)
            and (where.after is None or (j.seq, j.id) > where.after)
        ][: where.limit]

    def next_seq(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return 1 + max((j.seq for j in self._jobs.values()), default=-1)

    def add_token(self, token: ApiToken, token_hash: str) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if token.id in self._tokens or any(h == token_hash for _, h in self._tokens.values()):
                raise AlreadyExists(f"token {token.id!r} exists already")
            self._tokens[token.id] = (token, token_hash)

    def token_by_hash(self, token_hash: str) -> ApiToken | None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return next((t for t, h in self._tokens.values() if h == token_hash), None)

    def tokens(self) -> list[ApiToken]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return sorted((t for t, _ in self._tokens.values()), key=lambda t: t.created_at)

    def revoke_token(self, token_id: str, *, at: datetime) -> ApiToken:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if token_id not in self._tokens:
                raise NotFound(f"no token {token_id!r}")
            token, token_hash = self._tokens[token_id]
            if token.revoked_at is None:
                token = dataclasses.replace(token, revoked_at=at)
                self._tokens[token_id] = (token, token_hash)
            return token

    def add_session(self, session_hash: str, session: WebSession) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            for key in [k for k, s in self._sessions.items() if s.expires_at <= session.created_at]:
                del self._sessions[key]
            self._sessions[session_hash] = session

    def session(self, session_hash: str) -> WebSession | None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return self._sessions.get(session_hash)

    def end_session(self, session_hash: str) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            self._sessions.pop(session_hash, None)

    def put_budget(self, spec: Mapping[str, Any], *, create: bool) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        budget_id = str(spec["id"])
        with self._lock:
            if create and budget_id in self._budgets:
                raise AlreadyExists(f"budget {budget_id!r} exists already")
            if not create and budget_id not in self._budgets:
                raise NotFound(f"no budget {budget_id!r}")
            self._budgets[budget_id] = dict(spec)

    def budget_specs(self) -> list[dict[str, Any]]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return [dict(self._budgets[k]) for k in sorted(self._budgets)]

    def add_progress(self, job_id: str, record: Mapping[str, Any], *, at: datetime) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if job_id not in self._jobs:
                raise UnknownJob(f"no job {job_id!r}")
            report = ProgressReport(len(self._progress) + 1, job_id, at, dict(record))
            self._progress.append(report)
            self._progress_of.setdefault(job_id, []).append(report)
            return report.id

    def progress(self, job_id: str, after_id: int = 0) -> list[ProgressReport]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            mine = self._progress_of.get(job_id, [])
            return mine[bisect.bisect_right(mine, after_id, key=lambda r: r.id) :]

    def enqueue_webhook(
        self, job_id: str, kind: str, payload: Mapping[str, Any], *, at: datetime
    ) -> bool:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if job_id not in self._jobs:
                raise UnknownJob(f"no job {job_id!r}")
            if (job_id, kind) in self._webhooks:
                return False
            self._webhooks[(job_id, kind)] = WebhookDelivery(job_id, kind, dict(payload), 0, at)
            return True

    def due_webhooks(self, now: datetime, limit: int = 100) -> list[WebhookDelivery]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            due = [w for w in self._webhooks.values() if w.next_at is not None and w.next_at <= now]
        return sorted(due, key=lambda w: (w.next_at or now, w.job_id, w.kind))[:limit]

    def record_webhook(
        self, job_id: str, kind: str, *, at: datetime, error: str | None, next_at: datetime | None
    ) -> WebhookDelivery:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            if (job_id, kind) not in self._webhooks:
                raise NotFound(f"no webhook {kind!r} for job {job_id!r}")
            w = self._webhooks[(job_id, kind)]
            if error is None:
                w = dataclasses.replace(
                    w, attempts=w.attempts + 1, next_at=None, delivered_at=at, last_error=None
                )
            else:
                w = dataclasses.replace(
                    w, attempts=w.attempts + 1, next_at=next_at, last_error=error
                )
            self._webhooks[(job_id, kind)] = w
            return w

    def webhooks(self, job_id: str) -> list[WebhookDelivery]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return [w for (j, _), w in sorted(self._webhooks.items()) if j == job_id]
