"""The ``Store`` port: what the service keeps durably, and the records it keeps.

Contract (every implementation passes ``tests/test_store_contract.py``):

- ``submit`` stores a batch of jobs and their ``submitted`` events atomically; with an
  idempotency key, a retry with the same request returns the same job ids (``replayed``) and a
  different request under the same key raises :class:`IdempotencyConflict`; nothing is written.
- ``transition`` appends an event and moves the job's state in one atomic step, only along the
  lifecycle table (:class:`~budgeteer.domain.lifecycle.IllegalTransition` otherwise, nothing
  written); the state is always the fold of the events. ``transitions`` does several such
  moves in one atomic step: all of them, or (one illegal or unknown) none.
- Ledger amounts are exact ``Decimal``; an entry is identified by (attempt, interval start), so
  recording the same interval twice is a no-op, never a double charge.
- Unknown ids raise :class:`UnknownJob`. Errors are final (``transient = False``) unless the
  implementation marks them otherwise (a lost database connection is transient).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from budgeteer.core.speed import Speed
from budgeteer.core.spot.estimate import MarketHistory
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.lifecycle import JobEvent
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.domain.tier import Tier
from budgeteer.errors import BudgeteerError
from budgeteer.store.records import PoolCharge, SignalRecord, SpotDecisionRecord


class NotFound(BudgeteerError):
    """No record with this id."""


class UnknownJob(NotFound):
    """No job (or attempt) with this id."""


class AlreadyExists(BudgeteerError):
    """A record with this id exists already."""


class IdempotencyConflict(BudgeteerError):
    """The idempotency key was used before with a different request."""


@dataclass(frozen=True, slots=True)
class Submission:
    """The ids of a submitted batch, and whether this was a replay of an earlier request."""

    job_ids: tuple[str, ...]
    replayed: bool


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """One ``submit`` call as data (for :meth:`Store.submit_many`): its jobs, time and
    idempotency key with the request's hash."""

    jobs: tuple[Job, ...]
    at: datetime
    idempotency_key: str | None
    request_hash: str


@dataclass(frozen=True, slots=True)
class Move:
    """One job's move in :meth:`Store.transitions`."""

    job_id: str
    to_state: JobState
    cause: str


def check_distinct(moves: Sequence[Move]) -> None:
    """A job moves at most once per :meth:`Store.transitions` call."""
    seen: set[str] = set()
    for move in moves:
        if move.job_id in seen:
            raise ValueError(f"job {move.job_id!r} appears twice in one batch of transitions")
        seen.add(move.job_id)


@dataclass(frozen=True, slots=True)
class PricePoint:
    """A price an offering had from ``at`` on (a live feed's reading: ``budgeteer catalog
    refresh`` or the service's refresher), per instance-hour, exact, with its source."""

    offering_id: str
    at: datetime
    usd_per_hour: Decimal
    source: str


def in_force_since(points: Sequence[PricePoint], since: datetime | None) -> list[PricePoint]:
    """Of one offering's points (by time), those from ``since`` on and the one in force at it."""
    if since is None:
        return list(points)
    before = [p for p in points if p.at <= since]
    return before[-1:] + [p for p in points if p.at > since]


