"""Guards on the scheduler loop's riskiest duties, on the simulated backend and clock (fast,
deterministic). Each test names the mistake it is there to catch: billing without the
instances factor, a snapshot that forgets running jobs' committed cost, a fresh checkpoint
folder per attempt, no re-attach after a restart, one launch per job on a full offering."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np

from budgeteer.backends import TraceMarket
from budgeteer.backends.base import Handle, LaunchRequest
from budgeteer.backends.market import ZonedMarket
from budgeteer.catalog import Catalog
from budgeteer.clock import ManualClock
from budgeteer.core import Policy
from budgeteer.core.spot.replay import Mode
from budgeteer.domain.budget import Budget
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.offering import Market, Offering
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.domain.tier import Tier
from budgeteer.scheduler import Scheduler
from budgeteer.sim.backend import SimBackend
from budgeteer.sim.kernel import Kernel, SimClock
from budgeteer.store import MemoryStore
from builders import EGRESS, THROUGHPUT, make_budget, make_job, make_offering

T0 = datetime(2026, 11, 10, 8, tzinfo=UTC)


class RecordingBackend(SimBackend):
    """The simulated backend, keeping every launch request it was sent."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.requests: list[LaunchRequest] = []

    def launch(self, request: LaunchRequest) -> Handle:
        self.requests.append(request)
        return super().launch(request)


@dataclass
class World:
    kernel: Kernel
    store: MemoryStore
    backend: RecordingBackend
    sched: Scheduler
    catalog: Catalog

    def submit(self, *jobs: Job) -> None:
        now = self.kernel.now
        self.store.submit(
            [
                dataclasses.replace(
                    j,
                    submitted_at=now,
                    deadline=None if j.deadline is None else now + (j.deadline - j.submitted_at),
                )
                for j in jobs
            ],
            at=now,
        )

    def run(
        self, hours: float, every_seconds: float = 600.0, sched: Scheduler | None = None
    ) -> None:
        """Cycle every ``every_seconds`` of simulated time for ``hours``."""
        end = self.kernel.now + timedelta(hours=hours)
        while self.kernel.now < end:
            (sched or self.sched).cycle()
            self.kernel.run(until=min(end, self.kernel.now + timedelta(seconds=every_seconds)))

    def scheduler(self, budgets: Sequence[Budget] = ()) -> Scheduler:
        return Scheduler(
            self.store,
            self.backend,
            self.catalog,
            SimClock(self.kernel),
            Path("/nonexistent/budgeteer-checkpoints"),
            budgets=budgets,
        )


def _world(
    offerings: Sequence[Offering],
    budgets: Sequence[Budget] = (),
    available: np.ndarray | None = None,
) -> World:
    kernel = Kernel(T0)
    store = MemoryStore()
    ones = np.ones(100_000, dtype=bool)
    market = TraceMarket(ones if available is None else available, 60, T0)
    catalog = Catalog(tuple(offerings), dict(THROUGHPUT), EGRESS, "test")
    backend = RecordingBackend(kernel, market, store, catalog.throughput)
    world = World(kernel, store, backend, None, catalog)  # type: ignore[arg-type]
    world.sched = world.scheduler(budgets)
    return world


def _recompute(world: World, job_id: str) -> Decimal:
    """What a job should have cost: per attempt, instances × the catalog price × its hours —
    worked out here from the attempts alone, not from the ledger."""
    prices = {o.id: Decimal(repr(o.usd_per_hour)) for o in world.catalog.offerings}
    total = Decimal(0)
    for a in world.store.attempts(job_id):
        assert a.ended_at is not None
        seconds = Decimal(str((a.ended_at - a.started_at).total_seconds()))
        total += prices[a.offering_id] * a.instances * seconds / Decimal(3600)
    return total


def _close(billed: Decimal, expected: Decimal, entries: int) -> bool:
    """Equal but for each ledger entry's rounding half-even to 10⁻⁸ USD."""
    return abs(billed - expected) <= entries * Decimal("0.5e-8")


