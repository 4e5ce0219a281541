"""Launching an admitted job: record the attempt, ask the backend, and back off where it says
no.

An offering that refuses a launch for capacity (spot gone, its instances in use) backs off as a
whole: no launch of as many instances or more is sent to it until its backoff ends — one probe
per offering, however many jobs the plan puts there — and jobs placed on it wait queued while
the plan, made again each cycle, may move them elsewhere. A backend that knows when room comes
back (an on-prem pool's calendar) says so, and the planner counts that wait in every plan's
finish on the offering. A spot offering refusing launch after launch is in a drought: it
carries an expected wait of half the drought so far (at least its backoff) into every plan,
so jobs that cannot absorb it fail over to another zone, region or on-demand on the next cycle.
A job whose own run failed waits its retry backoff before it is launched again. All times are
the scheduler's clock.

The attempt is recorded before the backend is asked, and ended if the launch fails: capacity →
the job back to the queue; a final refusal, or an error the backend raised unexpectedly → the
job fails with it (another job's launch is not affected).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from budgeteer.backends.base import CapacityUnavailable, ComputeBackend, LaunchFailed, LaunchRequest
from budgeteer.core import Placement
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.offering import Market, Offering
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.scheduler.live import Live, LiveAttempts
from budgeteer.scheduler.markets import MarketBook
from budgeteer.store.base import Attempt, OfferingBackoff, Store

log = logging.getLogger("budgeteer.scheduler")
#: Backoff after a failed run or a full offering: doubling from 30 s, at most 10 min (clock).
RETRY_BASE_SECONDS = 30.0
RETRY_MAX_SECONDS = 600.0


def backoff_seconds(tries: int) -> float:
    """The wait after the ``tries``-th failure in a row: 30 s doubling, at most 10 min — for
    any count (an offering may refuse thousands of times through a spot drought)."""
    return min(RETRY_BASE_SECONDS * 2.0 ** min(max(tries - 1, 0), 32), RETRY_MAX_SECONDS)


class Launcher:
    """Launches attempts and keeps the backoffs (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        backend: ComputeBackend,
        offerings: Mapping[str, Offering],
        checkpoint_root: Path,
        live: LiveAttempts,
        job_env: Callable[[str], Mapping[str, str]] | None = None,
        book: MarketBook | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.offerings = offerings
        self.checkpoint_root = checkpoint_root
        self.live = live
        self.job_env = job_env  # extra environment per job (the API URL and the job token)
        self.book = book  # what launches and refusals say of spot markets
        self.not_before: dict[str, datetime] = {}  # a job's retry backoff
        # offerings backing off, kept in the store: a restart does not forget a drought
        self.full: dict[str, OfferingBackoff] = {b.offering_id: b for b in store.backoffs()}

    def request(self, job: Job, attempt: Attempt) -> LaunchRequest:
        """What the backend is asked to run (or re-attach to) for this attempt: every attempt
        of a job resumes from the same checkpoint folder."""
        return LaunchRequest(
            job.id,
            attempt.number,
            self.offerings[attempt.offering_id],
            job.command,
            self.checkpoint_root / job.id,
            instances=attempt.instances,
            workers=attempt.workers,
            env=self.job_env(job.id) if self.job_env else {},
            tier=job.tier,
            billed_from=attempt.started_at,
            data_uri=job.data.uri if job.data else None,
            team=job.team,
        )

    def retry_after(self, job_id: str, failures: int, at: datetime) -> float:
        """A job's own run failed for the ``failures``-th time: no launch before the backoff
        ends. Returns the backoff in seconds."""
        delay = backoff_seconds(failures)
        self.not_before[job_id] = at + timedelta(seconds=delay)
        return delay

    def backing_off(self, job_id: str, now: datetime) -> bool:
        """Whether the job waits its retry backoff."""
        return self.not_before.get(job_id, now) > now

    def blocked(self, placement: Placement, now: datetime) -> OfferingBackoff | None:
        """The offering's backoff when it stops this placement now."""
        full = self.full.get(placement.offering_id)
        if full is not None and placement.instances >= full.instances and full.until > now:
            return full
        return None

    def capacity_back(self, now: datetime) -> tuple[tuple[str, datetime], ...]:
        """Offerings whose room comes back later, with when (for the snapshot)."""
        return tuple(
            sorted(
                (o, b.room_at)
                for o, b in self.full.items()
                if b.room_at is not None and b.room_at > now
            )
        )

    def launch(
        self, job: Job, placement: Placement, now: datetime, *, reserve_hours: float
    ) -> Live | None:
        """Record an attempt and launch it (planned to finish ``reserve_hours`` before the
        job's deadline, for the jobs waiting on it); the live attempt, or ``None`` when it did
        not start (the job moved back to the queue, or failed)."""
        offering = self.offerings[placement.offering_id]
        attempt = self.store.start_attempt(
            job.id,
            backend=self.backend.name,
            offering_id=offering.id,
            market=offering.market,
            instance_ids=[],
            at=now,
            expected_cost_usd=Decimal(repr(placement.expected_cost_usd)).quantize(
                Decimal("0.000001")
            ),
            instances=placement.instances,
            workers=placement.workers,
            reserve_hours=reserve_hours,
        )
        try:
            handle = self.backend.launch(self.request(job, attempt))
        except CapacityUnavailable as exc:
            self._refused(job, offering, placement, attempt, exc, now)
            return None
        except LaunchFailed as exc:
            reason = f"launch failed: {exc}"
            self._failed(job, attempt, reason, AttemptOutcome.LAUNCH_FAILED, now, str(exc))
            return None
        except Exception as exc:  # one attempt's backend error stops neither the cycle nor others
            log.exception("launching %s failed", job.id, extra={"job_id": job.id})
            reason = f"backend error: {type(exc).__name__}: {exc}"
            self._failed(job, attempt, reason, AttemptOutcome.BACKEND_ERROR, now, reason)
            return None
        if handle.instance_ids:  # which instances this attempt's money is for
            attempt = self.store.record_instances(attempt.id, handle.instance_ids)
        if self.full.pop(offering.id, None) is not None:
            self.store.clear_backoff(offering.id)
        if self.book is not None:
            self.book.observe(offering, True, now)
        live = Live(
            attempt,
            handle,
            placement.expected_cost_usd,
            attempt.started_at,
            expected_end=placement.finish,
        )
        self.live.add(live)
        return live

    def _refused(
        self,
        job: Job,
        offering: Offering,
        placement: Placement,
        attempt: Attempt,
        exc: CapacityUnavailable,
        now: datetime,
    ) -> None:
        self.store.end_attempt(
            attempt.id, at=now, exit_reason=f"capacity: {exc}", outcome=AttemptOutcome.CAPACITY
        )
        if self.book is not None and exc.retry_at is None:
            self.book.observe(offering, False, now)
        previous = self.full.get(offering.id)
        misses = 1 + (previous.misses if previous is not None else 0)
        since = now
        if previous is not None and now - previous.until <= timedelta(
            seconds=backoff_seconds(previous.misses)
        ):
            since = previous.since  # probed again soon after its backoff: the same drought
        delay = backoff_seconds(misses)
        until = now + timedelta(seconds=delay)
        cause = f"{exc}; offering retried in {delay:.0f} s"
        room_at = None
        if exc.retry_at is not None and exc.retry_at > now:
            # the backend knows when room comes back (a pool's calendar): wait for it, and
            # let the planner count the wait in every plan's finish on this offering
            until = max(until, exc.retry_at)
            delay = (until - now).total_seconds()
            room_at = exc.retry_at
        elif offering.market is Market.SPOT:
            # a spot drought: outages are heavy-tailed, so the longer one has lasted the longer
            # it is expected to last — D/2 more after D (a Pareto tail of index 3; D more, index
            # 2, measured too costly in the scenarios: benchmarks/README.md), at least the
            # backoff. Every plan counts that wait in its finish on this offering, so a job that
            # cannot absorb it goes to another zone, region or on-demand at once — not after its
            # slack is gone
            drought = (now - since).total_seconds()
            wait = max(delay, 0.5 * drought)
            room_at = now + timedelta(seconds=wait)
            if misses > 1:  # the numbers behind the plans that now avoid it
                cause += (
                    f"; a spot drought for {drought / 60:.0f} min so far ({misses} refusals): "
                    f"plans count {wait / 60:.0f} min more before it has room"
                )
        backoff = OfferingBackoff(offering.id, placement.instances, until, misses, since, room_at)
        self.store.put_backoff(backoff)
        self.full[offering.id] = backoff
        self.store.transition(job.id, JobState.QUEUED, at=now, cause=cause)

    def _failed(
        self,
        job: Job,
        attempt: Attempt,
        reason: str,
        outcome: AttemptOutcome,
        now: datetime,
        cause: str,
    ) -> None:
        self.store.end_attempt(attempt.id, at=now, exit_reason=reason, outcome=outcome)
        self.store.transition(job.id, JobState.FAILED, at=now, cause=cause)
