"""The snapshot: the frozen world a plan is made from, built from the store, the live
attempts, the budgets, the prices in force and the ledger.

This is the one part of the scheduler that API threads call (``explain``, budget status, the
dashboard) while the loop thread cycles. :class:`SnapshotBuilder` therefore keeps all of its
state — the memo of planned jobs, the spend book, the parsed budgets, the prices in force —
behind one lock, and every method that reads or changes it takes the lock; what it returns is
immutable. It never touches the loop's other state: events a build notices (the budgets
changed, a spot price fell) are counted in versions that the loop compares with the ones it
last acted on, so a build made by an API thread cannot swallow them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType

from budgeteer.backends.base import ComputeBackend, WarmPools
from budgeteer.backends.market import CatalogPrices
from budgeteer.catalog import Catalog
from budgeteer.clock import Clock
from budgeteer.core import Allocation, Policy, Snapshot
from budgeteer.core.pools import PoolView, pooled_offerings
from budgeteer.domain.budget import Budget, SpendRecord
from budgeteer.domain.job import LIVE_STATES, Job
from budgeteer.domain.offering import Market, Offering, Price
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.ledger.spendbook import SpendBook
from budgeteer.scheduler.progress import ProgressSource
from budgeteer.spec.budget import BudgetSpec, budget_from_spec
from budgeteer.store.base import Attempt, LedgerEntry, Store, UnknownJob
from budgeteer.store.records import PoolCharge


class SpendLedger:
    """The ledger compacted for planning (:mod:`budgeteer.ledger.spendbook`): filled from the
    store once, then kept up as the loop bills entries; filled again when another process
    billed, or a budget's period began before what the book has merged."""

    def __init__(self, store: Store, half_life_seconds: float) -> None:
        self.store = store
        self.half_life = half_life_seconds
        self.lock = threading.RLock()  # the loop adds entries while API threads build
        self._book: SpendBook | None = None
        self._entries = 0  # ledger entries folded into the book
        self._charges = 0  # pool charges folded into the book
        self._teams: dict[str, tuple[str, str | None]] = {}  # job → (team, project)

    def learn(self, job: Job) -> None:
        """Whose spend ``job``'s entries are (told at launch and re-attach)."""
        with self.lock:
            self._teams[job.id] = (job.team, job.project)

    def add(self, entry: LedgerEntry) -> None:
        """An entry the loop just billed."""
        with self.lock:
            if self._book is not None and entry.job_id in self._teams:
                team, project = self._teams[entry.job_id]
                self._book.add(team, project, entry.amount_usd, entry.end)
                self._entries += 1
            else:
                self._book = None  # an unknown job: fill again from the ledger next time

    def charge(self, charge: PoolCharge) -> None:
        """A pool's charge to its team the loop just billed (no project: the pool's)."""
        with self.lock:
            if self._book is not None:
                self._book.add(charge.team, None, charge.amount_usd, charge.end)
                self._charges += 1

    def records(self, budgets: Sequence[Budget], now: datetime) -> tuple[SpendRecord, ...]:
        """The spend records the snapshot carries."""
        with self.lock:
            stale = (
                self._book is None
                or self._entries != self.store.ledger_count()
                or self._charges != self.store.pool_charge_count()
            )
            if stale or self._book is None or not self._book.set_boundaries(budgets, now):
                self._book = SpendBook(self.half_life, now)
                self._book.set_boundaries(budgets, now)
                ledger = self.store.ledger()
                for e in ledger:
                    if e.job_id not in self._teams:  # finished before this process saw it
                        self.learn(self.store.job(e.job_id))
                    team, project = self._teams[e.job_id]
                    self._book.add(team, project, e.amount_usd, e.end)
                self._entries = len(ledger)
                charges = self.store.pool_charges()
                for c in charges:
                    self._book.add(c.team, None, c.amount_usd, c.end)
                self._charges = len(charges)
            return self._book.records()