@dataclass(frozen=True, slots=True)
class OfferingBackoff:
    """An offering that refused launches for capacity, as the launcher keeps it (in the store,
    so that a restarted scheduler — or an API replica — knows a drought): no launch of
    ``instances`` instances or more before ``until``; ``misses`` refusals in a row, the first
    at ``since``; plans expect room at ``room_at`` (a pool's opening, a drought's expected
    end), or count no wait (``None``)."""

    offering_id: str
    instances: int
    until: datetime
    misses: int
    since: datetime
    room_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try at running a job on a backend: where, on what market, and how it ended."""

    id: int
    job_id: str
    number: int
    backend: str
    offering_id: str
    market: str
    instance_ids: tuple[str, ...]
    started_at: datetime
    ended_at: datetime | None = None
    exit_reason: str | None = None
    expected_cost_usd: Decimal = Decimal(0)
    instances: int = 1
    workers: int = 1
    outcome: AttemptOutcome | None = None  # how it ended, as a value (None while open)
    #: how long before the job's deadline its plan was to finish, for the jobs waiting on it
    #: (``None``: recorded before the store kept it)
    reserve_hours: float | None = None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """Money spent by one attempt over ``[start, end)`` at a price with its source (exact):
    ``amount_usd`` = ``usd_per_hour`` × ``instances`` × hours."""

    attempt_id: int
    job_id: str
    start: datetime
    end: datetime
    usd_per_hour: Decimal
    amount_usd: Decimal
    price_source: str
    instances: int = 1


@dataclass(frozen=True, slots=True)
class ApiToken:
    """An API token's record (the secret itself is never stored, only its hash): the teams it
    may act for, or ``admin`` for everything."""

    id: str
    name: str
    teams: tuple[str, ...]
    admin: bool
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class WebSession:
    """A dashboard login (server side; the browser holds only a random id, stored here as its
    hash): whose credential it stands for — ``admin:<hash of the admin token>`` or
    ``token:<token id>`` — and until when (wall-clock time)."""

    credential: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """One progress report of a job (``step``, ``total_steps``, ``loss``… as sent)."""

    id: int
    job_id: str
    at: datetime
    record: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a listing returns: of these teams (None: all), states and tier, after the
    cursor ``(seq, id)``, at most ``limit``."""

    teams: frozenset[str] | None = None
    states: frozenset[JobState] | None = None
    tier: Tier | None = None
    after: tuple[int, str] | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One webhook to send (the outbox): at most one per job and ``kind`` (``terminal``,
    ``deadline_risk``); ``next_at`` is when to try (None: delivered or given up)."""

    job_id: str
    kind: str
    payload: Mapping[str, Any]
    attempts: int
    next_at: datetime | None
    delivered_at: datetime | None = None
    last_error: str | None = None


class Store(Protocol):
    """Durable jobs, events, attempts and ledger (see the module docstring for the contract)."""

    def submit(
        self,
        jobs: Sequence[Job],
        *,
        at: datetime,
        idempotency_key: str | None = None,
        request_hash: str = "",
    ) -> Submission:
        """Store ``jobs`` with their ``submitted`` events, atomically and idempotently."""
        ...

    def submit_many(self, requests: Sequence[SubmitRequest]) -> list[Submission | BaseException]:
        """Several independent :meth:`submit` calls, each with its own outcome (its
        submission, or the error ``submit`` would raise), in order; a store may write them in
        one transaction (the API's batches of concurrent requests)."""
        ...

    def job(self, job_id: str) -> Job:
        """The job with its current state; raises :class:`UnknownJob`."""
        ...

    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        """All jobs (in submission order), or those in ``states``."""
        ...

    def transition(self, job_id: str, to_state: JobState, *, at: datetime, cause: str) -> JobEvent:
        """Move the job along the lifecycle, appending the event; atomic."""
        ...

    def transitions(self, moves: Sequence[Move], *, at: datetime) -> list[JobEvent]:
        """Several :meth:`transition` s in one atomic step (one commit, for the loop's holds):
        all or none; a job appears at most once."""
        ...

    def events(self, job_id: str) -> list[JobEvent]:
        """The job's events in order."""
        ...

    def change_token(self) -> int:
        """A number that changes whenever a job is submitted, moves or is asked to cancel (the
        loop polls it cheaply to wake up on events)."""
        ...

    def request_cancel(self, job_id: str, *, at: datetime) -> JobState:
        """Cancel: a pending job is cancelled at once; an active one is marked, and the
        scheduler stops its attempt; a finished one is left as it is. Returns the state."""
        ...

    def cancel_requested(self) -> set[str]:
        """Active jobs whose cancellation was requested."""
        ...

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
        """Record a new attempt (numbered from 1 per job) on ``instances`` instances running
        ``workers`` workers, with the cost its plan expects and the reserve it kept for the jobs
        waiting on it (hours before the job's deadline)."""
        ...

    def record_instances(self, attempt_id: int, instance_ids: Sequence[str]) -> Attempt:
        """Record the instances the backend gave an attempt once it launched (the attempt is
        kept before the launch, with none); recording them again is a no-op."""
        ...

    def end_attempt(
        self, attempt_id: int, *, at: datetime, exit_reason: str, outcome: AttemptOutcome
    ) -> Attempt:
        """Record how an attempt ended (``outcome``, and ``exit_reason`` for people); ending
        it again is a no-op."""
        ...

    def attempts(self, job_id: str | None = None) -> list[Attempt]:
        """The job's attempts in order (all jobs' attempts, by id, when ``job_id`` is None)."""
        ...

    def attempts_of(self, job_ids: Collection[str]) -> list[Attempt]:
        """The attempts of these jobs (one query however many), by id."""
        ...

    def add_ledger_entry(self, entry: LedgerEntry) -> bool:
        """Record spend; ``False`` when this (attempt, start) was already recorded."""
        ...

    def ledger(self, job_id: str | None = None) -> list[LedgerEntry]:
        """Ledger entries (of one job, or all), by start time."""
        ...

    def ledger_count(self) -> int:
        """How many ledger entries there are (cheap: it tells readers the ledger grew)."""
        ...

    def list_jobs(self, where: JobFilter) -> list[Job]:
        """Jobs matching ``where`` in ``(seq, id)`` order (a page, for the API)."""
        ...

    def next_seq(self) -> int:
        """One more than the largest job ``seq`` stored (0 when empty)."""
        ...

    def add_token(self, token: ApiToken, token_hash: str) -> None:
        """Store a token's record under the hash of its secret; :class:`AlreadyExists` when the
        id or the hash is taken."""
        ...

    def token_by_hash(self, token_hash: str) -> ApiToken | None:
        """The token whose secret hashes to ``token_hash`` (revoked ones too), or ``None``."""
        ...

    def tokens(self) -> list[ApiToken]:
        """Every token record, by creation time."""
        ...

    def revoke_token(self, token_id: str, *, at: datetime) -> ApiToken:
        """Revoke a token (again: no-op); :class:`NotFound` for an unknown id."""
        ...

    def put_backoff(self, backoff: OfferingBackoff) -> None:
        """Keep an offering's backoff (replacing the one it had)."""
        ...

    def clear_backoff(self, offering_id: str) -> None:
        """Forget an offering's backoff (it launched again); no-op when it had none."""
        ...

    def backoffs(self) -> list[OfferingBackoff]:
        """Every offering's backoff, by offering id."""
        ...

    def put_market(self, history: MarketHistory) -> None:
        """Keep what was seen of a spot offering's market (replacing what it had)."""
        ...

    def markets(self) -> list[MarketHistory]:
        """Every offering's market history, by offering id."""
        ...

    def add_prices(self, points: Sequence[PricePoint]) -> int:
        """Append live prices (one transaction); a point already kept (same offering and
        time) is skipped. Returns how many were added."""
        ...

    def price_points(
        self, offering_id: str | None = None, since: datetime | None = None
    ) -> list[PricePoint]:
        """Kept prices, by offering then time: of one offering or all, from ``since`` on
        (and the one in force at ``since``)."""
        ...

    def add_signal(self, record: SignalRecord) -> int:
        """Keep a signal and what it caused; returns its id (increasing)."""
        ...

    def signals(self, model: str | None = None, limit: int | None = 100) -> list[SignalRecord]:
        """Kept signals, newest first: of one model or all, at most ``limit`` (``None``: all)."""
        ...

    def add_spot_decision(self, record: SpotDecisionRecord) -> int:
        """Keep a spot decider's move; returns its id (increasing)."""
        ...

    def spot_decisions(
        self, job_id: str | None = None, limit: int | None = 100
    ) -> list[SpotDecisionRecord]:
        """Kept spot decisions, newest first: of one job or all, at most ``limit``."""
        ...

    def add_pool_charge(self, charge: PoolCharge) -> bool:
        """Record a pool's charge to its team; ``False`` when this (offering, team, start,
        instances) was already recorded (the same stretch never bills twice; two groups of a
        pool's instances may start at one time)."""
        ...

    def pool_charges(self, team: str | None = None) -> list[PoolCharge]:
        """Pools' charges (to one team, or all), by start time then offering."""
        ...

    def pool_charge_count(self) -> int:
        """How many pool charges there are (cheap: it tells readers they grew)."""
        ...

    def put_speed(self, speed: Speed) -> None:
        """Keep a job family's learned speed on one accelerator (replacing what it had)."""
        ...

    def speeds(self) -> list[Speed]:
        """Every learned speed, by family then accelerator."""
        ...

    def add_session(self, session_hash: str, session: WebSession) -> None:
        """Keep a dashboard session under the hash of its id, and drop the sessions that had
        expired by ``session.created_at``."""
        ...

    def session(self, session_hash: str) -> WebSession | None:
        """The session whose id hashes to ``session_hash`` (expired ones too), or ``None``."""
        ...

    def end_session(self, session_hash: str) -> None:
        """Forget a session (a logout); no-op when it is not there."""
        ...

    def put_budget(self, spec: Mapping[str, Any], *, create: bool) -> None:
        """Store a budget's validated spec (JSON-ready, with its ``id``): ``create`` raises
        :class:`AlreadyExists` if the id exists; otherwise it replaces it and raises
        :class:`NotFound` if it does not."""
        ...

    def budget_specs(self) -> list[dict[str, Any]]:
        """Every budget's spec, by id."""
        ...

    def add_progress(self, job_id: str, record: Mapping[str, Any], *, at: datetime) -> int:
        """Append a progress report for a job; returns its id (increasing)."""
        ...

    def progress(self, job_id: str, after_id: int = 0) -> list[ProgressReport]:
        """The job's progress reports with ids above ``after_id``, in order."""
        ...

    def enqueue_webhook(
        self, job_id: str, kind: str, payload: Mapping[str, Any], *, at: datetime
    ) -> bool:
        """Queue a webhook to send now; ``False`` if this job's ``kind`` was queued before."""
        ...

    def due_webhooks(self, now: datetime, limit: int = 100) -> list[WebhookDelivery]:
        """Webhooks whose next try is due (oldest first)."""
        ...

    def record_webhook(
        self, job_id: str, kind: str, *, at: datetime, error: str | None, next_at: datetime | None
    ) -> WebhookDelivery:
        """Record a try: delivered when ``error`` is None; else count it and try again at
        ``next_at`` (None: give up)."""
        ...

    def webhooks(self, job_id: str) -> list[WebhookDelivery]:
        """The job's webhooks, queued or sent."""
        ...