def test_a_multi_instance_job_is_billed_for_every_instance() -> None:
    # catches: billing price × time without the × instances factor
    world = _world([make_offering("od", price=3.0)])
    world.submit(make_job("wide", hours=2.0, workers=(4, 4), spot=False))
    world.run(hours=2)
    [attempt] = world.store.attempts("wide")
    assert attempt.instances == 4
    assert world.store.job("wide").state is JobState.SUCCEEDED
    billed = sum((e.amount_usd for e in world.store.ledger("wide")), Decimal(0))
    assert _close(billed, _recompute(world, "wide"), len(world.store.ledger("wide")))
    hours = Decimal(str((attempt.ended_at - attempt.started_at).total_seconds() / 3600))
    assert billed > 3 * Decimal(3) * hours  # more than three instances' worth: all four billed


def test_running_jobs_committed_cost_counts_against_the_budget() -> None:
    # catches: a snapshot whose running allocations forget what they are still expected to cost
    world = _world([make_offering("od", price=3.0)], budgets=[make_budget(limit="100")])
    world.submit(make_job("first", hours=20.0, spot=False, tier=Tier.P2))  # ≈ $60
    world.run(hours=1)
    assert world.store.job("first").state is JobState.RUNNING
    snap = world.sched.snapshot()
    [alloc] = snap.running
    assert 50 < alloc.committed_usd < 60  # 19 h of $3/h still to come
    world.submit(make_job("second", hours=10.0, spot=False, tier=Tier.P2, seq=1))  # ≈ $30
    world.run(hours=0.2)
    # $3 accrued + $57 committed + $30 > $80 (P2 may use 80% of $100): held, not admitted
    assert world.store.job("second").state is JobState.HELD
    assert world.store.attempts("second") == []


def test_every_attempt_of_a_job_resumes_from_the_same_checkpoint_folder() -> None:
    # catches: a fresh checkpoint folder per attempt (a resumed job would start from scratch)
    available = np.ones(100_000, dtype=bool)
    available[30:40] = False  # spot taken back 30 min in, for 10 min
    world = _world(
        [make_offering("spot", price=1.0, market=Market.SPOT, interruption_per_hour=0.01)],
        available=available,
    )
    world.submit(make_job("resumes", hours=1.5, restart_seconds=60))
    world.run(hours=4, every_seconds=60)
    assert world.store.job("resumes").state is JobState.SUCCEEDED
    folders = {r.checkpoint_dir for r in world.backend.requests}
    assert len(world.backend.requests) >= 2  # it was preempted and launched again
    assert folders == {Path("/nonexistent/budgeteer-checkpoints/resumes")}


def test_a_second_scheduler_over_the_same_store_re_attaches_and_bills_without_gaps() -> None:
    # catches: re-attach after a restart switched off (the running attempt would be orphaned)
    world = _world([make_offering("od", price=2.0)])
    world.submit(make_job("long", hours=3.0, spot=False))
    world.run(hours=1)
    assert world.store.job("long").state is JobState.RUNNING
    restarted = world.scheduler()  # a new process: no memory of what the first one launched
    world.run(hours=3, sched=restarted)
    assert world.store.job("long").state is JobState.SUCCEEDED
    [attempt] = world.store.attempts("long")  # re-attached, not launched again
    entries = world.store.ledger("long")
    assert entries[0].start == attempt.started_at
    assert all(b.start == a.end for a, b in itertools.pairwise(entries))
    assert entries[-1].end == attempt.ended_at
    billed = sum((e.amount_usd for e in entries), Decimal(0))
    assert _close(billed, _recompute(world, "long"), len(entries))


def test_several_jobs_placed_on_a_full_offering_probe_it_once() -> None:
    # catches: per-offering capacity backoff disabled (every job would ask, every cycle)
    available = np.zeros(100_000, dtype=bool)  # a long spot drought
    world = _world(
        [
            make_offering("spot", price=1.0, market=Market.SPOT, interruption_per_hour=0.01),
            make_offering("od", price=10.0),
        ],
        available=available,
    )
    world.submit(*(make_job(f"j{i}", hours=1.0, deadline_hours=100, seq=i) for i in range(3)))
    world.sched.cycle()
    assert [r.offering.id for r in world.backend.requests] == ["spot"]  # one probe, not three
    world.kernel.run(until=world.kernel.now + timedelta(seconds=20))
    world.sched.cycle()  # within the 30 s backoff: nobody asks again
    assert len(world.backend.requests) == 1
    world.kernel.run(until=world.kernel.now + timedelta(seconds=15))
    world.sched.cycle()  # backoff over: one probe again
    assert len(world.backend.requests) == 2
    for job_id in ("j0", "j1", "j2"):
        assert world.store.job(job_id).state is JobState.QUEUED