class SnapshotBuilder:
    """Builds snapshots (see the module docstring); thread-safe."""

    def __init__(
        self,
        store: Store,
        backend: ComputeBackend,
        catalog: Catalog,
        clock: Clock,
        policy: Policy,
        progress: ProgressSource,
        allocations: Callable[[], tuple[Allocation, ...]],
        capacity_back: Callable[[datetime], tuple[tuple[str, datetime], ...]],
        budgets: Sequence[Budget] = (),
        price_refresh_seconds: float = 3600.0,
        price_tolerance: float = 0.01,
        speeds: Callable[[], tuple[tuple[str, str, float], ...]] = tuple,
    ) -> None:
        self.store = store
        self.speeds = speeds  # the families' learned speeds (scheduler.speeds)
        self.backend = backend
        self.catalog = catalog
        self.clock = clock
        self.policy = policy
        self.progress = progress
        self.allocations = allocations
        self.capacity_back = capacity_back
        self.fixed_budgets = tuple(budgets)  # from the config; the store's are read each time
        self.price_refresh_seconds = price_refresh_seconds  # 0: plan at catalog prices
        self.price_tolerance = price_tolerance  # take a price up on a move at least this large
        self.lock = threading.RLock()
        self.spend = SpendLedger(store, policy.fair_share_half_life_seconds)
        self.budgets_version = 0  # bumped when the store's budgets change
        self.price_fall_version = 0  # bumped when a spot price taken up fell
        self._budget_cache: tuple[list[dict[str, object]], tuple[Budget, ...]] = ([], ())
        self._planned: dict[str, tuple[tuple[object, ...], Job]] = {}
        self._in_force: tuple[Offering, ...] = catalog.offerings
        self._priced_at: datetime | None = None
        #: queued jobs the spot decider would not let wait for spot, with the spot offerings
        #: each is planned without until it launches (the one it waited for and those then in
        #: a drought; replaced whole, never changed in place)
        self.avoid: Mapping[str, frozenset[str]] = MappingProxyType({})

    def avoid_for(self, job_id: str, offering_ids: frozenset[str]) -> None:
        """Plan the queued job ``job_id`` without these spot offerings too (loop thread)."""
        avoid = dict(self.avoid)
        avoid[job_id] = avoid.get(job_id, frozenset()) | offering_ids
        self.avoid = MappingProxyType(avoid)

    def stop_avoiding(self, job_ids: Collection[str]) -> None:
        """Plan these jobs on every spot offering again (launched, or no longer pending)."""
        if any(j in self.avoid for j in job_ids):
            self.avoid = MappingProxyType({k: v for k, v in self.avoid.items() if k not in job_ids})

    def build(self, parked: frozenset[str] = frozenset()) -> Snapshot:
        """The frozen world the next plan sees, with ``parked`` jobs left out of planning
        (their attempts are not even read)."""
        with self.lock:
            jobs = self._jobs(parked)
            now = self.clock.now()
            budgets = self.budgets()
            pools = self._pools()
            return Snapshot(
                now=now,
                jobs=jobs,
                offerings=pooled_offerings(self.prices(now), pools),
                throughput=tuple(self.catalog.throughput.items()),
                egress=self.catalog.egress,
                budgets=budgets,
                spend=self.spend.records(budgets, now),
                running=self.allocations(),
                capacity_back=self.capacity_back(now),
                parked=parked,
                speeds=self.speeds(),
                pools=pools,
            )

    def _pools(self) -> tuple[PoolView, ...]:
        """The pooled offerings: settings and warm (idle) instances now; none without pools.
        The planner prices warm ones without a boot and caps each at its pool's ``max``; the
        batching step reads those that batch; the API shows them all."""
        if not (self.policy.use_pools and isinstance(self.backend, WarmPools)):
            return ()
        warm = self.backend.warm_instances()
        data = self.backend.warm_data()
        return tuple(
            PoolView(settings, warm.get(oid, 0), tuple(sorted(data.get(oid, {}).items())))
            for oid, settings in sorted(self.backend.pool_settings().items())
        )

    def budgets(self) -> tuple[Budget, ...]:
        """The config's budgets and the store's (created through the API), the latter parsed
        once per change."""
        with self.lock:
            specs = self.store.budget_specs()
            if specs != self._budget_cache[0]:
                parsed = tuple(budget_from_spec(BudgetSpec.model_validate(s)) for s in specs)
                self._budget_cache = (specs, parsed)
                self.budgets_version += 1
            return self.fixed_budgets + self._budget_cache[1]

    def known_budgets(self) -> tuple[Budget, ...]:
        """The budgets as last read (no store query)."""
        with self.lock:
            return self.fixed_budgets + self._budget_cache[1]

    def prices(self, now: datetime) -> tuple[Offering, ...]:
        """The catalog with each spot offering at the price the backend bills now, looked up
        at most every ``price_refresh_seconds`` (a price feed's cadence). A price is taken up
        when it moved by ``price_tolerance`` (1%) or more from the one plans are made at —
        finer moves are far inside a plan's own uncertainty — and the tuple is only replaced
        then, so the core's memos keep their entries. The ledger always bills the exact
        price."""
        with self.lock:
            if self.price_refresh_seconds <= 0:
                return self.catalog.offerings
            fresh = self._priced_at is not None and (
                (now - self._priced_at).total_seconds() < self.price_refresh_seconds
            )
            if fresh:
                return self._in_force
            self._priced_at = now
            taken: list[Offering] = []
            changed = cheaper = False
            # with live prices (the service's ``prices`` config) every market's price moves
            live = isinstance(self.backend, CatalogPrices) and self.backend.live_prices is not None
            for current in self._in_force:
                if current.market is Market.SPOT or live:
                    price, source = self.backend.price(current, now)
                    if _moved(float(price), current.usd_per_hour, self.price_tolerance):
                        cheaper = cheaper or float(price) < current.usd_per_hour
                        current = dataclasses.replace(  # noqa: PLW2901
                            current, price=Price(float(price), source, now)
                        )
                        changed = True
                taken.append(current)
            if changed:
                self._in_force = tuple(taken)
            if cheaper:
                self.price_fall_version += 1
            return self._in_force

    def _jobs(self, parked: frozenset[str]) -> tuple[Job, ...]:
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
        jobs = tuple(
            self._as_planned(job, history[job.id]) if job.id in history else job for job in stored
        )
        avoid = self.avoid
        if avoid:
            jobs = tuple(
                _avoiding(job, avoid[job.id]) if job.id in avoid and job.state.is_pending else job
                for job in jobs
            )
        if len(self._planned) > 2 * len(history) + 64:  # forget jobs no longer pending
            self._planned = {k: v for k, v in self._planned.items() if k in history}
        return jobs

    def _as_planned(self, job: Job, attempts: Sequence[Attempt]) -> Job:
        """A pending job as its attempts so far leave it (see :func:`with_history` and
        :meth:`_remaining`), worked out once per (job state, attempts): a pending job changes
        only by a transition or a new attempt, and its progress only while an attempt runs."""
        key = (job.state, len(attempts), job.seq)
        memo = self._planned.get(job.id)
        if memo is not None and memo[0] == key:
            return memo[1]
        planned = self._remaining(with_history(job, attempts, self.policy))
        self._planned[job.id] = (key, planned)
        return planned

    def _remaining(self, job: Job) -> Job:
        """A pending job that has checkpointed progress is planned for the work it has left
        (from its last progress report), not for all of it."""
        if not job.state.is_pending or job.work.reference_hours is None:
            return job
        done = self.progress.done(job.id)
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


