"""The service's scheduler loop on simulated time: short stories with hand-checked outcomes,
the ledger against an independent recompute from the price series, and determinism."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np

from budgeteer.backends import TraceMarket
from budgeteer.catalog import Catalog
from budgeteer.core import HoldReason, Plan
from budgeteer.domain.job import DeadlineMiss, Job, SpotSettings
from budgeteer.domain.job import JobState as S
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from budgeteer.scheduler import Scheduler, backoff_seconds
from budgeteer.sim.backend import SimBackend
from budgeteer.sim.kernel import Kernel, SimClock
from budgeteer.sim.run import Arrival, SimRun, simulate
from budgeteer.store import MemoryStore
from builders import EGRESS, THROUGHPUT, make_budget, make_job

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
GAP = 600  # the trace's tick: ten minutes
SPOT = "spot"
OD = "od"


def _catalog() -> Catalog:
    from builders import make_offering  # noqa: PLC0415 - builders' offering factory

    spot = make_offering(
        SPOT, price=1.0, market=Market.SPOT, interruption_per_hour=0.05, startup_seconds=120
    )
    od = make_offering(OD, price=3.0, startup_seconds=120)
    return Catalog((spot, od), dict(THROUGHPUT), EGRESS, "test")


def _market(up_ticks: int, down_ticks: int) -> TraceMarket:
    """Spot up for ``up_ticks``, then down for ``down_ticks``, then up; its price wanders."""
    avail = np.array([True] * up_ticks + [False] * down_ticks + [True] * 500)
    prices = 0.9 + 0.1 * (np.arange(len(avail)) % 5)  # 0.9 … 1.3, changing every tick
    return TraceMarket(avail, GAP, T0, prices=prices, source="trace")


def _at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def _job(name: str, at: float, **kw: object) -> Job:
    job = make_job(name, **kw)  # type: ignore[arg-type]
    deadline = None if job.deadline is None else _at(at) + (job.deadline - job.submitted_at)
    return dataclasses.replace(job, submitted_at=_at(at), deadline=deadline)


def _recompute(run: SimRun, market: TraceMarket) -> Decimal:
    """Σ over attempts of ∫ price × instances dt, tick by tick from the series (independent of
    the loop's billing: it never looks at the ledger's intervals)."""
    catalog = {o.id: o for o in _catalog().offerings}
    total = Decimal(0)
    for a in run.store.attempts():
        if a.ended_at is None:
            continue
        t = a.started_at
        while t < a.ended_at:
            tick_end = T0 + timedelta(seconds=(int((t - T0).total_seconds() // GAP) + 1) * GAP)
            end = min(tick_end, a.ended_at)
            price, _ = market.price(catalog[a.offering_id], t)
            total += price * a.instances * Decimal(str((end - t).total_seconds())) / Decimal(3600)
            t = end
    return total


def _preempted_story() -> tuple[SimRun, TraceMarket]:
    market = _market(up_ticks=12, down_ticks=60)  # spot for 2 h, then gone for 10 h
    job = dataclasses.replace(
        _job("retrain", 0.2, hours=4, deadline_hours=12, tier=Tier.P1),
        spot=SpotSettings(allowed=True, max_preemptions=1),
    )
    run = simulate([Arrival(job.submitted_at, job)], _catalog(), market, start=T0, end=_at(24))
    return run, market


def test_preempted_on_spot_it_resumes_on_demand_and_meets_its_deadline() -> None:
    run, market = _preempted_story()
    store = run.store
    assert store.job("retrain").state is S.SUCCEEDED
    first, second = store.attempts("retrain")
    assert (first.market, second.market) == ("spot", "on_demand")
    assert first.exit_reason is not None
    assert first.exit_reason.startswith("preempted")
    assert first.ended_at is not None
    assert first.ended_at <= _at(2) + timedelta(minutes=2)  # revoked at 2 h, checkpointed
    done_on_spot = (first.ended_at - first.started_at).total_seconds() / 3600 - 2 / 60
    finished = store.events("retrain")[-1].at
    assert finished <= _at(0.2) + timedelta(hours=12)
    # the second attempt only did what was left (plus start-up and the restart overhead)
    assert second.ended_at is not None
    second_hours = (second.ended_at - second.started_at).total_seconds() / 3600
    assert abs(second_hours - (4 - done_on_spot + 2 / 60 + 5 / 60)) < 0.1
    billed = sum((e.amount_usd for e in store.ledger()), Decimal(0))
    # equal but for each ledger entry's rounding half-even to the ledger's 1e-8 USD
    assert abs(billed - _recompute(run, market)) <= len(run.store.ledger()) * Decimal("0.5e-8")
    assert len({e.price_source for e in store.ledger() if e.price_source.startswith("trace")}) > 3


def test_the_same_inputs_give_the_same_run() -> None:
    one, _ = _preempted_story()
    two, _ = _preempted_story()
    assert one.kernel.log == two.kernel.log
    assert one.store.ledger() == two.store.ledger()
    assert [e.to_state for e in one.store.events("retrain")] == [
        e.to_state for e in two.store.events("retrain")
    ]


def test_a_dependent_job_never_starts_before_its_parent_succeeds() -> None:
    parent = _job("features", 0.0, hours=2, spot=False)
    child = _job("train", 0.0, hours=1, spot=False, depends_on=(("features", "success"),), seq=1)
    run = simulate(
        [Arrival(parent.submitted_at, parent), Arrival(child.submitted_at, child)],
        _catalog(),
        _market(500, 0),
        start=T0,
        end=_at(12),
    )
    store = run.store
    assert store.job("train").state is S.SUCCEEDED
    parent_done = next(e.at for e in store.events("features") if e.to_state is S.SUCCEEDED)
    assert store.attempts("train")[0].started_at >= parent_done
    assert S.WAITING in [e.to_state for e in store.events("train")]


def test_a_p0_uses_the_reserve_and_p3_work_waits_for_the_period_reset() -> None:
    # $5 a month with a $20 reserve: the P0 ($12 on-demand) may use the reserve; the P3 ($3)
    # may only bring projected spend to 70% of $5, so it waits — until December starts
    budget = make_budget(limit="5", reserve="20")
    p0 = _job("drift-fix", 7.0, hours=4, spot=False, tier=Tier.P0, deadline_hours=6)
    p3 = _job("sweep", 9.0, hours=1, spot=False, tier=Tier.P3, seq=1)
    run = simulate(
        [Arrival(p0.submitted_at, p0), Arrival(p3.submitted_at, p3)],
        _catalog(),
        _market(500, 0),
        start=T0,
        end=_at(16),
        budgets=[budget],
    )
    store = run.store
    assert store.job("drift-fix").state is S.SUCCEEDED
    assert store.attempts("drift-fix")[0].started_at < _at(7.1)  # admitted at once
    held = [e for e in store.events("sweep") if e.to_state is S.HELD]
    assert held
    assert "budget" in held[0].cause
    midnight = datetime(2026, 12, 1, tzinfo=UTC)
    started = store.attempts("sweep")[0].started_at
    assert midnight <= started <= midnight + timedelta(minutes=10)  # released at the reset
    assert store.job("sweep").state is S.SUCCEEDED


def test_a_job_held_past_its_deadline_runs_late_or_is_cancelled_as_it_asked() -> None:
    # $10 a month: a P0 takes ~$6 first; P2 work may bring spend to 80% ($8), so both $6 P2
    # jobs wait for December and their 6 h deadlines pass on the way. The one that runs late
    # does so after the reset, flagged; the one that asked to be cancelled is cancelled when its
    # deadline passes.
    budget = make_budget(limit="10")
    first = _job("urgent", 1.0, hours=2, spot=False, tier=Tier.P0, deadline_hours=4, seq=0)
    runs = _job("late-ok", 2.0, hours=2, spot=False, deadline_hours=6, seq=1)
    stops = dataclasses.replace(
        _job("late-no", 2.0, hours=2, spot=False, deadline_hours=6, seq=2),
        on_deadline_miss=DeadlineMiss.CANCEL,
    )
    run = simulate(
        [Arrival(j.submitted_at, j) for j in (first, runs, stops)],
        _catalog(),
        _market(500, 0),
        start=T0,
        end=_at(24),
        budgets=[budget],
    )
    store = run.store
    assert store.job("urgent").state is S.SUCCEEDED
    assert store.job("late-ok").state is S.SUCCEEDED
    [attempt] = store.attempts("late-ok")
    assert attempt.started_at >= datetime(2026, 12, 1, tzinfo=UTC)  # after the reset
    placed = [e for e in store.events("late-ok") if e.cause.startswith("placed on")]
    assert "late: the deadline 2026-11-30 20:00 UTC has passed" in placed[0].cause
    assert store.job("late-no").state is S.CANCELLED
    assert not store.attempts("late-no")
    cancelled = store.events("late-no")[-1]
    assert _at(8) <= cancelled.at <= _at(8) + timedelta(minutes=10)
    assert cancelled.cause.endswith("(on_deadline_miss: cancel)")


def test_a_job_held_for_budget_is_parked_until_something_could_admit_it() -> None:
    kernel = Kernel(T0)
    store = MemoryStore()
    catalog = _catalog()
    backend = SimBackend(kernel, _market(500, 0), store, dict(catalog.throughput))
    sched = Scheduler(
        store, backend, catalog, SimClock(kernel), Path("/nonexistent"), park_seconds=3600
    )
    spec = {"id": "growth", "scope": {"team": "growth"}, "limit_usd": "5"}
    store.put_budget(spec, create=True)  # P2 may bring spend to $4; "big" costs ~$6
    big = _job("big", 0.0, hours=2, spot=False, seq=0)
    small = _job("small", 0.0, hours=0.5, spot=False, seq=1)  # growth: ~$1.60, ends ~0.53 h
    other = _job("other", 0.0, hours=0.25, spot=False, seq=2, team="search")  # ends ~0.28 h
    store.submit([big, small, other], at=T0)

    def plan_at(hours: float) -> Plan:
        kernel.run(until=_at(hours))
        plan = sched.cycle().plan
        assert plan is not None
        return plan

    first = plan_at(0.0)
    hold = first.hold("big")
    assert hold is not None
    assert hold.reason is HoldReason.BUDGET
    assert {a.job_id for a in first.admissions} == {"small", "other"}
    # another team's job ended: nothing that could admit "big"; it stays parked, unplanned
    assert plan_at(0.4).hold("big") is None
    assert store.job("other").state is S.SUCCEEDED  # (seen by that cycle)
    # a job under the same budget ended: spend changed, so "big" is planned (and parked) again
    assert plan_at(0.6).hold("big") is not None
    assert plan_at(0.9).hold("big") is None
    # an hour after it was parked it is planned again whatever happened
    assert plan_at(1.6).hold("big") is not None
    assert plan_at(1.8).hold("big") is None
    # a budget change wakes it at once: now it fits and starts
    store.put_budget({**spec, "limit_usd": "50"}, create=False)
    assert [a.job_id for a in plan_at(1.9).admissions] == ["big"]


def test_the_planner_sees_the_spot_price_in_force_refreshed_hourly() -> None:
    kernel = Kernel(T0)
    store = MemoryStore()
    catalog = _catalog()  # spot listed at $1.00/h; the market's price moves every tick
    market = _market(500, 0)
    backend = SimBackend(kernel, market, store, dict(catalog.throughput))
    sched = Scheduler(store, backend, catalog, SimClock(kernel), Path("/nonexistent"))
    fixed = Scheduler(
        store, backend, catalog, SimClock(kernel), Path("/nonexistent"), price_refresh_seconds=0
    )

    def spot_price(s: Scheduler) -> float:
        return next(o for o in s.snapshot().offerings if o.id == SPOT).usd_per_hour

    def billed(at: datetime) -> float:
        return float(market.price(next(o for o in catalog.offerings if o.id == SPOT), at)[0])

    assert spot_price(sched) == billed(T0) == 0.9
    kernel.run(until=_at(0.5))  # the market moved on; the planner's price list did not yet
    assert billed(_at(0.5)) != 0.9
    assert spot_price(sched) == 0.9
    kernel.run(until=_at(1.0))
    assert spot_price(sched) == billed(_at(1.0))
    assert spot_price(fixed) == 1.0  # refresh off: the catalog's price


def _scheduler_on(prices: list[float]) -> tuple[Kernel, MemoryStore, Scheduler]:
    """A loop over spot that is always up, at ``prices`` (one per ten-minute tick)."""
    kernel = Kernel(T0)
    store = MemoryStore()
    catalog = _catalog()
    market = TraceMarket(
        np.ones(len(prices), dtype=bool), GAP, T0, prices=np.array(prices), source="trace"
    )
    backend = SimBackend(kernel, market, store, dict(catalog.throughput))
    return kernel, store, Scheduler(store, backend, catalog, SimClock(kernel), Path("/x"))


def test_a_price_move_under_one_percent_is_not_planned_with() -> None:
    kernel, _, sched = _scheduler_on([1.00] * 6 + [0.995] * 6 + [0.97] * 12)

    def spot_price() -> float:
        return next(o for o in sched.snapshot().offerings if o.id == SPOT).usd_per_hour

    first = sched.snapshot().offerings
    assert spot_price() == 1.00
    kernel.run(until=_at(1.0))  # the market moved by 0.5%: plans keep the price (and memos)
    assert sched.snapshot().offerings is first
    kernel.run(until=_at(2.0))  # by 3%: taken up
    assert spot_price() == 0.97


def test_a_budget_hold_wakes_when_spot_falls_enough_for_its_cheapest_plan_only() -> None:
    # $5 budget, P2 may bring it to $4; "big" (5 reference hours, spot) costs ~$5.4 at $1/h.
    # At $0.95/h (−5%) no plan of it can fit: it stays parked. At $0.50/h it fits and runs.
    kernel, store, sched = _scheduler_on([1.0] * 6 + [0.95] * 6 + [0.5] * 24)
    store.put_budget({"id": "growth", "scope": {"team": "growth"}, "limit_usd": "5"}, create=True)
    store.submit([_job("big", 0.0, hours=5)], at=T0)

    def plan_at(hours: float) -> Plan:
        kernel.run(until=_at(hours))
        plan = sched.cycle().plan
        assert plan is not None
        return plan

    hold = plan_at(0.0).hold("big")
    assert hold is not None
    assert hold.reason is HoldReason.BUDGET
    assert plan_at(0.5).hold("big") is None  # parked
    fell_a_little = plan_at(1.0)
    assert next(o for o in sched.snapshot().offerings if o.id == SPOT).usd_per_hour == 0.95
    assert fell_a_little.hold("big") is None  # still parked: −5% cannot make it fit
    assert not fell_a_little.admissions
    assert [a.job_id for a in plan_at(2.0).admissions] == ["big"]  # −50%: woken, fits


def test_backoff_doubles_to_ten_minutes_for_any_number_of_misses() -> None:
    assert [backoff_seconds(n) for n in (1, 2, 3, 5, 6)] == [30, 60, 120, 480, 600]
    assert backoff_seconds(5000) == 600  # thousands of misses through a drought: no overflow


def test_a_long_spot_drought_is_waited_out() -> None:
    # spot gone for eight days: the only offering refuses launch after launch (one probe per
    # ten minutes, over a thousand in a row) and the loop keeps going until spot is back
    market = _market(up_ticks=0, down_ticks=6 * 24 * 8)
    job = _job("patient", 0.0, hours=2, deadline_hours=24 * 10, tier=Tier.P3)
    spot_only = dataclasses.replace(_catalog(), offerings=(_catalog().offerings[0],))
    run = simulate([Arrival(job.submitted_at, job)], spot_only, market, start=T0, end=_at(24 * 10))
    misses = [
        a for a in run.store.attempts("patient") if (a.exit_reason or "").startswith("capacity")
    ]
    assert len(misses) > 1100
    assert run.store.job("patient").state is S.SUCCEEDED
    assert run.store.attempts("patient")[-1].started_at >= _at(24 * 8)