class HookedClock(ManualClock):
    """A manual clock that runs ``hook`` on its ``at``-th sleep (something happens then)."""

    def __init__(self, start: datetime, at: int, hook: Callable[[], None]) -> None:
        super().__init__(start)
        self.sleeps = 0
        self.at = at
        self.hook = hook

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.sleeps += 1
        if self.sleeps == self.at:
            self.hook()


def test_the_loop_wakes_on_a_submission_not_on_its_interval() -> None:
    store = MemoryStore()
    catalog = Catalog((make_offering("od"),), dict(THROUGHPUT), EGRESS, "test")

    def submit() -> None:
        store.submit([make_job("late-comer")], at=T0)

    clock = HookedClock(T0, at=3, hook=submit)
    kernel = Kernel(T0)
    backend = SimBackend(kernel, TraceMarket(np.ones(10, dtype=bool), 60, T0), store, {})
    sched = Scheduler(store, backend, catalog, clock, Path("/nonexistent"))
    assert sched.wait_for_event(3600) is True  # woken by the submission
    assert clock.sleeps == 3  # at the slice it happened in, not an hour of slices later
    quiet = HookedClock(T0, at=10**9, hook=submit)
    sched = Scheduler(store, backend, catalog, quiet, Path("/nonexistent"))
    assert sched.wait_for_event(60) is False  # nothing happens: the whole wait, then False
    assert quiet.now() == T0 + timedelta(seconds=60)


def test_a_job_that_cannot_wait_out_a_spot_drought_fails_over_to_another_zone() -> None:
    """Zone a's spot refuses launch after launch. A drought that has lasted D is expected to
    last D/2 more, and the plans count it: a P0 that cannot absorb the wait leaves zone a once
    the expected wait outgrows what is left of its slack, not when its slack is gone.
    (Catches: a refusing offering planned as if free — the job stays on zone a until its 2.5 h
    of slack are gone.)"""
    dry = TraceMarket(np.zeros(100_000, dtype=bool), 60, T0)
    wet = TraceMarket(np.ones(100_000, dtype=bool), 60, T0)
    kernel = Kernel(T0)
    store = MemoryStore()
    offerings = (
        make_offering("spot-a", price=1.0, market=Market.SPOT, interruption_per_hour=0.01),
        make_offering("spot-b", price=1.3, market=Market.SPOT, interruption_per_hour=0.01),
        make_offering("od", price=10.0),
    )
    catalog = Catalog(offerings, dict(THROUGHPUT), EGRESS, "test")
    market = ZonedMarket([("spot-a", dry)], wet)
    backend = RecordingBackend(kernel, market, store, catalog.throughput)
    world = World(kernel, store, backend, None, catalog)  # type: ignore[arg-type]
    world.sched = world.scheduler()
    # 2 h of work, 4.5 h to the deadline: 2.5 h of slack
    world.submit(make_job("p0", hours=2.0, deadline_hours=4.5, tier=Tier.P0))
    moved_at = None
    while kernel.now < T0 + timedelta(hours=4.5):
        world.sched.cycle()
        if moved_at is None and any(r.offering.id != "spot-a" for r in backend.requests):
            moved_at = kernel.now
        kernel.run(until=kernel.now + timedelta(seconds=60))
    assert next(r.offering.id for r in backend.requests) == "spot-a"  # cheapest, at first
    assert moved_at is not None
    # t/2 outgrows 2.5 h − t at t = 100 min: the move follows the next probe (10 min apart by
    # then); the job that ignored the drought would stay until t = 150 min
    assert moved_at - T0 <= timedelta(minutes=115), moved_at - T0
    assert store.job("p0").state is JobState.SUCCEEDED
    # the events say why: the drought's length and the wait the plans count
    causes = [e.cause for e in store.events("p0")]
    assert any("a spot drought for" in c and "plans count" in c for c in causes), causes
    last = store.attempts("p0")[-1]
    assert last.offering_id != "spot-a"
    assert last.ended_at is not None
    assert last.ended_at <= T0 + timedelta(hours=4.5)  # on time


