"""Replay semantics on tiny hand-computed traces, and the omniscient optimum against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from budgeteer.core.spot import Market, Mode, SpotJob, optimal_decisions, replay, run_policy
from budgeteer.core.spot.estimate import Availability, estimate
from budgeteer.core.spot.mdp import solve
from budgeteer.core.spot.replay import Observation, PolicyError, ReplayDecisions

I, S, O = Mode.IDLE, Mode.SPOT, Mode.ON_DEMAND  # noqa: E741 - short names keep tables legible


def market(avail: list[int], prices: list[float] | None = None, gap_hours: float = 1.0) -> Market:
    series = prices if prices is not None else [1.0] * len(avail)
    return Market(np.array(avail) >= 1, np.array(series, dtype=float), gap_hours)


class Always:
    def __init__(self, mode: Mode) -> None:
        self.mode = mode

    def decide(self, obs: Observation) -> Mode:
        return self.mode


class SpotWhenUp:
    def decide(self, obs: Observation) -> Mode:
        return S if obs.spot_available else I


def test_on_demand_pays_the_changeover_then_the_work() -> None:
    job = SpotJob(work_hours=3, deadline_hours=5, changeover_hours=1, on_demand_usd_per_hour=3)
    r = replay(market([0] * 10), 0, job, Always(O))
    assert r.cost_usd == pytest.approx(12.0)  # (1 changeover + 3 work) × $3
    assert r.finished_hours == pytest.approx(4.0)
    assert r.met_deadline
    assert r.decisions == ((0, O),)


def test_spot_is_billed_at_the_price_of_each_tick() -> None:
    job = SpotJob(3, 10, 1, 3)
    r = replay(market([1] * 6, [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]), 0, job, Always(S))
    assert r.cost_usd == pytest.approx(0.5 + 1.0 + 2.0 + 4.0)
    assert r.spot_hours == pytest.approx(4.0)


def test_lost_instance_keeps_progress_and_pays_a_new_changeover() -> None:
    # tick 0: changeover; 1: work (1 h done); 2: lost → idle; 3: changeover; 4, 5: work → done
    job = SpotJob(3, 10, 1, 3)
    r = replay(market([1, 1, 0, 1, 1, 1, 1]), 0, job, SpotWhenUp())
    assert r.finished_hours == pytest.approx(6.0)
    assert r.cost_usd == pytest.approx(5.0)
    assert r.preemptions == 1
    assert r.decisions == ((0, S), (2, I), (3, S))


def test_the_completing_tick_is_billed_pro_rata() -> None:
    job = SpotJob(2.5, 10, 1, 2)
    r = replay(market([0] * 6), 0, job, Always(O))
    assert r.finished_hours == pytest.approx(3.5)
    assert r.cost_usd == pytest.approx(7.0)


def test_a_fractional_changeover_lets_work_start_mid_tick() -> None:
    job = SpotJob(1.0, 10, 0.5, 2)
    r = replay(market([0] * 4), 0, job, Always(O))
    assert r.finished_hours == pytest.approx(1.5)
    assert r.cost_usd == pytest.approx(3.0)


def test_idle_costs_nothing_and_the_deadline_is_checked_at_completion() -> None:
    class WaitThenOnDemand:
        def decide(self, obs: Observation) -> Mode:
            return I if obs.tick < 2 else O

    job = SpotJob(2, 5, 1, 3)
    r = replay(market([0] * 8), 0, job, WaitThenOnDemand())
    assert r.cost_usd == pytest.approx(9.0)
    assert r.finished_hours == pytest.approx(5.0)
    assert r.met_deadline
    late = replay(market([0] * 8), 0, SpotJob(2, 4.99, 1, 3), WaitThenOnDemand())
    assert not late.met_deadline


def test_choosing_spot_on_an_unavailable_tick_is_an_error() -> None:
    with pytest.raises(PolicyError, match="tick 1"):
        replay(market([1, 0, 1]), 0, SpotJob(3, 9, 1, 3), Always(S))


def test_spot_is_unavailable_after_the_trace_ends() -> None:
    job = SpotJob(5, 20, 1, 3)
    r = replay(market([1, 1, 1]), 0, job, SpotWhenUp())
    assert r.finished_hours is None  # waits forever: nobody goes on-demand
    assert not r.met_deadline


def test_replaying_decisions_reproduces_a_run() -> None:
    job = SpotJob(3, 10, 1, 3)
    m = market([1, 1, 0, 1, 1, 1, 1])
    first = replay(m, 0, job, SpotWhenUp())
    again = replay(m, 0, job, ReplayDecisions(first.decisions))
    assert again == first


def _brute_force(m: Market, job: SpotJob, ticks: int) -> float:
    best = float("inf")
    for modes in itertools.product((I, S, O), repeat=ticks):
        avail = m.available
        if any(mode is S and not (t < len(avail) and avail[t]) for t, mode in enumerate(modes)):
            continue
        sched = (*((t, mode) for t, mode in enumerate(modes)), (ticks, O))
        r = replay(m, 0, job, ReplayDecisions(sched))
        if r.met_deadline:
            best = min(best, r.cost_usd)
    return best


@pytest.mark.parametrize(
    ("avail", "prices", "job"),
    [
        ([1, 1, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1], SpotJob(3, 7, 1, 3)),
        ([0, 1, 1, 1, 0, 0, 1, 1], [1, 2, 2, 2, 1, 1, 1, 1], SpotJob(3, 7, 1, 3)),
        ([1, 0, 1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1], SpotJob(2.5, 6, 1, 3)),
        ([0, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5], SpotJob(3, 8, 1, 2)),
        ([1, 1, 1, 1, 1, 1, 1, 1], [3, 3, 3, 3, 3, 3, 3, 3], SpotJob(4, 6, 1, 2)),
    ],
)
def test_optimal_matches_brute_force(avail: list[int], prices: list[float], job: SpotJob) -> None:
    m = market(avail, prices)
    cost, decisions = optimal_decisions(m, 0, job)
    assert cost == pytest.approx(_brute_force(m, job, len(avail)))
    r = replay(m, 0, job, ReplayDecisions(decisions))
    assert r.met_deadline
    assert r.cost_usd == pytest.approx(cost)


def test_run_policy_names_and_history_cut() -> None:
    m = market([1] * 40, gap_hours=0.25)
    job = SpotJob(2, 4, 0.25, 3)
    results = {
        n: run_policy(m, 5, job, n)
        for n in ("default", "greedy", "uniform-progress", "on-demand", "optimal")
    }
    assert all(r.met_deadline for r in results.values())
    assert results["optimal"].cost_usd == pytest.approx(2.25)  # one changeover + 2 h on spot
    assert results["on-demand"].cost_usd == pytest.approx(6.75)


def test_the_solve_refuses_a_chain_whose_states_are_interleaved() -> None:
    """The MDP reads the up and the down states as two blocks (as the estimate lays them out);
    a chain laid out otherwise is refused with a message, not solved on copies that drop its
    writes."""
    chain = estimate([], 0.05, 0.2)
    order = np.array([0, 4, 1, 5, 2, 6, 3, 7])  # up, down, up, down …
    shuffled = Availability(
        chain.transition[np.ix_(order, order)], chain.up[order], chain.bucket_steps
    )
    with pytest.raises(ValueError, match="availability: the up states and the down states"):
        solve(10.0, 4, 1, 1.0, 3.0, shuffled, 1)
    table = solve(10.0, 4, 1, 1.0, 3.0, chain, 1)  # laid out as estimated: solved
    assert table.actions.shape == (15, 3, 8, 5)
