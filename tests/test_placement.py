"""Placement: cheapest on time, faster only when the deadline needs it, joint under capacity."""

from __future__ import annotations

import dataclasses

import pytest

from budgeteer.core import Allocation, HoldReason, Policy, SolverChoice, plan_cycle
from budgeteer.domain.job import JobState
from budgeteer.domain.offering import Market
from builders import make_budget, make_job, make_offering, make_snapshot, spent

SLOW_CHEAP = make_offering("t4", accelerator="T4", price=0.5)  # rel 0.25 → $2 per ref-hour
FAST_DEAR = make_offering("h100", accelerator="H100", price=9.0)  # rel 3.0 → $3 per ref-hour


@pytest.mark.parametrize(
    ("deadline_hours", "expected"),
    [(None, "t4"), (100, "t4"), (40, "t4"), (39, "h100"), (4, "h100")],
)
def test_faster_dearer_offering_only_when_the_deadline_needs_it(
    deadline_hours: float | None, expected: str
) -> None:
    job = make_job(hours=10, deadline_hours=deadline_hours)  # T4: 40 h, H100: 3.3 h
    plan = plan_cycle(make_snapshot([job], [SLOW_CHEAP, FAST_DEAR]))
    assert plan.admissions[0].placement.offering_id == expected


def test_infeasible_deadline_is_explained_with_numbers() -> None:
    job = make_job(hours=30, deadline_hours=4)
    plan = plan_cycle(make_snapshot([job], [SLOW_CHEAP, FAST_DEAR]), Policy(run_late_jobs=False))
    hold = plan.holds[0]
    assert hold.reason is HoldReason.INFEASIBLE
    assert hold.message == (
        "fastest option 1×h100.type (1×H100) on_demand aws/us-east-1 finishes in 10.0 h; "
        "deadline in 4.0 h"
    )


def test_more_workers_are_used_only_to_meet_a_deadline() -> None:
    offer = make_offering("a100x1", price=4.0)
    loose = make_job("loose", hours=8, workers=(1, 4), deadline_hours=24, seq=0)
    tight = make_job("tight", hours=8, workers=(1, 4), deadline_hours=3, seq=1)
    plan = plan_cycle(make_snapshot([loose, tight], [offer]))
    assert plan.admission("loose").placement.workers == 1
    assert plan.admission("tight").placement.workers == 4


def test_no_matching_offering_is_explained() -> None:
    job = make_job(accelerators=("H100",), min_gpu_memory_gib=100)
    plan = plan_cycle(make_snapshot([job], [FAST_DEAR]))
    assert plan.holds[0].message.startswith("no offering matches: H100, ≥100 GiB per GPU")


def test_spot_not_allowed_uses_on_demand() -> None:
    spot = make_offering("spot", price=0.1, market=Market.SPOT, interruption_per_hour=0.1)
    plan = plan_cycle(make_snapshot([make_job(spot=False)], [spot, make_offering(price=4)]))
    assert plan.admissions[0].placement.market is Market.ON_DEMAND


def test_a_job_is_planned_without_the_spot_offerings_it_avoids_and_only_those() -> None:
    """``SpotSettings.avoid`` (set by the loop when the spot decider will not let a job wait
    for a dry market) takes those spot offerings off the job's plan, not spot as a whole nor
    other jobs' plans; with every matching offering avoided the hold says so."""
    cheap = make_offering("spot-a", price=0.1, market=Market.SPOT, interruption_per_hour=0.01)
    dearer = make_offering("spot-b", price=0.2, market=Market.SPOT, interruption_per_hour=0.01)
    od = make_offering("od", price=4.0)
    avoiding = make_job("avoiding", seq=0)
    avoiding = dataclasses.replace(
        avoiding, spot=dataclasses.replace(avoiding.spot, avoid=frozenset({"spot-a"}))
    )
    plan = plan_cycle(make_snapshot([avoiding, make_job("other", seq=1)], [cheap, dearer, od]))
    assert plan.admission("avoiding").placement.offering_id == "spot-b"
    assert plan.admission("other").placement.offering_id == "spot-a"
    both = dataclasses.replace(
        avoiding, spot=dataclasses.replace(avoiding.spot, avoid=frozenset({"spot-a", "spot-b"}))
    )
    assert plan_cycle(make_snapshot([both], [cheap, dearer, od])).admissions[0].placement == (
        plan_cycle(make_snapshot([make_job(spot=False)], [cheap, dearer, od]))
        .admissions[0]
        .placement
    )
    held = plan_cycle(make_snapshot([both], [cheap, dearer]))
    assert held.holds[0].message.endswith("(not on 2 spot offering(s) in a drought)")