def test_a_restarted_scheduler_remembers_a_drought() -> None:
    """The backoff and the drought's expected wait are in the store: a second scheduler over
    it does not probe the dry offering again at once, and its plans count the wait. (Catches:
    backoffs only in memory — a restart forgets the drought and probes at once.)"""
    world = _world(
        [
            make_offering("spot", price=1.0, market=Market.SPOT, interruption_per_hour=0.01),
            make_offering("od", price=10.0),
        ],
        available=np.zeros(100_000, dtype=bool),
    )
    world.submit(make_job("j", hours=1.0, deadline_hours=100))
    world.run(hours=0.5, every_seconds=60)  # refusals for half an hour
    refused = len(world.backend.requests)
    assert refused >= 4
    (kept,) = world.store.backoffs()
    assert (kept.offering_id, kept.misses) == ("spot", refused)
    assert kept.room_at is not None
    assert kept.room_at > world.kernel.now  # a wait the plans count
    again = world.scheduler()  # a restart
    assert again.launcher.full == {"spot": kept}
    assert again.launcher.capacity_back(world.kernel.now) == (("spot", kept.room_at),)
    again.cycle()  # inside the backoff: no probe
    assert len(world.backend.requests) == refused


def _back_to_spot_world(policy: Policy, *others: Offering) -> World:
    """Spot dry for the first 2.5 h, then plentiful; on-demand of the same instance type at
    ten times the price; ``others`` always up."""
    avail = np.ones(100_000, dtype=bool)
    avail[:150] = False  # 60 s ticks
    kernel = Kernel(T0)
    store = MemoryStore()
    offerings = (
        dataclasses.replace(
            make_offering("spot", price=1.0, market=Market.SPOT, interruption_per_hour=0.01),
            instance_type="p3",
        ),
        dataclasses.replace(make_offering("od", price=10.0), instance_type="p3"),
        *others,
    )
    catalog = Catalog(offerings, dict(THROUGHPUT), EGRESS, "test")
    wet = TraceMarket(np.ones(100_000, dtype=bool), 60, T0)
    market = ZonedMarket([("spot", TraceMarket(avail, 60, T0))], wet)
    backend = RecordingBackend(kernel, market, store, catalog.throughput)
    world = World(kernel, store, backend, None, catalog)  # type: ignore[arg-type]
    world.sched = Scheduler(
        store,
        backend,
        catalog,
        SimClock(kernel),
        Path("/nonexistent/budgeteer-checkpoints"),
        policy=policy,
    )
    return world


def test_the_spot_decider_moves_an_on_demand_job_back_to_spot_when_spot_returns() -> None:
    """A job sent to on-demand by a spot drought goes back to spot when spot returns and its
    slack covers the changeover, on time and for less; with the planner alone
    (``default-planner-spot``) it stays on on-demand to the end. (Catches: the decider not
    wired into the loop, or its move not freeing the next plan to use spot.)"""
    runs = {}
    for live in (True, False):
        world = _back_to_spot_world(Policy(live_spot=live))
        # 5 h of work, 8 h to the deadline; restarts cost 5 min + half a 10 min checkpoint
        world.submit(make_job("j", hours=5.0, deadline_hours=8.0, checkpoint_seconds=600))
        world.run(hours=9.0, every_seconds=60)
        runs[live] = world
    for world in runs.values():
        assert world.store.job("j").state is JobState.SUCCEEDED
        last = world.store.attempts("j")[-1]
        assert last.ended_at is not None
        assert last.ended_at <= T0 + timedelta(hours=8)  # on time either way
    decided = runs[True].store.attempts("j")
    ran = [a for a in decided if a.outcome is not AttemptOutcome.CAPACITY]
    assert [a.offering_id for a in ran] == ["od", "spot"]
    assert ran[0].outcome is AttemptOutcome.TO_SPOT
    assert ran[0].ended_at is not None
    assert ran[0].ended_at >= T0 + timedelta(hours=2.5)  # not before spot was back
    causes = [e.cause for e in runs[True].store.events("j")]
    assert any(c.startswith("spot decider:") and "spot is up" in c for c in causes), causes
    # … and as data, newest first: on-demand taken while queued in the drought (no attempt
    # yet), then the move back on the attempt it ended, each with the numbers it read
    back, took = runs[True].store.spot_decisions("j")
    assert (took.action, took.attempt_id, took.decided) == ("take_on_demand", None, Mode.ON_DEMAND)
    assert took.situation.mode is Mode.IDLE
    assert not took.situation.spot_up
    assert took.at <= ran[0].started_at
    assert (back.action, back.attempt_id, back.decided) == ("to_spot", ran[0].id, Mode.SPOT)
    assert back.situation.mode is Mode.ON_DEMAND
    assert back.situation.spot_up
    assert back.at <= ran[0].ended_at
    assert runs[False].store.spot_decisions() == []
    planner_only = runs[False].store.attempts("j")
    assert [a.offering_id for a in planner_only if a.outcome is not AttemptOutcome.CAPACITY] == [
        "od"
    ]
    cost = {live: sum(e.amount_usd for e in w.store.ledger()) for live, w in runs.items()}
    assert cost[True] < cost[False] * Decimal("0.8"), cost
    # what it learned of the market is in the store: the drought and the return
    (market,) = runs[True].store.markets()
    assert market.offering_id == "spot"
    assert market.up is True
    assert any(not p.up and p.hours >= 2.0 for p in market.periods)


