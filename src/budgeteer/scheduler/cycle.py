"""The scheduler's cycle: the shell around the pure core, as short numbered steps.

0. **re-attach** — on the first cycle after a (re)start, what an earlier process launched
   (:mod:`~budgeteer.scheduler.reconcile`);
1. **reconcile** — bill every live attempt, move its job, read its progress, runtime control;
2. **wake** — parked jobs whose wake rule fired (:mod:`~budgeteer.scheduler.parking`): the
   budgets changed, a spot price fell, their time came;
3. **snapshot** — the frozen world, parked jobs left out (:mod:`~budgeteer.scheduler.snapshots`);
4. **plan** — the pure core, with every job whose planning raises quarantined
   (:func:`~budgeteer.core.quarantine.plan_isolated`);
5. **apply** — dependency failures and expiries, holds (parked with their wake rules), and
   launches with their backoffs (:mod:`~budgeteer.scheduler.launcher`);
6. **pools** — a pooled backend gives back the idle instances no launch took and its pools'
   sizing releases; their idle time is billed to the attempts that left them warm.

The loop that calls :meth:`Scheduler.cycle` — leading, retrying, waiting for events — is
:mod:`~budgeteer.scheduler.driver`, shared by ``budgeteer run`` and ``budgeteer serve``; the
simulator calls ``cycle`` from its event kernel. Every time is the injected clock's.

Threads: the loop thread alone calls ``cycle``, ``shutdown`` and ``wait_for_event``; API
threads call only :meth:`Scheduler.snapshot`, which goes to the thread-safe snapshot builder.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType

from budgeteer.backends.base import ComputeBackend, IdleBilling
from budgeteer.catalog import Catalog
from budgeteer.clock import Clock
from budgeteer.core import FrontCache, HoldReason, Plan, Policy, Snapshot
from budgeteer.core.quarantine import plan_isolated, quarantined
from budgeteer.core.reserve import downstream_hours
from budgeteer.domain.budget import Budget
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.offering import Market, Offering
from budgeteer.domain.progress import parse_progress
from budgeteer.scheduler.launcher import Launcher
from budgeteer.scheduler.live import LiveAttempts
from budgeteer.scheduler.markets import MarketBook
from budgeteer.scheduler.parking import ParkingLot
from budgeteer.scheduler.progress import FileProgress, ProgressSource
from budgeteer.scheduler.reconcile import CycleReport, Reconciler
from budgeteer.scheduler.snapshots import SnapshotBuilder
from budgeteer.scheduler.speeds import SpeedBook
from budgeteer.scheduler.spot_live import PREFIX, LiveSpot, measured_changeover_seconds
from budgeteer.store.base import Move, Store

S = JobState
_PATH_TO_PROVISIONING = {
    S.SUBMITTED: (S.QUEUED, S.PROVISIONING),
    S.WAITING: (S.QUEUED, S.PROVISIONING),
    S.QUEUED: (S.PROVISIONING,),
    S.HELD: (S.PROVISIONING,),
}


class Scheduler:
    """Runs cycles over a store and a backend (see the module docstring). Its parts, each in
    its own module: the live attempts, the launcher, the parking lot, the snapshot builder,
    the reconciler and the progress source; the front cache is the core's memo, owned here."""

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
        progress: ProgressSource | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.catalog = catalog
        self.clock = clock
        self.checkpoint_root = checkpoint_root
        self.policy = policy or Policy()
        self.progress = progress or FileProgress(store, checkpoint_root)
        self.live = LiveAttempts()
        self.parking = ParkingLot(park_seconds)
        self.cache = FrontCache()
        offerings = {o.id: o for o in catalog.offerings}
        self.markets = MarketBook(store, offerings, backend)
        self.spot = LiveSpot(
            self.markets, offerings, self.policy, self._price, self._changeover_seconds
        )
        self.launcher = Launcher(
            store, backend, offerings, checkpoint_root, self.live, job_env, self.markets
        )
        self.speeds = SpeedBook(store, catalog.throughput, self.policy)
        self.snapshots = SnapshotBuilder(
            store,
            backend,
            catalog,
            clock,
            self.policy,
            self.progress,
            lambda: self.live.allocations,
            self._capacity_back,
            budgets,
            price_refresh_seconds,
            price_tolerance,
            lambda: self.speeds.snapshot,
        )
        self.reconciler = Reconciler(
            store,
            backend,
            clock,
            self.policy,
            self.live,
            self.launcher,
            self.progress,
            self.snapshots.spend,
            self._attempt_ended,
            self.spot,
            self.speeds,
        )
        #: jobs whose planning raised, with the error (read by API threads: replaced whole)
        self.quarantined: Mapping[str, str] = MappingProxyType({})
        self._adopted = False
        self._bridged: dict[str, str] = {}  # queued jobs the spot decider would not let wait
        self._seen_budgets = 0
        self._seen_falls = 0

    def cycle(self) -> CycleReport:
        """One pass of the numbered steps (see the module docstring)."""
        report = CycleReport()
        # 0. re-attach
        if not self._adopted:
            self.reconciler.adopt(report)
            self._adopted = True
        # 1. reconcile (the spot markets first: what the backend's feed says now)
        self.markets.sweep(self.clock.now())
        self.reconciler.reconcile(report)
        # 2. wake
        self._wake()
        # 3. snapshot
        snapshot = self.snapshots.build(self.parking.ids())
        if self._bridged:  # jobs sent off a dry market that ended without launching
            self._unbridge(
                self._bridged.keys() - {j.id for j in snapshot.jobs if j.state.is_pending}
            )
        # for the next reconcile: the reserve of attempts recorded without their plan's
        self.spot.downstream = (
            downstream_hours(snapshot.jobs) if self.policy.pipeline_reserve else {}
        )
        # 4. plan
        plan = plan_isolated(snapshot, self.policy, self.cache)
        still = {j: e for j, e in self.quarantined.items() if j in snapshot.parked}
        self.quarantined = MappingProxyType(still | quarantined(plan))  # published whole
        # 5. apply
        self._apply(plan, snapshot, report)
        # 6. pools: what no launch took and the pools' sizing releases is given back; the idle
        # time billed to the attempts that left the instances warm
        if self.policy.use_pools and isinstance(self.backend, IdleBilling):
            self.backend.release_idle()
            self.reconciler.bill_idle(self.backend.take_idle())
        report.plan = plan
        return report

    def forget_live(self) -> None:
        """Leadership was lost: forget the attempts this process watched (another leader
        re-attaches to them); if leadership comes back, they are re-attached from the store."""
        self.live = LiveAttempts()
        self.launcher.live = self.live
        self.reconciler.live = self.live
        self.reconciler.stopping.clear()
        self._adopted = False

    def snapshot(self) -> Snapshot:
        """The world the next plan would see, nothing parked (for the API's ``explain``,
        budget status and dashboard; safe from any thread)."""
        return self.snapshots.build()

    def shutdown(self, max_wait_seconds: float) -> int:
        """Graceful stop: every live attempt gets the notice (SIGTERM → checkpoint), the loop
        records how each ended and queues its job to resume on the next start. Waits up to
        ``max_wait_seconds`` (clock time; the backend kills after its grace). Returns how many
        attempts were still live when it gave up (0: all recorded)."""
        self.reconciler.notify_shutdown()
        waited = 0.0
        step = 0.2 * float(getattr(self.clock, "scale", 1.0))
        while self.live and waited <= max_wait_seconds:
            self.reconciler.reconcile(CycleReport())
            if self.live:
                self.clock.sleep(step)
                waited += step
        return len(self.live)

    def wait_for_event(self, max_seconds: float) -> bool:
        """Sleep up to ``max_seconds`` (clock time), returning early — True — when something
        happened that a cycle should see: a submission or a state change in the store, an
        attempt that ended or was preempted, a new progress report."""
        token = self.store.change_token()
        marks = self._progress_marks()
        # look about five times a second of real time, whatever the clock's speed
        slice_seconds = 0.2 * float(getattr(self.clock, "scale", 1.0))
        waited = 0.0
        while waited < max_seconds:
            step = min(slice_seconds, max_seconds - waited)
            self.clock.sleep(step)
            waited += step
            if self.store.change_token() != token or self._progress_marks() != marks:
                return True
            if any(self.backend.status(live.handle).state.is_final for live in self.live):
                return True
        return False

    def _unbridge(self, job_ids: Collection[str]) -> None:
        """Forget that the decider sent these jobs off a dry spot market (launched, or no
        longer pending)."""
        for job_id in job_ids:
            self._bridged.pop(job_id, None)
        self.snapshots.stop_avoiding(job_ids)

    def _capacity_back(self, now: datetime) -> tuple[tuple[str, datetime], ...]:
        """When room comes back at offerings that have none now: the launcher's backoffs (a
        pool's opening, a drought's expected end) and, with the live spot decider, spot
        offerings the market book sees down (the outage's expected rest, by its age) — the later
        of the two where both say."""
        back = dict(self.launcher.capacity_back(now))
        if self.policy.live_spot:
            for offering_id, at in self.markets.room_at(now):
                back[offering_id] = max(at, back.get(offering_id, at))
        return tuple(sorted(back.items()))

    def _changeover_seconds(self, job_id: str) -> float | None:
        """The job's changeover as measured from its attempts and progress reports (the spot
        decider's; read when one of its epochs begins)."""
        parsed = ((r.at, parse_progress(r.record).step) for r in self.store.progress(job_id))
        steps = [(at, float(step)) for at, step in parsed if step is not None]
        return measured_changeover_seconds(self.store.attempts(job_id), steps)

    def _price(self, offering: Offering, at: datetime) -> float:
        """The price per instance-hour the backend bills now (the spot decider's prices)."""
        return float(self.backend.price(offering, at)[0])

    def _progress_marks(self) -> tuple[float, ...]:
        return self.progress.marks((lv.attempt.job_id, lv.attempt.id) for lv in self.live)

    def _attempt_ended(self, job: Job) -> None:
        self.parking.wake_for(job, self.snapshots.known_budgets())

    def _wake(self) -> None:
        """Step 2: the budgets changed (every parked job), a spot price fell (the budget holds
        it could admit), a parked job's time came."""
        self.snapshots.budgets()
        if self.snapshots.budgets_version != self._seen_budgets:
            self._seen_budgets = self.snapshots.budgets_version
            self.parking.wake_all()
        now = self.clock.now()
        in_force = self.snapshots.prices(now)
        if self.snapshots.price_fall_version != self._seen_falls:
            self._seen_falls = self.snapshots.price_fall_version
            self.parking.wake_on_prices(in_force)
        self.parking.wake_due(now)

    def _apply(self, plan: Plan, snapshot: Snapshot, report: CycleReport) -> None:
        """Step 5: carry out ``plan``. The snapshot's job states are the store's now (nothing
        moved them since)."""
        now = self.clock.now()
        jobs = {j.id: j for j in snapshot.jobs}
        # jobs that end or wait move in one transaction (one commit for a whole queue held)
        moves = [
            Move(failure.job_id, S.DEPENDENCY_FAILED, failure.message)
            for failure in plan.dependency_failures
        ]
        moves += [
            Move(expiry.job_id, S.CANCELLED, f"{expiry.message} (on_deadline_miss: cancel)")
            for expiry in plan.expired
        ]
        for hold in plan.holds:
            job = jobs[hold.job_id]
            self.parking.park(hold, job, now, snapshot.offerings)
            if hold.reason is HoldReason.INVALID:
                report.quarantined.append(job.id)
            target = S.WAITING if hold.reason is HoldReason.DEPENDENCIES else S.HELD
            if job.state is S.SUBMITTED or (job.state is S.QUEUED and target is S.HELD):
                moves.append(Move(hold.job_id, target, hold.message))
        self.store.transitions(moves, at=now)
        for admission in plan.admissions:
            if self.launcher.backing_off(admission.job_id, now):
                continue  # after a failed run
            job = self.store.job(admission.job_id)
            placement = admission.placement
            bridge = self.spot.queued(job, placement, now, admission.reserve_hours)
            if bridge is not None:
                # spot is down and the decider would not wait: planned next cycle without that
                # offering and the others in a drought — on a spot market that is up, or not
                # on spot (a failover priced by the plan)
                self.store.add_spot_decision(bridge)
                self.snapshots.avoid_for(job.id, self.spot.book.down() | {bridge.offering_id})
                self._bridged[job.id] = f"{PREFIX}: {bridge.decision.reason}"
                if job.state is not S.QUEUED:
                    self.store.transition(job.id, S.QUEUED, at=now, cause=self._bridged[job.id])
                continue
            full = self.launcher.blocked(placement, now)
            if full is not None:
                # the offering refused as many instances a moment ago: don't ask again before
                # its backoff ends (one try per offering, not one per job); the plan is made
                # again next cycle and may go elsewhere as the deadline nears
                if job.state in _PATH_TO_PROVISIONING and job.state is not S.QUEUED:
                    cause = (
                        f"placed on {placement.describe()}, which has no capacity; "
                        f"retry after {full.until:%Y-%m-%d %H:%M:%S}"
                    )
                    self.store.transition(job.id, S.QUEUED, at=now, cause=cause)
                continue
            for state in _PATH_TO_PROVISIONING.get(job.state, ()):
                cause = f"placed on {placement.describe()}"
                if admission.late:
                    cause += f"; {admission.late}"
                elif admission.reserve_hours > 0 and job.deadline is not None:
                    by = job.deadline - timedelta(hours=admission.reserve_hours)
                    cause += (
                        f"; planned to finish by {by:%Y-%m-%d %H:%M} UTC, "
                        f"{admission.reserve_hours:.1f} h before its deadline for the jobs "
                        "waiting on it"
                    )
                    if admission.reserve_why:  # lengthened
                        cause += f", {admission.reserve_why}"
                elif admission.reserve_why:  # waived
                    cause += f"; {admission.reserve_why}"
                if job.id in self._bridged:
                    cause += f"; {self._bridged[job.id]}"
                    if placement.market is Market.SPOT:
                        left = len(self.snapshots.avoid.get(job.id, ()))
                        cause += f"; so on spot elsewhere ({left} dry spot offering(s) left out)"
                self.store.transition(job.id, state, at=now, cause=cause)
            live = self.launcher.launch(job, placement, now, reserve_hours=admission.reserve_hours)
            if live is not None:
                # launched: no longer queued (a refused launch keeps the queued epoch, and a
                # job the decider would not let wait stays off the dry markets until it launches)
                self.spot.launched(job.id)
                self._unbridge({job.id})
                self.snapshots.spend.learn(job)
                report.launched.append(job.id)