def test_too_unreliable_spot_is_not_considered() -> None:
    spot = make_offering("spot", price=0.1, market=Market.SPOT, interruption_per_hour=3.0)
    plan = plan_cycle(make_snapshot([make_job()], [spot, make_offering(price=4)]))
    assert plan.admissions[0].placement.market is Market.ON_DEMAND


def test_capacity_makes_the_second_job_wait_or_move() -> None:
    scarce = make_offering("scarce", price=1.0, max_instances=1)
    jobs = [make_job("first", seq=0), make_job("second", seq=1)]
    plan = plan_cycle(make_snapshot(jobs, [scarce]))
    assert plan.admission("first") is not None
    hold = plan.hold("second")
    assert hold is not None
    assert hold.reason is HoldReason.CAPACITY


def test_instances_in_use_reduce_capacity() -> None:
    scarce = make_offering("scarce", price=1.0, max_instances=2)
    jobs = [make_job("busy", state=JobState.RUNNING), make_job("new", workers=(2, 2))]
    snap = make_snapshot(jobs, [scarce], running=[Allocation("busy", "scarce", 1, 5.0)])
    assert plan_cycle(snap).hold("new") is not None


def _contended_snapshot() -> tuple[object, ...]:
    # One cheap offering with room for one instance; an unlimited dear one.
    # "first" barely gains from the cheap one (short job), "second" gains a lot.
    cheap = make_offering("cheap", price=1.0, max_instances=1)
    dear = make_offering("dear", price=3.0)
    jobs = [make_job("first", hours=1, seq=0), make_job("second", hours=100, seq=1)]
    return (make_snapshot(jobs, [cheap, dear]),)


def test_milp_beats_greedy_under_capacity_contention() -> None:
    (snap,) = _contended_snapshot()
    greedy = plan_cycle(snap, Policy(solver=SolverChoice.GREEDY))  # type: ignore[arg-type]
    milp = plan_cycle(snap, Policy(solver=SolverChoice.AUTO))  # type: ignore[arg-type]
    assert greedy.admission("first").placement.offering_id == "cheap"
    assert milp.admission("first").placement.offering_id == "dear"
    assert milp.admission("second").placement.offering_id == "cheap"
    cost = {
        p.solver.method: sum(a.placement.expected_cost_usd for a in p.admissions)
        for p in (greedy, milp)
    }
    assert cost == {"greedy": pytest.approx(301.0), "milp": pytest.approx(103.0)}


def test_milp_respects_budget_rows_when_moving_jobs() -> None:
    # Moving "first" to the dear offering would cost $3 instead of $1: fine within budget.
    # With a budget that leaves no room for that, the MILP must not move it.
    cheap = make_offering("cheap", price=1.0, max_instances=1)
    dear = make_offering("dear", price=3.0)
    jobs = [make_job("first", hours=1, seq=0), make_job("second", hours=100, seq=1)]
    # P2 allowance 800: spent 500 + reserved (1 + 100) = 601; moving both: 3 + 100 → 603 fits.
    snap = make_snapshot(jobs, [cheap, dear], [make_budget()], [spent("growth", "500")])
    plan = plan_cycle(snap)
    assert plan.admission("second").placement.offering_id == "cheap"
    # Spent 698.5: admission reserves 1 + 100 → 799.5 ≤ 800, but moving "first" to dear (+2)
    # or "second" to dear (+200) would pass the P2 allowance: "second" waits for capacity.
    snap = make_snapshot(jobs, [cheap, dear], [make_budget()], [spent("growth", "698.5")])
    plan = plan_cycle(snap)
    assert plan.admission("first").placement.offering_id == "cheap"
    assert plan.hold("second").reason is HoldReason.CAPACITY
    assert float(plan.budgets[0].projected_usd) <= 800.0


@pytest.mark.parametrize(
    ("solver", "method", "optimal"),
    [(SolverChoice.AUTO, "exact", True), (SolverChoice.GREEDY, "greedy", False)],
)
def test_a_cycle_with_nothing_to_place_reports_as_the_passes_would(
    solver: SolverChoice, method: str, optimal: bool
) -> None:
    # everything is held: the placement step has no job, and says so as it would with jobs
    snap = make_snapshot(
        [make_job("a", hours=50)], budgets=[make_budget(limit="10")], spend=[spent("growth", "9")]
    )
    plan = plan_cycle(snap, Policy(solver=solver))
    assert not plan.admissions
    assert plan.solver.jobs == 0
    assert plan.solver.method == method
    assert plan.solver.optimal is optimal
    assert plan.solver.objective == plan.solver.greedy_objective == 0.0