def test_a_job_the_spot_decider_will_not_let_wait_takes_spot_elsewhere_before_on_demand() -> None:
    """Spot ``spot`` (p3) is dry for 2.5 h; another instance type's spot (``spot-g``, twice the
    price, a fifth of on-demand's) is up throughout. The job waits for the cheaper zone until
    the decider judges the drought not worth waiting out; it is then planned without the dry
    market, not without spot: it runs on ``spot-g``, not on on-demand, and the events say why.
    (Catches: a decider's verdict about one market taking every spot market off the plan.)"""
    spot_g = dataclasses.replace(
        make_offering("spot-g", price=2.0, market=Market.SPOT, interruption_per_hour=0.01),
        instance_type="g5",
    )
    world = _back_to_spot_world(Policy(), spot_g)
    world.submit(make_job("j", hours=5.0, deadline_hours=8.0, checkpoint_seconds=600))
    world.run(hours=9.0, every_seconds=60)
    assert world.store.job("j").state is JobState.SUCCEEDED
    took = [d for d in world.store.spot_decisions("j") if d.action == "take_on_demand"]
    assert [d.offering_id for d in took] == ["spot"]  # the decider judged the dry zone
    ran = [a for a in world.store.attempts("j") if a.outcome is not AttemptOutcome.CAPACITY]
    assert ran[0].offering_id == "spot-g", [a.offering_id for a in ran]
    assert ran[0].started_at >= took[0].at
    assert ran[0].started_at < T0 + timedelta(hours=2.5)  # before the dry zone came back
    assert all(a.offering_id != "od" for a in ran)
    causes = [e.cause for e in world.store.events("j")]
    assert any(
        "take on-demand now" in c and "so on spot elsewhere (1 dry spot offering(s) left out)" in c
        for c in causes
    ), causes
    last = world.store.attempts("j")[-1]
    assert last.ended_at is not None
    assert last.ended_at <= T0 + timedelta(hours=8)


def test_a_job_cancelled_after_the_decider_sent_it_off_a_dry_market_is_forgotten() -> None:
    """The markets a queued job is planned without are kept only while it is pending: a job
    cancelled between the decider's verdict and its launch leaves nothing behind. (Catches:
    the loop's per-job state growing with every job that never launched.)"""
    world = _back_to_spot_world(Policy())
    world.submit(make_job("j", hours=5.0, deadline_hours=8.0, checkpoint_seconds=600))
    while not world.store.spot_decisions("j"):
        assert world.kernel.now < T0 + timedelta(hours=2.5)
        world.run(hours=1 / 60, every_seconds=60)
    assert set(world.sched.snapshots.avoid) == {"j"}
    assert "spot" in world.sched.snapshots.avoid["j"]
    world.store.request_cancel("j", at=world.kernel.now)
    world.run(hours=2 / 60, every_seconds=60)
    assert world.store.job("j").state is JobState.CANCELLED
    assert world.sched.snapshots.avoid == {}
