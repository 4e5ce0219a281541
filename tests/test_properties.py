"""Invariants of plan_cycle on random small snapshots (hypothesis).

The reference ``cheapest_feasible`` below recomputes the cost model independently, one
placement at a time, over every offering: it checks the vectorised fronts and their pruning.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeteer.core import HoldReason, Plan, Policy, Snapshot, SolverChoice, plan_cycle
from budgeteer.core import candidates as candidates_module
from budgeteer.core import fronts as fronts_module
from budgeteer.core.admit import admit, budget_tallies
from budgeteer.core.candidates import FrontCache, nominate
from budgeteer.core.order import order_queue
from budgeteer.core.place import objective, penalties, place
from budgeteer.core.ready import readiness
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.offering import Market, Offering
from budgeteer.domain.tier import Tier
from builders import NOW, make_budget, make_job, make_offering, make_snapshot, spent

ACCELERATORS = ("T4", "A100", "H100", "L4")


@st.composite
def offerings(draw: st.DrawFn, limited: bool) -> list[Offering]:
    out = []
    for i in range(draw(st.integers(1, 5))):
        market = draw(st.sampled_from([Market.ON_DEMAND, Market.SPOT]))
        out.append(
            make_offering(
                f"o{i}",
                accelerator=draw(st.sampled_from(ACCELERATORS)),
                gpus=draw(st.sampled_from([1, 2, 4, 8])),
                price=draw(st.floats(0.2, 30.0)),
                market=market,
                interruption_per_hour=draw(st.floats(0.0, 0.6)) if market is Market.SPOT else 0.0,
                startup_seconds=draw(st.sampled_from([0.0, 120.0, 600.0])),
                max_instances=draw(st.sampled_from([None, 1, 1, 2, 3])) if limited else None,
                region=draw(st.sampled_from(["us-east-1", "us-west-2"])),
            )
        )
    return out


@st.composite
def jobs(draw: st.DrawFn) -> list[Job]:
    out: list[Job] = []
    states = [JobState.QUEUED] * 4 + [JobState.SUCCEEDED, JobState.FAILED, JobState.RUNNING]
    for i in range(draw(st.integers(1, 10))):
        deps: tuple[tuple[str, str], ...] = ()
        if out and draw(st.booleans()):
            parent = out[draw(st.integers(0, len(out) - 1))]
            deps = ((parent.id, draw(st.sampled_from(["success", "any", "failure"]))),)
        lo = draw(st.sampled_from([1, 2]))
        out.append(
            make_job(
                f"j{i}",
                team=draw(st.sampled_from(["a", "b"])),
                tier=Tier(draw(st.integers(0, 3))),
                hours=draw(st.floats(0.5, 30.0)),
                accelerators=draw(st.sampled_from([(), ("A100",), ("T4", "L4"), ("H100", "A100")])),
                gpus_per_worker=draw(st.sampled_from([1, 1, 2])),
                workers=(lo, lo * draw(st.sampled_from([1, 2, 4]))),
                deadline_hours=draw(st.none() | st.floats(1.0, 100.0)),
                budget_usd=draw(st.sampled_from([None, None, None]) | st.floats(5.0, 800.0)),
                spot=draw(st.booleans()),
                depends_on=deps,
                incremental_hours=draw(st.none() | st.floats(0.1, 0.4)),
                submitted_hours_ago=draw(st.floats(0.0, 30.0)),
                seq=i,
                state=draw(st.sampled_from(states)),
                data=draw(st.none() | st.just(("aws/us-east-1", 200.0))),
            )
        )
    # incremental work must be below full work: scale the drawn fraction
    return [
        j
        if j.incremental_reference_hours is None
        else dataclasses.replace(
            j,
            incremental_reference_hours=j.incremental_reference_hours
            * (j.work.reference_hours or 1.0),
        )
        for j in out
    ]


@st.composite
def snapshots(draw: st.DrawFn, limited: bool = False) -> Snapshot:
    limits = {"a": draw(st.integers(50, 3000)), "b": draw(st.integers(50, 3000))}
    budgets = [
        make_budget("a", team="a", limit=str(limits["a"])),
        make_budget("b", team="b", limit=str(limits["b"]), reserve=str(draw(st.integers(0, 200)))),
        make_budget("org", team=None, limit=str(draw(st.integers(100, 8000)))),
    ]
    spend = [spent(t, str(draw(st.integers(0, limits[t])) * 3 // 4)) for t in ("a", "b")]
    return make_snapshot(draw(jobs()), draw(offerings(limited)), budgets, spend)


@st.composite
def contended_snapshots(draw: st.DrawFn) -> Snapshot:
    """Several jobs competing for a few small offerings, with a dear unlimited one beside."""
    offers = [
        make_offering(
            f"small{i}",
            price=draw(st.floats(0.5, 5.0)),
            accelerator=draw(st.sampled_from(["A100", "H100"])),
            max_instances=draw(st.integers(1, 2)),
        )
        for i in range(3)
    ]
    offers.append(make_offering("dear", price=draw(st.floats(5.0, 40.0))))
    team_jobs = [
        make_job(
            f"j{i}",
            team=draw(st.sampled_from(["a", "b"])),
            tier=Tier(draw(st.integers(0, 3))),
            hours=draw(st.floats(0.5, 40.0)),
            workers=(1, draw(st.sampled_from([1, 2]))),
            deadline_hours=draw(st.none() | st.floats(2.0, 80.0)),
            seq=i,
        )
        for i in range(draw(st.integers(2, 9)))
    ]
    budgets = [make_budget("a", team="a", limit=str(draw(st.integers(200, 3000))))]
    return make_snapshot(team_jobs, offers, budgets, [spent("a", str(draw(st.integers(0, 150))))])


#: the default policy's rate for a dataset to reach a fresh instance (5 Gbit/s)
DOWNLOAD_GB_PER_HOUR = 2250.0


def cheapest_feasible(
    job: Job, snap: Snapshot, hours: float, deadline: datetime | None = None
) -> float:
    """Independent scalar recomputation of the cheapest placement that meets deadline (the
    job's unless given) and cap."""
    throughput = dict(snap.throughput)
    deadline = deadline or job.deadline
    horizon = (deadline - NOW).total_seconds() / 3600 if deadline else math.inf
    cap = job.budget_usd if job.budget_usd is not None else math.inf
    c, r = job.checkpoint_interval_seconds / 3600, job.restart_overhead_seconds / 3600
    k = job.resources.gpus_per_worker
    workers = {job.resources.min_workers, job.resources.max_workers}
    workers |= {
        2**e for e in range(12) if job.resources.min_workers < 2**e < job.resources.max_workers
    }
    best = math.inf
    for o in snap.offerings:
        fams = job.resources.accelerators
        if (
            o.accelerators_per_instance < k
            or (o.market is Market.SPOT and not job.spot.allowed)
            or (
                fams
                and not any(o.accelerator == f or o.accelerator.startswith(f + "-") for f in fams)
            )
            or o.gpu_memory_gib < job.resources.min_gpu_memory_gib
        ):
            continue
        per = o.accelerators_per_instance // k
        for w in workers:
            n = -(-w // per)
            eff = 0.97 ** math.log2(min(w, per) * k) * 0.9 ** math.log2(n)
            base = hours / (throughput[o.accelerator] * w * k * eff)
            lam = o.interruption_per_hour * n
            inflation = 1 + lam * (c / 2 + r)
            runtime = base * inflation
            std = math.sqrt(lam * base * (c * c / 3 + c * r + r * r))
            download = job.data.size_gb / DOWNLOAD_GB_PER_HOUR if job.data else 0.0
            start = o.startup_seconds / 3600 + download  # the data reaches a fresh instance
            egress = (
                snap.egress.cost_usd(job.data.location, o.venue, job.data.size_gb)
                if job.data
                else 0.0
            )
            cost = o.usd_per_hour * n * (runtime + start) + egress
            if inflation <= 1.5 and start + runtime + std <= horizon and cost <= cap:
                best = min(best, cost)
    return best


def _costs(plan: Plan) -> dict[str, float]:
    return {a.job_id: a.placement.expected_cost_usd for a in plan.admissions}


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(snapshots())
def test_admitted_jobs_get_the_cheapest_plan_that_meets_deadline_and_cap(snap: Snapshot) -> None:
    plan = plan_cycle(snap)
    jobs_by_id = {j.id: j for j in snap.jobs}
    for a in plan.admissions:
        job = jobs_by_id[a.job_id]
        hours = (
            job.work.reference_hours
            if a.placement.variant.value == "full"
            else job.incremental_reference_hours
        )
        assert hours is not None
        if a.late is not None:
            # planned late only when no plan of either variant meets the deadline; then the
            # cheapest that meets the fresh one
            assert a.due is not None
            for h in (job.work.reference_hours, job.incremental_reference_hours):
                assert h is None or cheapest_feasible(job, snap, h) == math.inf
        expected = cheapest_feasible(job, snap, hours, a.due)
        assert math.isclose(a.placement.expected_cost_usd, expected, rel_tol=1e-9), a.job_id


@SETTINGS
@given(snapshots())
def test_projected_spend_never_passes_a_tier_threshold(snap: Snapshot) -> None:
    plan = plan_cycle(snap)
    tallies = budget_tallies(snap)
    for budget in snap.budgets:
        base = tallies[budget.id].base_usd
        mine = [a for a in plan.admissions if budget.id in a.budget_ids]
        for tier in {a.tier for a in mine}:
            total = base + sum(a.placement.expected_cost_usd for a in mine if a.tier <= tier)
            assert total <= float(budget.allowance_usd(tier)) + 1e-6


@SETTINGS
@given(snapshots())
def test_never_held_for_budget_while_a_cheaper_plan_fits(snap: Snapshot) -> None:
    plan = plan_cycle(snap)
    jobs_by_id = {j.id: j for j in snap.jobs}
    tallies = budget_tallies(snap)
    costs = _costs(plan)
    position = {job_id: i for i, job_id in enumerate(plan.order)}
    for hold in plan.holds:
        if hold.reason is not HoldReason.BUDGET:
            continue
        job = jobs_by_id[hold.job_id]
        options = [job.work.reference_hours, job.incremental_reference_hours]
        cheapest = min(cheapest_feasible(job, snap, h) for h in options if h is not None)
        before = [j for j in plan.order[: position[job.id]] if j in costs]
        rooms = []
        for budget in snap.budgets:
            if not budget.covers(job):
                continue
            used = sum(costs[j] for j in before if budget.covers(jobs_by_id[j]))
            rooms.append(float(budget.allowance_usd(job.tier)) - tallies[budget.id].base_usd - used)
        assert any(cheapest > room - 1e-6 for room in rooms), hold


@SETTINGS
@given(snapshots(limited=True))
def test_never_admits_before_dependencies_are_satisfied(snap: Snapshot) -> None:
    states = {j.id: j.state for j in snap.jobs}
    jobs_by_id = {j.id: j for j in snap.jobs}
    for a in plan_cycle(snap).admissions:
        for dep in jobs_by_id[a.job_id].depends_on:
            upstream = states[dep.job]
            assert upstream.is_terminal
            if dep.on.value == "success":
                assert upstream in {JobState.SUCCEEDED, JobState.STOPPED_EARLY}
            if dep.on.value == "failure":
                assert upstream is JobState.FAILED


@SETTINGS
@given(snapshots(limited=True))
def test_planning_is_deterministic_and_leaves_the_snapshot_untouched(snap: Snapshot) -> None:
    before = copy.deepcopy(snap)
    first = plan_cycle(snap)
    assert snap == before
    assert plan_cycle(before) == first


@SETTINGS
@given(snapshots(limited=True) | contended_snapshots())
def test_capacity_is_never_exceeded(snap: Snapshot) -> None:
    plan = plan_cycle(snap)
    for o in snap.offerings:
        if o.max_instances is not None:
            used = sum(
                a.placement.instances for a in plan.admissions if a.placement.offering_id == o.id
            )
            assert used <= o.max_instances


def _lexicographically_at_most(a: Sequence[float], b: Sequence[float]) -> bool:
    for x, y in zip(a, b, strict=True):
        if x < y - 1e-6:
            return True
        if x > y + 1e-6:
            return False
    return True


@SETTINGS
@given(snapshots(limited=True) | contended_snapshots())
def test_milp_choice_is_never_worse_than_greedy(snap: Snapshot) -> None:
    policy = Policy()
    pending = [j for j in snap.jobs if j.state.is_pending]
    ready = readiness(pending, {j.id: j.state for j in snap.jobs}).ready
    cands = nominate(snap, ready, policy)
    ordered = order_queue(snap, ready, cands, policy)
    tallies = budget_tallies(snap)
    admitted = admit(ordered.jobs, cands, tallies).admitted
    results = {}
    for solver in (SolverChoice.MILP, SolverChoice.GREEDY):
        choices, _ = place(
            admitted, snap.offerings, {}, budget_tallies(snap), Policy(solver=solver)
        )
        results[solver] = objective(admitted, choices, penalties(admitted))
    assert _lexicographically_at_most(results[SolverChoice.MILP], results[SolverChoice.GREEDY])


def test_reference_agrees_with_a_hand_computed_case() -> None:
    job = make_job(hours=10)
    snap = make_snapshot([job], [make_offering(price=4.0, startup_seconds=360)])
    assert cheapest_feasible(job, snap, 10) == 40.4


@SETTINGS
@given(
    snapshots(),
    st.floats(0.0, 48.0),
    st.lists(st.tuples(st.integers(0, 50), st.floats(0.0, 30.0)), max_size=3),
)
def test_fronts_cut_from_the_memo_equal_fronts_priced_afresh(
    snap: Snapshot, hours: float, waits: list[tuple[int, float]]
) -> None:
    # later, some offerings may have no room until a given time (capacity_back): the memo is
    # used for the jobs those waits cannot change, and must agree with pricing afresh
    policy = Policy()
    ready = [j for j in snap.jobs if j.state.is_pending]
    cache = FrontCache()
    nominate(snap, ready, policy, cache)  # fills the memo of timeless fronts
    now = snap.now + timedelta(hours=hours)
    back = {snap.offerings[i % len(snap.offerings)].id: now + timedelta(hours=w) for i, w in waits}
    later = dataclasses.replace(snap, now=now, capacity_back=tuple(sorted(back.items())))
    cut = nominate(later, ready, policy, cache)  # the same offerings: cut from the memo

    def direct(snapshot, jobs, _shape, configs, throughput, pol, variant, due, _cache):  # type: ignore[no-untyped-def]
        wait = fronts_module.waits(snapshot, configs)
        return fronts_module.direct_fronts(
            snapshot, jobs, configs, throughput, pol, variant, due, wait
        )

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(candidates_module, "priced_fronts", direct)
        fresh = nominate(later, ready, policy)
    assert cut.keys() == fresh.keys()
    for job_id, c in cut.items():
        f = fresh[job_id]
        assert (c.infeasible, c.late, c.due) == (f.infeasible, f.late, f.due)
        for a, b in ((c.full, f.full), (c.incremental, f.incremental)):
            assert (a is None) == (b is None)
            if a is None or b is None:
                continue
            n = a.size
            assert n == b.size
            for x, y in (
                (a.config, b.config),
                (a.cost_usd, b.cost_usd),
                (a.finish_hours, b.finish_hours),
                (a.runtime_std_hours, b.runtime_std_hours),
            ):
                assert x[:n].tolist() == y[:n].tolist()
