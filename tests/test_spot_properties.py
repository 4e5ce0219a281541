"""Invariants of the spot policies on random small traces (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeteer.core.spot import Market, SpotJob, replay, run_policy
from budgeteer.core.spot.replay import ReplayDecisions

ONLINE = ("default", "greedy", "uniform-progress", "on-demand")


@st.composite
def cases(draw: st.DrawFn) -> tuple[Market, SpotJob, int]:
    n = draw(st.integers(40, 160))
    # availability in runs, so there are windows and outages of several lengths
    avail: list[int] = []
    while len(avail) < n:
        avail += [draw(st.integers(0, 1))] * draw(st.integers(1, 12))
    prices = [draw(st.floats(0.2, 2.5)) for _ in range(n)]
    gap = 0.25
    d_ticks = draw(st.integers(1, 3))
    work = draw(st.floats(1.0, 8.0))
    start = draw(st.integers(0, 20))
    room = (n - start) * gap - work
    extra = draw(st.floats(0.0, max(0.0, min(room, 3 * work))))
    deadline = work + d_ticks * gap + extra  # on-demand from the start always meets it
    job = SpotJob(work, deadline, d_ticks * gap, draw(st.floats(1.0, 4.0)))
    return Market(np.array(avail[:n]) >= 1, np.array(prices), gap), job, start


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_online_policies_never_miss_a_deadline_on_demand_could_meet(
    case: tuple[Market, SpotJob, int],
) -> None:
    market, job, start = case
    for name in ONLINE:
        assert run_policy(market, start, job, name).met_deadline, name


@SETTINGS
@given(cases())
def test_optimal_is_never_beaten(case: tuple[Market, SpotJob, int]) -> None:
    market, job, start = case
    best = run_policy(market, start, job, "optimal")
    assert best.met_deadline
    for name in ONLINE:
        r = run_policy(market, start, job, name)
        assert best.cost_usd <= r.cost_usd + 1e-6, name


@SETTINGS
@given(cases())
def test_decisions_never_pick_unavailable_spot_and_replay_reproduces_cost(
    case: tuple[Market, SpotJob, int],
) -> None:
    market, job, start = case
    for name in (*ONLINE, "optimal"):
        r = run_policy(market, start, job, name)
        modes = dict(r.decisions)
        mode = None
        end = start + int(np.ceil((r.finished_hours or 0) / market.gap_hours)) + 1
        for tick in range(start, min(end, len(market))):
            mode = modes.get(tick, mode)
            if mode is not None and mode.value == "spot" and tick in modes:
                assert market.available[tick], (name, tick)
        again = replay(market, start, job, ReplayDecisions(r.decisions))
        assert again.cost_usd == r.cost_usd
        assert again.finished_hours == r.finished_hours
