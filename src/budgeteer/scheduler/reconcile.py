"""Reconcile: bring the store in line with what the backend says of every live attempt.

Each cycle, for each live attempt: bill the interval since the last cycle (ledger entries at
the price in force, with its source); move the job (provisioning → running; succeeded;
failed with the exit reason, retried up to the job's ``retries`` with backoff; preempted →
queued to resume from its checkpoint); read its new progress reports and apply runtime
control (:func:`~budgeteer.core.control.runtime_action`: stop early, move to on-demand, scale
up — each a checkpoint → stop → relaunch whose outcome the store keeps as a value).

On the first cycle after a (re)start, attempts an earlier process launched are re-attached
(``adopt``) and billed from where the ledger stops; attempts the backend never launched are
closed and their jobs queued again. A job found checkpointing was being stopped by the earlier
process for a reason this one cannot know: its attempt is recorded as a shutdown, and the job
resumes (runtime control decides again from its progress).

A backend call that raises for one attempt is logged with the job's id and the attempt is left
as it was for the next cycle: the other attempts are reconciled all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from budgeteer.backends.base import ComputeBackend, IdleTime, RunState
from budgeteer.clock import Clock
from budgeteer.core import Plan, Policy
from budgeteer.core.control import ActionKind, Running, runtime_action
from budgeteer.core.progress import Sample, Trend
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.offering import Market
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.ledger.billing import IDLE_SOURCE, amount_usd, ledger_entries
from budgeteer.scheduler.launcher import Launcher
from budgeteer.scheduler.live import Live, LiveAttempts
from budgeteer.scheduler.progress import ProgressSource
from budgeteer.scheduler.snapshots import SpendLedger
from budgeteer.scheduler.speeds import SpeedBook
from budgeteer.scheduler.spot_live import LiveSpot
from budgeteer.store.base import LedgerEntry, Store
from budgeteer.store.records import PoolCharge

S = JobState
log = logging.getLogger("budgeteer.scheduler")
#: Why attempts stop when the service shuts down: they checkpoint and resume on the next start.
SHUTDOWN_REASON = "service shutdown: checkpoint and resume on restart"
CANCEL_REASON = "cancelled on request"

_OUTCOME_OF_ACTION = {
    ActionKind.EARLY_STOP: AttemptOutcome.EARLY_STOP,
    ActionKind.TO_ON_DEMAND: AttemptOutcome.TO_ON_DEMAND,
    ActionKind.SCALE_UP: AttemptOutcome.SCALE_UP,
}
_OUTCOME_OF_STATE = {
    RunState.SUCCEEDED: AttemptOutcome.SUCCEEDED,
    RunState.FAILED: AttemptOutcome.FAILED,
    RunState.PREEMPTED: AttemptOutcome.PREEMPTED,
}
_REQUEUE_AFTER_RESTART = {
    S.RUNNING: (S.PREEMPTED, S.QUEUED),
    S.CHECKPOINTING: (S.QUEUED,),
    S.PROVISIONING: (S.QUEUED,),
    S.PREEMPTED: (S.QUEUED,),
    S.RECOVERING: (S.PROVISIONING, S.QUEUED),
}
_NO_TREND = Trend()


@dataclass
class CycleReport:
    """What one cycle did (for logs and tests)."""

    launched: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)  # jobs re-attached after a restart
    finished: list[tuple[str, RunState]] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)  # jobs whose planning raised
    errors: list[tuple[str, str]] = field(default_factory=list)  # (job, backend error)
    plan: Plan | None = None


class Reconciler:
    """Reconciles live attempts (see the module docstring); the loop thread's alone."""

    def __init__(
        self,
        store: Store,
        backend: ComputeBackend,
        clock: Clock,
        policy: Policy,
        live: LiveAttempts,
        launcher: Launcher,
        progress: ProgressSource,
        spend: SpendLedger,
        on_attempt_end: Callable[[Job], None],
        spot: LiveSpot | None = None,
        speeds: SpeedBook | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.clock = clock
        self.policy = policy
        self.live = live
        self.launcher = launcher
        self.progress = progress
        self.spend = spend
        self.on_attempt_end = on_attempt_end  # wakes the parked jobs it could make room for
        self.spot = spot  # the spot decider, live (None: the planner alone picks the market)
        self.stopping: dict[int, AttemptOutcome] = {}  # attempts asked to stop, and why
        self.speeds = speeds  # throughput learned from the jobs (None: the catalog's alone)
        self._trends: dict[int, Trend] = {}  # progress seen, per live attempt
        #: each live attempt's first and last progress, at the reports' own times (speeds)
        self._span: dict[int, tuple[Sample, Sample]] = {}
        self._metrics: dict[int, dict[str, float]] = {}  # each live attempt's last metrics
        self._losses: dict[int, list[float]] = {}

    # -- after a restart ------------------------------------------------------------------
    def adopt(self, report: CycleReport) -> None:
        """Re-attach what an earlier process launched (see the module docstring)."""
        now = self.clock.now()
        for job in [j for j in self.store.jobs() if j.state.is_active]:
            adopted = False
            for attempt in [a for a in self.store.attempts(job.id) if a.ended_at is None]:
                handle = self.backend.adopt(self.launcher.request(job, attempt))
                if handle is None:
                    self.store.end_attempt(
                        attempt.id,
                        at=now,
                        exit_reason="lost: never launched before a restart",
                        outcome=AttemptOutcome.LOST,
                    )
                    continue
                billed = [e for e in self.store.ledger(job.id) if e.attempt_id == attempt.id]
                live = Live(
                    attempt,
                    handle,
                    float(attempt.expected_cost_usd),
                    max((e.end for e in billed), default=attempt.started_at),
                    sum((e.amount_usd for e in billed), Decimal(0)),
                )
                self.live.add(live)
                if job.state is S.CHECKPOINTING:
                    self.stopping[attempt.id] = AttemptOutcome.SHUTDOWN
                adopted = True
            if adopted:
                self.spend.learn(job)
                report.adopted.append(job.id)
            else:
                for state in _REQUEUE_AFTER_RESTART[job.state]:
                    self.store.transition(job.id, state, at=now, cause="requeued after a restart")

    # -- each cycle -----------------------------------------------------------------------
    def reconcile(self, report: CycleReport) -> None:
        """Bill, move and control every live attempt."""
        now = self.clock.now()
        cancel = self.store.cancel_requested()
        for live in self.live:
            try:
                if live.attempt.job_id in cancel and live.attempt.id not in self.stopping:
                    self.stopping[live.attempt.id] = AttemptOutcome.CANCELLED
                    self.backend.stop(live.handle, CANCEL_REASON)
                self._one(live, now, report)
            except Exception as exc:  # one attempt's backend error must not stop the others
                job_id = live.attempt.job_id
                log.exception(
                    "reconciling attempt %d failed", live.attempt.id, extra={"job_id": job_id}
                )
                report.errors.append((job_id, f"{type(exc).__name__}: {exc}"))
        self.live.publish()

    def _one(self, live: Live, now: datetime, report: CycleReport) -> None:
        status = self.backend.status(live.handle)
        until = status.ended_at or now
        self._bill(live, until)
        job = self.store.job(live.attempt.job_id)
        if status.state is RunState.RUNNING and job.state is S.PROVISIONING:
            self.store.transition(job.id, S.RUNNING, at=now, cause="instance running")
        if not status.state.is_final:
            if status.state is RunState.RUNNING:
                self._observe(live, now)
                self._control(live, job, now)
            return
        # the store first, then forget the attempt: if the store fails half-way, the attempt is
        # still live next cycle and its end is recorded then (each step skips what is done)
        aid = live.attempt.id
        outcome = _OUTCOME_OF_STATE.get(status.state) or self.stopping.get(
            aid, AttemptOutcome.CANCELLED
        )
        self.store.end_attempt(
            aid, at=until, exit_reason=f"{status.state.value}: {status.reason}", outcome=outcome
        )
        if job.gate is not None:
            self._observe(live, now)  # the reports written just before it exited
        self._finish(job, outcome, status.reason, until, self._metrics.pop(aid, {}))
        self.live.remove(aid)
        self.stopping.pop(aid, None)
        self._trends.pop(aid, None)
        span = self._span.pop(aid, None)
        offering = self.launcher.offerings.get(live.attempt.offering_id)
        if (
            self.speeds is not None
            and span is not None
            and offering is not None
            and status.state is not RunState.FAILED
        ):
            self.speeds.learn(job, live.attempt, offering, *span)
        self._losses.pop(aid, None)
        self.progress.forget(aid)
        if self.spot is not None:
            self.spot.forget(aid)
            if outcome is AttemptOutcome.PREEMPTED:
                offering = self.launcher.offerings.get(live.attempt.offering_id)
                if offering is not None:
                    self.spot.book.observe(offering, False, until)
        self.on_attempt_end(job)  # its spend and capacity changed
        report.finished.append((job.id, status.state))

    def _finish(
        self,
        job: Job,
        outcome: AttemptOutcome,
        reason: str,
        at: datetime,
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Move the job as the attempt's ``outcome`` says (steps already taken are skipped, so
        a second try after a store error goes on from where the first stopped). A job with a
        validation gate that does not pass — its metric (from ``metrics``, the attempt's last
        reported values) out of bounds, or its exit code non-zero — ends ``gate_failed``."""
        job = self.store.job(job.id)
        if job.state.is_terminal or job.state is S.QUEUED:
            return  # recorded by an earlier try
        if outcome is not AttemptOutcome.SUCCEEDED and job.id in self.store.cancel_requested():
            # a cancel wins over a retry, a resume after preemption or a market switch
            self._move(job, (S.CANCELLED, CANCEL_REASON), at=at)
            return
        ran: tuple[tuple[JobState, str], ...] = ()
        if job.state is S.PROVISIONING and outcome is not AttemptOutcome.PREEMPTED:
            ran = ((S.RUNNING, "instance ran"),)
        failed_gate = _gate_failure(job, outcome, reason, metrics or {})
        if failed_gate is not None:
            self._move(job, *ran, (S.GATE_FAILED, failed_gate), at=at)
        elif outcome is AttemptOutcome.SUCCEEDED:
            if job.gate is not None and job.gate.metric is not None:
                value = (metrics or {})[job.gate.metric]
                reason = f"{reason}; gate passed: {job.gate.metric} = {value:g}".lstrip("; ")
            self._move(job, *ran, (S.SUCCEEDED, reason), at=at)
        elif outcome is AttemptOutcome.FAILED:
            failures = sum(a.outcome is AttemptOutcome.FAILED for a in self.store.attempts(job.id))
            if failures <= job.retries:
                delay = self.launcher.retry_after(job.id, failures, at)
                cause = f"{reason}; retry {failures} of {job.retries} in {delay:.0f} s"
                self._move(job, *ran, (S.QUEUED, cause), at=at)
            else:
                self._move(job, *ran, (S.FAILED, reason), at=at)
        elif outcome is AttemptOutcome.PREEMPTED:
            resume = (S.QUEUED, "resume from checkpoint")
            self._move(job, (S.PREEMPTED, reason), resume, at=at)
        elif outcome.relaunches:
            self._move(job, *ran, (S.QUEUED, "checkpointed; relaunch"), at=at)
        elif outcome is AttemptOutcome.EARLY_STOP:
            self._move(job, *ran, (S.STOPPED_EARLY, reason), at=at)
        else:  # stopped on request
            self._move(job, *ran, (S.CANCELLED, reason), at=at)

    def _move(self, job: Job, *path: tuple[JobState, str], at: datetime) -> None:
        """Transition ``job`` along ``path`` from where it stands (a state already reached
        on the path is not entered again)."""
        states = [state for state, _ in path]
        start = states.index(job.state) + 1 if job.state in states else 0
        for state, cause in path[start:]:
            self.store.transition(job.id, state, at=at, cause=cause)

    def bill_idle(self, stretches: list[IdleTime]) -> None:
        """Ledger entries for pooled instances' idle stretches, each billed to the attempt that
        left the instances warm (at the offering's price; the source says idle)."""
        for idle in stretches:
            if idle.end <= idle.start:
                continue  # taken by the next job the moment it was left
            if idle.job_id is None:
                self._charge_pool(idle)
                continue
            attempt = next(
                (a for a in self.store.attempts(idle.job_id) if a.number == idle.attempt), None
            )
            offering = self.launcher.offerings.get(idle.offering_id)
            if attempt is None or offering is None:
                log.error("idle time on %s of an unknown attempt %s", idle.offering_id, idle)
                continue
            for start, end, price, source in self.backend.price_segments(
                offering, idle.start, idle.end
            ):
                entry = LedgerEntry(
                    attempt.id,
                    attempt.job_id,
                    start,
                    end,
                    price,
                    amount_usd(price, idle.instances, start, end),
                    f"{IDLE_SOURCE}{source}",
                    idle.instances,
                )
                if self.store.add_ledger_entry(entry):
                    self.spend.add(entry)

    def _charge_pool(self, idle: IdleTime) -> None:
        """A pool's charge to its team for instances it booted with no job (its ``min``, a
        ``warm`` window), at the offering's price; the source says idle."""
        offering = self.launcher.offerings.get(idle.offering_id)
        if offering is None or idle.team is None:
            log.error("idle time on %s with no one to bill: %s", idle.offering_id, idle)
            return
        for start, end, price, source in self.backend.price_segments(
            offering, idle.start, idle.end
        ):
            charge = PoolCharge(
                idle.offering_id,
                idle.team,
                start,
                end,
                price,
                amount_usd(price, idle.instances, start, end),
                f"{IDLE_SOURCE}{source}",
                idle.instance_ids,
            )
            if self.store.add_pool_charge(charge):
                self.spend.charge(charge)

    def _bill(self, live: Live, until: datetime) -> None:
        """Ledger entries for ``[billed until, until)``, one per stretch at one price."""
        if until <= live.billed_until:
            return
        offering = self.launcher.offerings[live.attempt.offering_id]
        segments = self.backend.price_segments(offering, live.billed_until, until)
        for entry in ledger_entries(live.attempt, segments):
            if self.store.add_ledger_entry(entry):
                live.billed_usd += entry.amount_usd
                self.spend.add(entry)
        live.billed_until = until

    def _observe(self, live: Live, now: datetime) -> None:
        """Fold the attempt's new progress reports in; a step is sampled at the scheduler's
        time (so a time-scaled clock and the job's own clock cannot disagree)."""
        aid = live.attempt.id
        trend = self._trends.get(aid, _NO_TREND)
        records = self.progress.new_records(live.attempt.job_id, aid, live.attempt.started_at)
        for record in records:
            if record.loss is not None:
                self._losses.setdefault(aid, []).append(record.loss)
            if record.metrics:
                self._metrics.setdefault(aid, {}).update(record.metrics)
            step, total = record.step, record.total_steps
            if (
                step is not None
                and total is not None
                and (trend.last is None or step > trend.last.step)
            ):
                trend = trend.add(Sample(now, step, total))
                reported = Sample(record.at or now, step, total)
                first = self._span.get(aid, (reported, reported))[0]
                self._span[aid] = (first, reported)
        self._trends[aid] = trend

    def _control(self, live: Live, job: Job, now: datetime) -> None:
        """Runtime control (:mod:`budgeteer.core.control`): apply the action it decides."""
        aid = live.attempt.id
        if aid in self.stopping or job.state is not S.RUNNING:
            return
        run = Running(
            job,
            Market(live.attempt.market),
            live.attempt.workers,
            live.attempt.started_at,
            self._trends.get(aid, _NO_TREND),
            self._losses.get(aid, []),
        )
        action = runtime_action(run, now, self.policy)
        if action is not None:
            self.stop(live, now, action.reason, _OUTCOME_OF_ACTION[action.kind])
            return
        if self.spot is not None:
            move = self.spot.move(
                job,
                live.attempt,
                run.trend,
                lambda: self.store.attempts(job.id),
                now,
            )
            if move is not None:
                self.store.add_spot_decision(move.record)
                self.stop(live, now, move.cause, move.outcome)

    def stop(self, live: Live, now: datetime, cause: str, outcome: AttemptOutcome) -> None:
        """Ask a running attempt to checkpoint and stop, for ``outcome``."""
        self.stopping[live.attempt.id] = outcome
        self.store.transition(live.attempt.job_id, S.CHECKPOINTING, at=now, cause=cause)
        self.backend.stop(live.handle, cause)

    def notify_shutdown(self) -> None:
        """Every live attempt gets the notice (SIGTERM → checkpoint); each is recorded as it
        ends, and its job resumes on the next start."""
        for live in self.live:
            job = self.store.job(live.attempt.job_id)
            if job.state is S.RUNNING and live.attempt.id not in self.stopping:
                self.stop(live, self.clock.now(), SHUTDOWN_REASON, AttemptOutcome.SHUTDOWN)
            else:
                self.stopping.setdefault(live.attempt.id, AttemptOutcome.SHUTDOWN)
                self.backend.stop(live.handle, SHUTDOWN_REASON)


def _gate_failure(
    job: Job, outcome: AttemptOutcome, reason: str, metrics: Mapping[str, float]
) -> str | None:
    """Why the job's gate did not pass (``None``: no gate, it passed, or it did not run to an
    end a gate judges: preempted, stopped …)."""
    gate = job.gate
    if gate is None:
        return None
    if gate.metric is None:
        return (
            f"gate failed ({gate.describe()}): {reason}"
            if outcome is AttemptOutcome.FAILED
            else None
        )
    if outcome is not AttemptOutcome.SUCCEEDED:
        return None
    value = metrics.get(gate.metric)
    if value is None:
        return f"gate failed: no {gate.metric} reported (needs {gate.describe()})"
    if not gate.passes(value):
        return f"gate failed: {gate.metric} = {value:g}, needs {gate.describe()}"
    return None