def off_spot_for_good(job: Job, outcomes: Sequence[AttemptOutcome | None], policy: Policy) -> bool:
    """Whether the job's attempts latched it on on-demand: moved there by a switch rule or the
    late check, or preempted its tier's (or its own) ``max_preemptions`` times."""
    limit = policy.spot_rules_for(job).max_preemptions
    return AttemptOutcome.TO_ON_DEMAND in outcomes or (
        limit is not None and outcomes.count(AttemptOutcome.PREEMPTED) >= limit
    )


def _without_spot(job: Job) -> Job:
    return dataclasses.replace(job, spot=dataclasses.replace(job.spot, allowed=False))


def _avoiding(job: Job, offerings: frozenset[str]) -> Job:
    return dataclasses.replace(
        job, spot=dataclasses.replace(job.spot, avoid=job.spot.avoid | offerings)
    )


def with_history(job: Job, attempts: Sequence[Attempt], policy: Policy) -> Job:
    """A pending job as its attempts so far demand: without spot once preempted
    ``max_preemptions`` times or moved to on-demand by runtime control (for good), or for its
    next attempt when the spot decider bridged it to on-demand, and with at least the
    workers a scale-up asked for (all read from the attempts' outcomes)."""
    if not job.state.is_pending or not attempts:
        return job
    outcomes = [a.outcome for a in attempts]
    if off_spot_for_good(job, outcomes, policy) or outcomes[-1] is AttemptOutcome.BRIDGE_ON_DEMAND:
        job = _without_spot(job)
    scaled = [a.workers * 2 for a in attempts if a.outcome is AttemptOutcome.SCALE_UP]
    if scaled:
        res = job.resources
        floor = min(res.max_workers, max(res.min_workers, *scaled))
        job = dataclasses.replace(job, resources=dataclasses.replace(res, min_workers=floor))
    return job


def _moved(price: float, planned: float, tolerance: float) -> bool:
    """A price differs enough from the one plans are made at to plan with it instead (a new
    source alone changes nothing)."""
    if planned <= 0:
        return price != planned
    return abs(price - planned) >= tolerance * planned
