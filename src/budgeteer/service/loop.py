"""The scheduler loop: reconcile → snapshot → ``plan_cycle`` → apply (partial; see below).

One ``cycle()``:

1. **reconcile** every live attempt with its backend: bill the interval since the last cycle
   (ledger entry at the price in force, with its source), move the job (provisioning → running;
   succeeded; failed with the exit reason; preempted → queued for a new attempt);
2. **snapshot** the store (jobs, accrued spend from the ledger, running allocations with their
   committed cost) with the catalog and budgets — a job preempted ``max_preemptions`` times is
   planned without spot from then on (the fallback);
3. **plan** with the pure core;
4. **apply**: dependency failures, parking (waiting / held) and launches — the attempt is
   recorded before the backend is asked and ended if the launch fails (capacity: back to the
   queue; a final launch error: the job fails with it).

On the first cycle after a (re)start, attempts an earlier process launched are re-attached
through the backend (``adopt``) and billed from where the ledger stops.

A run that fails for its own reasons is tried again up to the job's ``retries``, with exponential
backoff per job. An offering that refuses a launch for capacity (spot gone, its instances in use)
backs off as a whole: no launch of as many instances or more is sent to it until its backoff
ends — one probe per offering, however many jobs the plan puts there — and jobs placed on it wait
queued while the plan, made again each cycle, may move them elsewhere (clock time, in this
process).

The loop runs every ``interval`` and sooner on events (``wait_for_event``): a submission or a
state change in the store, an attempt that ends or is preempted, a new progress report.

Runtime control: the progress reports of running attempts are sampled at each cycle and the pure
:func:`~budgeteer.core.control.runtime_action` decides: a job whose loss has stalled
(``early_stop``) is checkpointed and stopped early; a spot job that is behind schedule (ETA past
the deadline less a margin) or whose switch rule fires is checkpointed, stopped and relaunched on
on-demand; an elastic job behind schedule off spot is relaunched with more workers. Each action
is an event with its reason, and the reason is the stopped attempt's exit reason in the store —
so the next plans (on-demand only, at least n workers) follow from the store, after a restart too.

An attempt holds the placement's instances and workers; it is billed price × instances.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from budgeteer.backends.base import (
    CapacityUnavailable,
    ComputeBackend,
    Handle,
    LaunchFailed,
    LaunchRequest,
    RunState,
)
from budgeteer.catalog import Catalog
from budgeteer.clock import Clock
from budgeteer.core import Allocation, HoldReason, Placement, Plan, Policy, Snapshot, plan_cycle
from budgeteer.core.admit import hold_budgets
from budgeteer.core.control import (
    EARLY_STOP_PREFIX,
    SCALE_PREFIX,
    SWITCH_PREFIX,
    Running,
    runtime_action,
)
from budgeteer.core.progress import Sample, Trend
from budgeteer.domain.budget import Budget, SpendRecord
from budgeteer.domain.job import LIVE_STATES, Job, JobState
from budgeteer.domain.offering import Market, Offering, Price
from budgeteer.service.spendbook import SpendBook
from budgeteer.spec.budget import BudgetSpec, budget_from_spec
from budgeteer.store.base import Attempt, LedgerEntry, ProgressReport, Store, UnknownJob

S = JobState
#: Why attempts stop when the service shuts down: they checkpoint and resume on the next start.
SHUTDOWN_REASON = "service shutdown: checkpoint and resume on restart"
#: Backoff after a failed run or a full offering: doubling from 30 s, at most 10 min (clock).
RETRY_BASE_SECONDS = 30.0
RETRY_MAX_SECONDS = 600.0


def backoff_seconds(tries: int) -> float:
    """The wait after the ``tries``-th failure in a row: 30 s doubling, at most 10 min — for
    any count (an offering may refuse thousands of times through a spot drought)."""
    return min(RETRY_BASE_SECONDS * 2.0 ** min(max(tries - 1, 0), 32), RETRY_MAX_SECONDS)


_PATH_TO_PROVISIONING = {
    S.SUBMITTED: (S.QUEUED, S.PROVISIONING),
    S.WAITING: (S.QUEUED, S.PROVISIONING),
    S.QUEUED: (S.PROVISIONING,),
    S.HELD: (S.PROVISIONING,),
}


@dataclass
class _Live:
    attempt: Attempt
    handle: Handle
    expected_cost_usd: float
    billed_until: datetime
    billed_usd: Decimal = Decimal(0)


@dataclass
class CycleReport:
    """What one cycle did (for logs and tests)."""

    launched: list[str] = field(default_factory=list)
    finished: list[tuple[str, RunState]] = field(default_factory=list)
    plan: Plan | None = None


class Scheduler:
    """Runs cycles over a store and a backend (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        backend: ComputeBackend,
        catalog: Catalog,
        clock: Clock,
        checkpoint_root: Path,
        budgets: Sequence[Budget] = (),
        policy: Policy | None = None,
        job_env: Callable[[str], Mapping[str, str]] | None = None,
        park_seconds: float = 86400.0,
        price_refresh_seconds: float = 3600.0,
        price_tolerance: float = 0.01,
    ) -> None:
        self.store = store
        self.park_seconds = park_seconds  # 0: plan every held job every cycle
        self.price_refresh_seconds = price_refresh_seconds  # 0: plan at catalog prices
        self.price_tolerance = price_tolerance  # plan again on a price move at least this large
        self.backend = backend
        self.catalog = catalog
        self.clock = clock
        self.checkpoint_root = checkpoint_root
        self.budgets = tuple(budgets)  # fixed budgets; the store's are read every cycle
        self.job_env = job_env  # extra environment per job (the API URL and the job token)
        self._budget_cache: tuple[list[dict[str, Any]], tuple[Budget, ...]] = ([], ())
        self._api_read: dict[str, int] = {}  # last progress report id read from the store
        self._book: SpendBook | None = None  # the ledger, compacted for planning
        self._book_lock = threading.Lock()  # the API's threads take snapshots too
        self._book_entries = 0  # ledger entries folded into the book
        self._teams: dict[str, tuple[str, str | None]] = {}
        self._store_done: dict[str, tuple[int, float]] = {}  # job → (last report id, share done)
        self._planned_memo: dict[str, tuple[tuple[object, ...], Job]] = {}
        self.policy = policy or Policy()
        self._live: dict[int, _Live] = {}
        self._offerings = {o.id: o for o in catalog.offerings}
        self._adopted = False
        self._not_before: dict[str, datetime] = {}  # backoff: no launch before this time
        # a full offering: no launch of ≥ n instances on it before this time (n, time, misses)
        self._full: dict[str, tuple[int, datetime, int]] = {}
        self._back: dict[str, datetime] = {}  # a full offering's room is back at this time
        self._trends: dict[int, Trend] = {}  # progress seen, per live attempt
        self._losses: dict[int, list[float]] = {}
        self._read: dict[int, int] = {}  # bytes of the progress file already read
        self._stopping: set[int] = set()  # attempts asked to stop by runtime control
        self._paths: dict[str, Path] = {}  # progress file per job
        # a held job → planned again no later than this, or as soon as an attempt of a job that
        # shares its blocking budgets (or, held for quota, its team) ends
        self._parked: dict[str, _Parked] = {}
        self._parked_until = _NEVER  # the earliest time a parked job is due to be planned
        self._in_force: tuple[Offering, ...] = catalog.offerings  # spot at the prices in force
        self._priced_at: datetime | None = None

    def cycle(self) -> CycleReport:
        """One reconcile → plan → apply pass."""
        report = CycleReport()
        if not self._adopted:
            self._adopt()
            self._adopted = True
        self._reconcile(report)
        self._store_budgets()  # a budget change wakes every parked job before the snapshot
        now = self.clock.now()
        self._offerings_in_force(now)  # and so does a spot price that fell
        if self._parked and now >= self._parked_until:  # a parked job's time came
            self._parked = {j: p for j, p in self._parked.items() if p.until > now}
            self._parked_until = min((p.until for p in self._parked.values()), default=_NEVER)
        snapshot = self.snapshot(frozenset(self._parked))
        plan = plan_cycle(snapshot, self.policy)
        self._apply(plan, report, {j.id: j for j in snapshot.jobs})
        report.plan = plan
        return report

    def shutdown(self, max_wait_seconds: float) -> int:
        """Graceful stop: every live attempt gets the notice (SIGTERM → checkpoint), the loop
        records how each ended and queues its job to resume on the next start. Waits up to
        ``max_wait_seconds`` (clock time; the backend kills after its grace). Returns how many
        attempts were still live when it gave up (0: all recorded)."""
        for live in self._live.values():
            job = self.store.job(live.attempt.job_id)
            if job.state is S.RUNNING and live.attempt.id not in self._stopping:
                self._stop(live, self.clock.now(), SHUTDOWN_REASON)
            else:
                self.backend.stop(live.handle, SHUTDOWN_REASON)
        waited = 0.0
        step = 0.2 * float(getattr(self.clock, "scale", 1.0))
        while self._live and waited <= max_wait_seconds:
            self._reconcile(CycleReport())
            if self._live:
                self.clock.sleep(step)
                waited += step
        return len(self._live)

    def wait_for_event(self, max_seconds: float) -> bool:
        """Sleep up to ``max_seconds`` (clock time), returning early — True — when something
        happened that a cycle should see: a submission or a state change in the store, an
        attempt that ended or was preempted, a new progress report."""
        token = self.store.change_token()
        progress = self._progress_marks()
        # look about five times a second of real time, whatever the clock's speed
        slice_seconds = 0.2 * float(getattr(self.clock, "scale", 1.0))
        waited = 0.0
        while waited < max_seconds:
            step = min(slice_seconds, max_seconds - waited)
            self.clock.sleep(step)
            waited += step
            if self.store.change_token() != token or self._progress_marks() != progress:
                return True
            if any(self.backend.status(live.handle).state.is_final for live in self._live.values()):
                return True
        return False

    def _progress_path(self, job_id: str) -> Path:
        """The progress file the job's SDK writes in its checkpoint folder."""
        path = self._paths.get(job_id)
        if path is None:
            if len(self._paths) > 10_000:  # a long-lived service: keep the cache bounded
                self._paths.clear()
            path = self._paths[job_id] = self.checkpoint_root / job_id / "progress.jsonl"
        return path

    def _progress_marks(self) -> tuple[float, ...]:
        marks = []
        for live in self._live.values():
            path = self._progress_path(live.attempt.job_id)
            marks.append(path.stat().st_mtime if path.exists() else 0.0)
            api = self.store.progress(
                live.attempt.job_id, self._api_read.get(live.attempt.job_id, 0)
            )
            marks.append(float(api[-1].id if api else 0))
        return tuple(marks)

    # -- 0. after a restart: re-attach to what an earlier process launched -----------------
    def _adopt(self) -> None:
        """Jobs found active with open attempts are re-attached through the backend (billing
        resumes where the ledger stops, so no interval is billed twice or skipped); attempts the
        backend never launched are closed and their jobs queued again."""
        now = self.clock.now()
        active = [j for j in self.store.jobs() if j.state.is_active]
        for job in active:
            open_attempts = [a for a in self.store.attempts(job.id) if a.ended_at is None]
            adopted = False
            for attempt in open_attempts:
                handle = self.backend.adopt(self._request(job, attempt))
                if handle is None:
                    self.store.end_attempt(
                        attempt.id, at=now, exit_reason="lost: never launched before a restart"
                    )
                    continue
                billed = [e for e in self.store.ledger(job.id) if e.attempt_id == attempt.id]
                self._live[attempt.id] = _Live(
                    attempt,
                    handle,
                    float(attempt.expected_cost_usd),
                    max((e.end for e in billed), default=attempt.started_at),
                    sum((e.amount_usd for e in billed), Decimal(0)),
                )
                adopted = True
            if adopted:
                with self._book_lock:  # whose spend its ledger entries are
                    self._teams[job.id] = (job.team, job.project)
            else:
                self._requeue(job, now)

    def _wake_parked(self, job: Job) -> None:
        """An attempt of ``job`` ended: plan again the parked jobs it could make room for —
        those held by a budget that covers it, or held for quota in its team."""
        if not self._parked:
            return
        keys = {f"team:{job.team}"} | {
            f"budget:{b.id}" for b in self.budgets + self._budget_cache[1] if b.covers(job)
        }
        self._parked = {j: p for j, p in self._parked.items() if not p.keys & keys}

    def _requeue(self, job: Job, now: datetime) -> None:
        path = {
            S.RUNNING: (S.PREEMPTED, S.QUEUED),
            S.CHECKPOINTING: (S.QUEUED,),
            S.PROVISIONING: (S.QUEUED,),
            S.PREEMPTED: (S.QUEUED,),
            S.RECOVERING: (S.PROVISIONING, S.QUEUED),
        }[job.state]
        for state in path:
            self.store.transition(job.id, state, at=now, cause="requeued after a restart")

    # -- 1. reconcile -----------------------------------------------------------------------
    def _reconcile(self, report: CycleReport) -> None:
        now = self.clock.now()
        cancel = self.store.cancel_requested()
        for live in self._live.values():
            if live.attempt.job_id in cancel:
                self.backend.stop(live.handle, "cancelled on request")
        for attempt_id, live in list(self._live.items()):
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
                continue
            del self._live[attempt_id]
            self._trends.pop(attempt_id, None)
            self._losses.pop(attempt_id, None)
            self._wake_parked(job)  # its spend and capacity changed
            self.store.end_attempt(
                attempt_id, at=until, exit_reason=f"{status.state.value}: {status.reason}"
            )
            report.finished.append((job.id, status.state))
            self._finish(job, attempt_id, status.state, status.reason, until)

    def _finish(
        self, job: Job, attempt_id: int, state: RunState, reason: str, at: datetime
    ) -> None:
        job = self.store.job(job.id)
        if state is not RunState.SUCCEEDED and job.id in self.store.cancel_requested():
            # a cancel wins over a retry, a resume after preemption or a market switch
            self._stopping.discard(attempt_id)
            self.store.transition(job.id, S.CANCELLED, at=at, cause="cancelled on request")
            return
        if job.state is S.PROVISIONING and state is not RunState.PREEMPTED:
            self.store.transition(job.id, S.RUNNING, at=at, cause="instance ran")
        if state is RunState.SUCCEEDED:
            self.store.transition(job.id, S.SUCCEEDED, at=at, cause=reason)
        elif state is RunState.FAILED:
            failures = sum(
                1
                for a in self.store.attempts(job.id)
                if (a.exit_reason or "").startswith(RunState.FAILED.value)
            )
            if failures <= job.retries:
                delay = backoff_seconds(failures)
                self._not_before[job.id] = at + timedelta(seconds=delay)
                self.store.transition(
                    job.id,
                    S.QUEUED,
                    at=at,
                    cause=(f"{reason}; retry {failures} of {job.retries} in {delay:.0f} s"),
                )
            else:
                self.store.transition(job.id, S.FAILED, at=at, cause=reason)
        elif state is RunState.PREEMPTED:
            self.store.transition(job.id, S.PREEMPTED, at=at, cause=reason)
            self.store.transition(job.id, S.QUEUED, at=at, cause="resume from checkpoint")
        elif reason.startswith((SWITCH_PREFIX, SCALE_PREFIX, SHUTDOWN_REASON)):
            self._stopping.discard(attempt_id)
            self.store.transition(job.id, S.QUEUED, at=at, cause="checkpointed; relaunch")
        elif reason.startswith(EARLY_STOP_PREFIX):
            self._stopping.discard(attempt_id)
            self.store.transition(job.id, S.STOPPED_EARLY, at=at, cause=reason)
        else:  # stopped on request
            self.store.transition(job.id, S.CANCELLED, at=at, cause=reason)

    def _bill(self, live: _Live, until: datetime) -> None:
        """Ledger entries for ``[billed until, until)``, one per stretch at one price."""
        start = live.billed_until
        if until <= start:
            return
        offering = self._offerings[live.attempt.offering_id]
        instances = live.attempt.instances
        for seg_start, seg_end, price, source in self.backend.price_segments(
            offering, start, until
        ):
            seconds = Decimal(str((seg_end - seg_start).total_seconds()))
            amount = price * instances * seconds / Decimal(3600)
            entry = LedgerEntry(
                live.attempt.id,
                live.attempt.job_id,
                seg_start,
                seg_end,
                price,
                amount,
                source,
                instances,
            )
            if self.store.add_ledger_entry(entry):
                live.billed_usd += amount
                self._book_add(entry)
        live.billed_until = until

    def _observe(self, live: _Live, now: datetime) -> None:
        """Read the attempt's new progress reports (from its progress file and from the API);
        sample the step at the scheduler's time."""
        aid = live.attempt.id
        trend = self._trends.get(aid, _NO_TREND)
        for record in self._new_reports(live):
            loss = record.get("loss")
            if isinstance(loss, int | float):
                self._losses.setdefault(aid, []).append(float(loss))
            step, total = record.get("step"), record.get("total_steps")
            if (
                isinstance(step, int)
                and isinstance(total, int)
                and total > 0
                and (trend.last is None or step > trend.last.step)
            ):
                trend = trend.add(Sample(now, step, total))
        self._trends[aid] = trend

    def _new_reports(self, live: _Live) -> list[dict[str, object]]:
        records: list[dict[str, object]] = []
        job_id = live.attempt.job_id
        api = self.store.progress(job_id, self._api_read.get(job_id, 0))
        if api:
            self._api_read[job_id] = api[-1].id
            records += [dict(r.record) for r in api if r.at >= live.attempt.started_at]
        path = self._progress_path(job_id)
        if not path.exists():
            return records
        with open(path, "rb") as fh:
            fh.seek(self._read.get(live.attempt.id, 0))
            chunk = fh.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._read[live.attempt.id] = self._read.get(live.attempt.id, 0) + len(complete)
        for line in complete.decode(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def _control(self, live: _Live, job: Job, now: datetime) -> None:
        """Runtime control (:mod:`budgeteer.core.control`): apply the action it decides."""
        aid = live.attempt.id
        if aid in self._stopping or job.state is not S.RUNNING:
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
            self._stop(live, now, action.reason)

    def _stop(self, live: _Live, now: datetime, cause: str) -> None:
        self._stopping.add(live.attempt.id)
        self.store.transition(live.attempt.job_id, S.CHECKPOINTING, at=now, cause=cause)
        self.backend.stop(live.handle, cause)

    # -- 2. snapshot ------------------------------------------------------------------------
    def snapshot(self, parked: frozenset[str] = frozenset()) -> Snapshot:
        """The frozen world the next plan would see (also read by the API's ``explain``), with
        ``parked`` jobs left out of planning (their attempts are not even read)."""
        stored = self.store.jobs(LIVE_STATES)
        planned = [j for j in stored if j.state.is_pending and j.id not in parked]
        pending = {j.id for j in planned}
        # finished jobs matter only to the jobs that depend on them
        upstream = {d.job for j in planned for d in j.depends_on}
        if upstream:
            upstream -= {j.id for j in stored}
        for job_id in sorted(upstream):
            try:
                stored.append(self.store.job(job_id))
            except UnknownJob:
                continue  # the core fails the dependent job: its upstream is unknown
        history: dict[str, list[Attempt]] = {}
        for a in self.store.attempts_of(pending):  # one query, only the pending jobs' attempts
            history.setdefault(a.job_id, []).append(a)
        jobs = [
            self._as_planned(job, history[job.id]) if job.id in history else job for job in stored
        ]
        if len(self._planned_memo) > 2 * len(history) + 64:  # forget jobs no longer pending
            self._planned_memo = {k: v for k, v in self._planned_memo.items() if k in history}
        now = self.clock.now()
        budgets = self.budgets + self._store_budgets()
        running = tuple(
            Allocation(
                live.attempt.job_id,
                live.attempt.offering_id,
                live.attempt.instances,
                max(0.0, live.expected_cost_usd - float(live.billed_usd)),
            )
            for live in list(self._live.values())
        )
        return Snapshot(
            now=now,
            jobs=tuple(jobs),
            offerings=self._offerings_in_force(now),
            throughput=tuple(self.catalog.throughput.items()),
            egress=self.catalog.egress,
            budgets=budgets,
            spend=self._spend(budgets, now),
            running=running,
            capacity_back=tuple(sorted((o, t) for o, t in self._back.items() if t > now)),
            parked=parked,
        )

    def _offerings_in_force(self, now: datetime) -> tuple[Offering, ...]:
        """The catalog with each spot offering at the price the backend bills now, looked up
        at most every ``price_refresh_seconds`` (a price feed's cadence). A price is taken up when
        it moved by ``price_tolerance`` (1%) or more from the one plans are made at — finer moves
        are far inside a plan's own uncertainty — and the tuple is only replaced then, so the
        core's memos of placements and fronts keep their entries. The ledger always bills the
        exact price."""
        if self.price_refresh_seconds <= 0:
            return self.catalog.offerings
        if (
            self._priced_at is not None
            and (now - self._priced_at).total_seconds() < self.price_refresh_seconds
        ):
            return self._in_force
        self._priced_at = now
        fresh: list[Offering] = []
        changed = cheaper = False
        for current in self._in_force:
            if current.market is Market.SPOT:
                price, source = self.backend.price(current, now)
                if _moved(float(price), current.usd_per_hour, self.price_tolerance):
                    cheaper = cheaper or float(price) < current.usd_per_hour
                    current = dataclasses.replace(  # noqa: PLW2901
                        current, price=Price(float(price), source, now)
                    )
                    changed = True
            fresh.append(current)
        if changed:
            self._in_force = tuple(fresh)
        if cheaper:
            self._wake_on_prices()
        return self._in_force

    def _wake_on_prices(self) -> None:
        """Spot prices fell: plan again the jobs held for budget whose cheapest plan could now
        fit. A plan's cost is its hours times the price plus egress, so no plan of a job costs
        less than its cheapest plan at park time times the largest fall of any price since: a
        job whose room is smaller than that stays parked (prices that rose change nothing)."""
        now_price = {o.id: o.usd_per_hour for o in self._in_force}
        fall: dict[int, float] = {}  # per price list seen at park time: the largest fall
        woken: list[str] = []
        for job_id, p in self._parked.items():
            if p.prices is None:  # a quota hold: prices do not matter
                continue
            ratio = fall.get(id(p.prices))
            if ratio is None:
                ratio = fall[id(p.prices)] = min(
                    (
                        now_price[o.id] / o.usd_per_hour
                        for o in p.prices
                        if o.market is Market.SPOT and o.usd_per_hour > 0
                    ),
                    default=1.0,
                )
            if p.cheapest_usd * ratio <= p.room_usd + _CENT:
                woken.append(job_id)
        for job_id in woken:
            del self._parked[job_id]

    def _spend(self, budgets: Sequence[Budget], now: datetime) -> tuple[SpendRecord, ...]:
        """The ledger compacted by the spend book (:mod:`budgeteer.service.spendbook`): filled
        from the store once, then kept up as entries are billed."""
        with self._book_lock:
            stale = self._book is None or self._book_entries != self.store.ledger_count()
            if stale or self._book is None or not self._book.set_boundaries(budgets, now):
                # first time, spend billed by another process, or a budget whose period began
                # before what the book has merged: fold the whole ledger again
                self._book = SpendBook(self.policy.fair_share_half_life_seconds, now)
                self._book.set_boundaries(budgets, now)
                ledger = self.store.ledger()
                for e in ledger:
                    if e.job_id not in self._teams:  # finished before this process saw it
                        job = self.store.job(e.job_id)
                        self._teams[job.id] = (job.team, job.project)
                    team, project = self._teams[e.job_id]
                    self._book.add(team, project, e.amount_usd, e.end)
                self._book_entries = len(ledger)
            return self._book.records()

    def _book_add(self, entry: LedgerEntry) -> None:
        with self._book_lock:
            if self._book is not None and entry.job_id in self._teams:
                team, project = self._teams[entry.job_id]
                self._book.add(team, project, entry.amount_usd, entry.end)
                self._book_entries += 1
            else:
                self._book = None  # an unknown job: fill again from the ledger next time

    def _store_budgets(self) -> tuple[Budget, ...]:
        """The budgets kept in the store (created through the API), parsed once per change."""
        specs = self.store.budget_specs()
        if specs != self._budget_cache[0]:
            parsed = tuple(budget_from_spec(BudgetSpec.model_validate(s)) for s in specs)
            self._budget_cache = (specs, parsed)
            self._parked.clear()  # limits or thresholds changed: plan every held job again
        return self._budget_cache[1]

    def _as_planned(self, job: Job, attempts: Sequence[Attempt]) -> Job:
        """A pending job as its attempts so far leave it (see :meth:`_with_runtime_history` and
        :meth:`_remaining`), worked out once per (job state, attempts): a pending job changes
        only by a transition or a new attempt, and its progress only while an attempt runs."""
        key = (job.state, len(attempts), job.seq)
        memo = self._planned_memo.get(job.id)
        if memo is not None and memo[0] == key:
            return memo[1]
        planned = self._remaining(self._with_runtime_history(job, attempts))
        self._planned_memo[job.id] = (key, planned)
        return planned

    def _remaining(self, job: Job) -> Job:
        """A pending job that has checkpointed progress is planned for the work it has left
        (from its last progress report), not for all of it."""
        if not job.state.is_pending or job.work.reference_hours is None:
            return job
        done = self._progress_done(job.id)
        if done <= 0:
            return job
        left = max(1.0 - done, 0.01)
        work = dataclasses.replace(job.work, reference_hours=job.work.reference_hours * left)
        incremental = (
            job.incremental_reference_hours * left
            if job.incremental_reference_hours is not None
            else None
        )
        return dataclasses.replace(job, work=work, incremental_reference_hours=incremental)

    def _progress_done(self, job_id: str) -> float:
        """Share of the work done by the last progress report (in the job's checkpoint folder
        or sent through the API)."""
        path = self._progress_path(job_id)
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        last_id, done_before = self._store_done.get(job_id, (0, 0.0))
        fresh = self.store.progress(job_id, last_id)  # only reports not folded in yet
        if fresh:
            self._store_done[job_id] = (fresh[-1].id, max(done_before, _done_of(fresh)))
        records: list[object] = [
            {"step": self._store_done.get(job_id, (0, 0.0))[1], "total_steps": 1}
        ]
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        done = 0.0
        for record in records:
            if not isinstance(record, Mapping):
                continue
            step, total = record.get("step"), record.get("total_steps")
            if isinstance(step, int | float) and isinstance(total, int) and total > 0:
                done = max(done, min(step / total, 1.0))
        return done

    def _with_runtime_history(self, job: Job, attempts: Sequence[Attempt]) -> Job:
        """A pending job is planned as its attempts so far demand: without spot once preempted
        ``max_preemptions`` times or switched to on-demand by runtime control, and with at least
        the workers a scale-up asked for."""
        if not job.state.is_pending or not attempts:
            return job
        no_spot, floor = self._history_effects(job, attempts)  # memoised by _as_planned
        if no_spot:
            job = dataclasses.replace(job, spot=dataclasses.replace(job.spot, allowed=False))
        if floor is not None:
            res = job.resources
            job = dataclasses.replace(job, resources=dataclasses.replace(res, min_workers=floor))
        return job

    def _history_effects(self, job: Job, attempts: Sequence[Attempt]) -> tuple[bool, int | None]:
        """(spot no longer allowed, at least this many workers) from a job's attempts."""
        reasons = [a.exit_reason or "" for a in attempts]
        stopped = [r.removeprefix(f"{RunState.STOPPED.value}: ") for r in reasons]
        preemptions = sum(r.startswith(RunState.PREEMPTED.value) for r in reasons)
        limit = self.policy.spot_rules_for(job).max_preemptions
        no_spot = any(r.startswith(SWITCH_PREFIX) for r in stopped) or (
            limit is not None and preemptions >= limit
        )
        scaled = [
            a.workers * 2
            for a, r in zip(attempts, stopped, strict=True)
            if r.startswith(SCALE_PREFIX)
        ]
        res = job.resources
        floor = min(res.max_workers, max(res.min_workers, *scaled)) if scaled else None
        return no_spot, floor

    # -- 4. apply ---------------------------------------------------------------------------
    def _apply(self, plan: Plan, report: CycleReport, jobs: Mapping[str, Job]) -> None:
        """Carry out ``plan``; ``jobs`` are its snapshot's (their states are the store's now:
        nothing moved them since).

        Jobs held for budget or quota are *parked* (like Kueue's inadmissible workloads): left
        out of planning until something happens that could admit them — an attempt ends of a
        job covered by a budget that blocks them (or, for quota, of their team), the budgets
        change, the hold's own wake time (a period reset) or the job's deadline comes — and at
        least every ``park_seconds``."""
        now = self.clock.now()
        for failure in plan.dependency_failures:
            self.store.transition(
                failure.job_id, S.DEPENDENCY_FAILED, at=now, cause=failure.message
            )
        for expiry in plan.expired:
            self.store.transition(
                expiry.job_id,
                S.CANCELLED,
                at=now,
                cause=f"{expiry.message} (on_deadline_miss: cancel)",
            )
        park = self.park_seconds > 0
        plan_prices = self._in_force  # the prices the plan was made at (see _wake_on_prices)
        for hold in plan.holds:
            job = jobs[hold.job_id]
            state = job.state
            if park and hold.reason in (HoldReason.BUDGET, HoldReason.QUOTA):
                until = now + timedelta(seconds=self.park_seconds)
                for t in (hold.wake_at, job.deadline):
                    if t is not None and now < t < until:
                        until = t
                if hold.reason is HoldReason.BUDGET:
                    d = dict(hold.details)
                    self._parked[job.id] = _Parked(
                        until,
                        frozenset(f"budget:{b}" for b in hold_budgets(hold)),
                        plan_prices,
                        float(d["cheapest_plan_usd"]),
                        float(d["allowance_usd"]) - float(d["projected_usd"]),
                    )
                else:
                    self._parked[job.id] = _Parked(until, frozenset({f"team:{job.team}"}))
                self._parked_until = min(self._parked_until, until)
            target = S.WAITING if hold.reason is HoldReason.DEPENDENCIES else S.HELD
            if state is S.SUBMITTED or (state is S.QUEUED and target is S.HELD):
                self.store.transition(hold.job_id, target, at=now, cause=hold.message)
        for admission in plan.admissions:
            if self._not_before.get(admission.job_id, now) > now:
                continue  # backing off after a failed run
            job = self.store.job(admission.job_id)
            placement = admission.placement
            full = self._full.get(placement.offering_id)
            if full is not None and placement.instances >= full[0] and full[1] > now:
                # the offering refused as many instances a moment ago: don't ask again before
                # its backoff ends (one try per offering, not one per job); the plan is made
                # again next cycle and may go elsewhere as the deadline nears
                if job.state in _PATH_TO_PROVISIONING and job.state is not S.QUEUED:
                    cause = (
                        f"placed on {placement.describe()}, which has no capacity; "
                        f"retry after {full[1]:%Y-%m-%d %H:%M:%S}"
                    )
                    self.store.transition(job.id, S.QUEUED, at=now, cause=cause)
                continue
            for state in _PATH_TO_PROVISIONING.get(job.state, ()):
                cause = f"placed on {placement.describe()}"
                if admission.late:
                    cause += f"; {admission.late}"
                self.store.transition(job.id, state, at=now, cause=cause)
            self._launch(job, placement, now, report)

    def _request(self, job: Job, attempt: Attempt) -> LaunchRequest:
        """What the backend is asked to run (or re-attach to) for this attempt."""
        return LaunchRequest(
            job.id,
            attempt.number,
            self._offerings[attempt.offering_id],
            job.command,
            self.checkpoint_root / job.id,
            instances=attempt.instances,
            workers=attempt.workers,
            env=self.job_env(job.id) if self.job_env else {},
        )

    def _launch(self, job: Job, placement: Placement, now: datetime, report: CycleReport) -> None:
        offering = self._offerings[placement.offering_id]
        expected_usd = placement.expected_cost_usd
        attempt = self.store.start_attempt(
            job.id,
            backend=self.backend.name,
            offering_id=offering.id,
            market=offering.market,
            instance_ids=[],
            at=now,
            expected_cost_usd=Decimal(repr(expected_usd)).quantize(Decimal("0.000001")),
            instances=placement.instances,
            workers=placement.workers,
        )
        try:
            handle = self.backend.launch(self._request(job, attempt))
        except CapacityUnavailable as exc:
            self.store.end_attempt(attempt.id, at=now, exit_reason=f"capacity: {exc}")
            previous = self._full.get(offering.id)
            misses = 1 + (previous[2] if previous is not None else 0)
            delay = backoff_seconds(misses)
            until = now + timedelta(seconds=delay)
            if exc.retry_at is not None and exc.retry_at > now:
                # the backend knows when room comes back (a pool's calendar): wait for it, and
                # let the planner count the wait in every plan's finish on this offering
                until = max(until, exc.retry_at)
                delay = (until - now).total_seconds()
                self._back[offering.id] = exc.retry_at
            self._full[offering.id] = (placement.instances, until, misses)
            self.store.transition(
                job.id, S.QUEUED, at=now, cause=f"{exc}; offering retried in {delay:.0f} s"
            )
            return
        except LaunchFailed as exc:
            self.store.end_attempt(attempt.id, at=now, exit_reason=f"launch failed: {exc}")
            self.store.transition(job.id, S.FAILED, at=now, cause=str(exc))
            return
        self._full.pop(offering.id, None)
        self._back.pop(offering.id, None)
        with self._book_lock:  # whose spend its ledger entries are
            self._teams[job.id] = (job.team, job.project)
        self._live[attempt.id] = _Live(attempt, handle, expected_usd, attempt.started_at)
        report.launched.append(job.id)


def _moved(price: float, planned: float, tolerance: float) -> bool:
    """A price differs enough from the one plans are made at to plan with it instead (a new
    source alone changes nothing)."""
    if planned <= 0:
        return price != planned
    return abs(price - planned) >= tolerance * planned


_NO_TREND = Trend()
_NEVER = datetime.max.replace(tzinfo=UTC)
_CENT = 0.01  # the rounding of the amounts in a hold's details


@dataclass(frozen=True, slots=True)
class _Parked:
    """A held job left out of planning until ``until``, or until an attempt ends that holds
    one of ``keys`` (``budget:ID`` covering it, ``team:NAME`` for quota); a budget hold also
    wakes when spot prices fall far enough from ``prices`` (those of the plan that held it) for
    its ``cheapest_usd`` plan to fit ``room_usd``."""

    until: datetime
    keys: frozenset[str]
    prices: tuple[Offering, ...] | None = None
    cheapest_usd: float = 0.0
    room_usd: float = 0.0


def _done_of(reports: Sequence[ProgressReport]) -> float:
    """The largest share of work done among progress reports (0 when none says)."""
    done = 0.0
    for r in reports:
        step, total = r.record.get("step"), r.record.get("total_steps")
        if isinstance(step, int) and isinstance(total, int) and total > 0:
            done = max(done, min(step / total, 1.0))
    return done
