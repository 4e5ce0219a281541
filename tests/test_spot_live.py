"""The one spot decider: its safety net as properties, the replay and the service asking it the
same question, the market estimate learned online (convergence, a restart), and the live moves
(bridge to on-demand, back to spot, latched jobs left alone)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeteer.core import Policy
from budgeteer.core.progress import Sample, Trend
from budgeteer.core.spot import Market as ReplayMarket
from budgeteer.core.spot import Mode, SpotJob, replay
from budgeteer.core.spot.decide import (
    Decision,
    Default,
    ReplayDecider,
    Situation,
    TableMemo,
    decide,
    last_uptime_ticks,
)
from budgeteer.core.spot.estimate import (
    BUCKET_EDGES,
    HISTORY_DAYS,
    MAX_PERIODS,
    MarketHistory,
    Period,
    estimate,
    estimate_availability,
    periods_of,
)
from budgeteer.domain.job import JobState
from budgeteer.domain.offering import Market
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.scheduler.markets import MarketBook
from budgeteer.scheduler.snapshots import with_history
from budgeteer.scheduler.spot_live import LiveSpot, changeover_hours, measured_changeover_seconds
from budgeteer.store import MemoryStore
from budgeteer.store.base import Attempt
from builders import NOW, make_job, make_offering

D = 0.2  # changeover, hours


def _situation(**kw: object) -> Situation:
    base: dict[str, object] = {
        "work_hours": 4.0,
        "deadline_hours": 6.0,
        "changeover_hours": D,
        "spot_usd_per_hour": 1.0,
        "on_demand_usd_per_hour": 3.0,
        "elapsed_hours": 0.0,
        "done_hours": 0.0,
        "mode": Mode.IDLE,
        "changeover_left_hours": 0.0,
        "spot_up": False,
        "spot_age_hours": 0.1,
        "tick_hours": 0.05,
    }
    base.update(kw)
    return Situation(**base)  # type: ignore[arg-type]


PRIOR = estimate((), 0.05, D)


@settings(max_examples=150, deadline=None)
@given(
    elapsed=st.floats(0.0, 5.9),
    done=st.floats(0.0, 3.9),
    mode=st.sampled_from(list(Mode)),
    up=st.booleans(),
    age=st.floats(0.0, 5.0),
)
def test_the_safety_net_holds_for_any_situation(
    elapsed: float, done: float, mode: Mode, up: bool, age: float
) -> None:
    done = min(done, elapsed)  # progress never runs ahead of the clock
    s = _situation(
        elapsed_hours=elapsed, done_hours=done, mode=mode, spot_up=up, spot_age_hours=age
    )
    got = decide(s, PRIOR, TableMemo())
    if not up:
        assert got.mode is not Mode.SPOT  # never on spot while there is none
    if s.slack_hours < D + s.tick_hours - 1e-9:
        assert got.mode is not Mode.IDLE  # never waits away the last of the slack
    if mode is not Mode.SPOT and s.slack_hours < 2 * D - 1e-9:
        assert got.mode is not Mode.SPOT  # never starts a spot changeover it cannot afford
    assert got.reason  # explained


def test_waits_when_slack_is_ample_and_takes_on_demand_when_it_is_not() -> None:
    memo = TableMemo()
    wait = decide(_situation(), PRIOR, memo)
    assert wait.mode is Mode.IDLE
    assert "wait for spot" in wait.reason
    tight = decide(_situation(elapsed_hours=1.8, done_hours=0.0), PRIOR, memo)
    assert tight.mode is Mode.ON_DEMAND
    assert "on-demand" in tight.reason
    assert memo.solves == 1  # one epoch, one table


def _trace(seed: int, n: int = 400) -> ReplayMarket:
    rng = np.random.default_rng(seed)
    avail = np.ones(n, dtype=bool)
    i = 0
    while i < n:
        i += int(rng.integers(10, 60))
        avail[i : i + int(rng.integers(1, 12))] = False
        i += 12
    return ReplayMarket(avail, np.full(n, 1.0), 0.05)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_and_service_ask_the_same_function_and_get_the_same_answer(seed: int) -> None:
    market = _trace(seed)
    job = SpotJob(work_hours=6.0, deadline_hours=8.0, changeover_hours=D, on_demand_usd_per_hour=3)
    start = 150
    decider = Default().prepare(job, market.until(start))
    assert isinstance(decider, ReplayDecider)
    asked: list[tuple[Mode, Mode]] = []

    class Recording:
        def decide(self, obs):  # type: ignore[no-untyped-def]
            mode = decider.decide(obs)
            # the service's side: the same situation, a fresh memo, the same estimate
            again = decide(decider.situation(obs), decider.availability, TableMemo())
            asked.append((mode, again.mode))
            return mode

    result = replay(market, start, job, Recording())
    assert asked
    assert all(a == b for a, b in asked)
    assert result.met_deadline
    modes = {m for m, _ in asked}
    assert Mode.SPOT in modes  # the trace exercises the decider, not just one answer


def test_the_estimate_from_a_trace_and_from_its_periods_agree() -> None:
    market = _trace(7)
    a = estimate_availability(market.available, 0.05, 1, D)
    b = estimate(periods_of(market.available, 0.05), 0.05, D)
    np.testing.assert_allclose(a.transition, b.transition)


def test_the_online_estimate_converges_to_the_market_it_watches() -> None:
    """Outages of exponential length with mean 0.5 h (hazard 2/h at every age), uptimes of mean
    4 h (0.25/h), 600 of each: the estimate reads the last four weeks (about 150 of each) and
    its hazards are within 20% of the truth in the buckets the data covers best (the first down
    bucket, the last up bucket) — over seeds 0–9 the error at this much data is at most 30%;
    the history keeps the last MAX_PERIODS periods."""
    rng = np.random.default_rng(0)
    history = MarketHistory("spot-a")
    t = NOW
    for _ in range(600):
        history = history.observe(True, t)
        t += timedelta(hours=float(rng.exponential(4.0)))
        history = history.observe(False, t)
        t += timedelta(hours=float(rng.exponential(0.5)))
    step = 0.05
    chain = history.estimate(t, step, D)
    nb = len(BUCKET_EDGES)
    down_hazard_per_hour = chain.transition[nb, 0] / step  # first down bucket → up
    up_hazard_per_hour = chain.transition[nb - 1, nb] / step  # oldest up bucket → down
    assert down_hazard_per_hour == pytest.approx(2.0, rel=0.2)
    assert up_hazard_per_hour == pytest.approx(0.25, rel=0.2)
    prior = MarketHistory("spot-b").estimate(t, step, D)  # nothing seen: the prior (0.3/h)
    assert prior.transition[nb - 1, nb] / step == pytest.approx(0.3, rel=0.01)
    assert len(history.periods) == MAX_PERIODS  # every flip closed a period; the oldest dropped
    assert 250 <= len(history.periods_until(t)) <= 350  # four weeks of them (4.5 h a cycle)


def _window_one_by_one(history: MarketHistory, now: datetime | None) -> tuple[Period, ...]:
    """The estimate's window written as the loop it stands for: newest first, each period
    taken off the four weeks' budget, the one that does not fit cut to what is left."""
    kept: list[Period] = []
    budget = HISTORY_DAYS * 24.0
    for p in reversed(history.periods):
        if budget <= 0:
            break
        kept.append(p if p.hours <= budget else Period(p.up, budget, False))
        budget -= p.hours
    kept.reverse()
    if now is not None and history.up is not None and history.since is not None:
        kept.append(Period(history.up, history.age_hours(now), False))
    return tuple(kept)


@settings(max_examples=60, deadline=None)
@given(
    sightings=st.integers(0, 1600),
    mean_gap_hours=st.floats(0.01, 10.0),
    seed=st.integers(0, 2**16),
    now_after=st.none() | st.floats(0.0, 5.0),
    step=st.sampled_from([0.05, 1 / 60, 0.3]),
)
def test_a_history_kept_as_columns_estimates_as_its_periods_do(
    sightings: int, mean_gap_hours: float, seed: int, now_after: float | None, step: float
) -> None:
    """The service keeps each offering's periods as columns too (an estimate reads them without
    a pass over 1,000 objects): the window and the chain are the same, to the bit, as those of
    the periods themselves, sighting after sighting and after a restart from the store's
    periods. Histories from none to more than MAX_PERIODS periods, within four weeks or
    running past them; some sightings repeat the state, some come at the same instant."""
    rng = np.random.default_rng(seed)
    history, t, up = MarketHistory("spot-a"), NOW, True
    for _ in range(sightings):
        t += timedelta(hours=float(rng.exponential(mean_gap_hours)) * (rng.random() > 0.05))
        up = up is not bool(rng.random() < 0.9)
        history = history.observe(up, t)
    now = None if now_after is None else t + timedelta(hours=now_after)
    assert history.periods_until(now) == _window_one_by_one(history, now)
    expected = estimate(_window_one_by_one(history, now), step, D)
    assert history.estimate(now, step, D).transition.tobytes() == expected.transition.tobytes()
    stored = MarketHistory(history.offering_id, history.periods, history.up, history.since)
    assert stored.estimate(now, step, D).transition.tobytes() == expected.transition.tobytes()


def test_a_market_book_survives_a_restart_from_the_store() -> None:
    store = MemoryStore()
    spot = make_offering("spot-a", market=Market.SPOT, price=1.0)
    book = MarketBook(store, {spot.id: spot}, feed=None)
    book.observe(spot, True, NOW)
    book.observe(spot, False, NOW + timedelta(hours=3))
    book.observe(spot, False, NOW + timedelta(hours=3, minutes=10))  # same state: no write
    again = MarketBook(store, {spot.id: spot}, feed=None)
    assert again.history(spot.id).periods == (Period(True, 3.0, False),)
    assert again.history(spot.id).up is False
    assert again.history(spot.id).since == NOW + timedelta(hours=3)


def _world(
    policy: Policy | None = None, prices: dict[str, float] | None = None
) -> tuple[LiveSpot, MarketBook, dict[str, object]]:
    spot = dataclasses.replace(
        make_offering("spot-a", market=Market.SPOT, price=1.0), instance_type="p3"
    )
    od = dataclasses.replace(make_offering("od", price=3.0), instance_type="p3")
    offerings = {spot.id: spot, od.id: od}
    book = MarketBook(MemoryStore(), offerings, feed=None)
    price = prices or {"spot-a": 1.0, "od": 3.0}
    live = LiveSpot(book, offerings, policy or Policy(), lambda o, _at: price[o.id])
    return live, book, {"spot": spot, "od": od}


def _attempt(offering_id: str, market: str, started_hours_ago: float = 1.0) -> Attempt:
    return Attempt(
        1, "job", 1, "sim", offering_id, market, (), NOW - timedelta(hours=started_hours_ago)
    )


def _trend(hours_left: float) -> Trend:
    """Progress at 100 steps an hour with ``hours_left`` of work to go."""
    done = 300
    total = done + int(hours_left * 100)
    return Trend.of([Sample(NOW - timedelta(hours=1), 200, total), Sample(NOW, done, total)])


def test_an_on_demand_job_moves_back_to_spot_when_it_is_up_and_the_slack_is_ample() -> None:
    live, book, o = _world()
    book.observe(o["spot"], True, NOW - timedelta(hours=2))  # type: ignore[arg-type]
    job = make_job(deadline_hours=12.0, restart_seconds=300)
    move = live.move(job, _attempt("od", "on_demand"), _trend(4.0), list, NOW)
    assert move is not None
    assert move.outcome is AttemptOutcome.TO_SPOT
    assert "leave on-demand" in move.cause
    assert "spot-a is up" in move.cause


def _flickered(book: MarketBook, spot: object, back_minutes_ago: float) -> None:
    """Down, up for one minute, down again, and up since ``back_minutes_ago``."""
    for up, minutes_ago in ((False, 240), (True, 180), (False, 179), (True, back_minutes_ago)):
        book.observe(spot, up, NOW - timedelta(minutes=minutes_ago))  # type: ignore[arg-type]


def test_an_on_demand_job_waits_out_a_spot_that_follows_a_short_uptime() -> None:
    # two hours of slack: without the hold this job moves back to spot at once
    job = make_job(deadline_hours=6.0, restart_seconds=300)
    od = _attempt("od", "on_demand")
    live, book, o = _world()
    _flickered(book, o["spot"], back_minutes_ago=1)
    assert book.history("spot-a").last_uptime_hours() == pytest.approx(1 / 60)
    assert live.move(job, od, _trend(4.0), list, NOW) is None  # held on on-demand
    live, book, o = _world()
    _flickered(book, o["spot"], back_minutes_ago=120)  # this uptime has lasted two hours
    move = live.move(job, od, _trend(4.0), list, NOW)
    assert move is not None
    assert move.outcome is AttemptOutcome.TO_SPOT


def test_the_flicker_hold_keeps_on_demand_only_while_both_uptimes_are_short() -> None:
    memo = TableMemo()

    def asked(last: float | None, age: float) -> Decision:
        s = _situation(
            mode=Mode.ON_DEMAND,
            spot_up=True,
            spot_age_hours=age,
            last_uptime_hours=last,
            spot_usd_per_hour=0.5,
        )
        return decide(s, PRIOR, memo)

    held = asked(0.1, 0.0)  # the last uptime lasted 6 min, under two changeovers
    assert held.mode is Mode.ON_DEMAND
    assert "flicker hold: spot's last uptime lasted 6 min" in held.reason
    assert asked(0.1, 2 * D).mode is Mode.SPOT  # this uptime has outlasted the hold
    assert asked(2 * D, 0.0).mode is Mode.SPOT  # the last one was not short
    assert asked(None, 0.0).mode is Mode.SPOT  # not known: no hold
    idle = decide(_situation(spot_up=True, spot_age_hours=0.0, last_uptime_hours=0.1), PRIOR, memo)
    assert idle.mode is Mode.SPOT  # only a move back from on-demand is held: a wait ends
    assert "flicker" not in idle.reason


def test_a_waiting_job_takes_spot_once_it_has_been_up_two_changeovers() -> None:
    # a market where young spot dies within minutes and old spot lasts a day: the chain alone
    # waits out a young spot to save a changeover's money, whatever the slack
    periods = [Period(True, 0.1, True), Period(False, 0.1, True)] * 40
    periods += [Period(True, 30.0, True), Period(False, 0.1, True)] * 5
    chain = estimate(periods, 0.05, D)
    memo = TableMemo()

    def asked(age: float, mode: Mode = Mode.IDLE, **kw: object) -> Decision:
        s = _situation(
            work_hours=4.0, deadline_hours=12.0, mode=mode, spot_up=True, spot_age_hours=age
        )
        return decide(dataclasses.replace(s, **kw), chain, memo)  # type: ignore[arg-type]

    young = asked(0.0)
    assert young.mode is Mode.IDLE
    assert "spot proven" not in young.reason
    # two changeovers are 24 min: at 20 min the next tick (3 min) is not there yet
    assert asked(2 * D - 0.05 - 0.01).mode is Mode.IDLE
    proven = asked(2 * D - 0.05)
    assert proven.mode is Mode.SPOT
    assert "spot proven: up 21 min, 24 min or more counting this tick" in proven.reason
    # the safety net first: without two changeovers of slack no spot changeover begins
    short = asked(1.0, elapsed_hours=7.7)
    assert short.slack_hours < 2 * D
    assert short.mode is not Mode.SPOT
    # only a waiting job: one on on-demand is the MDP's (and the flicker hold's) to decide
    assert "spot proven" not in asked(1.0, Mode.ON_DEMAND).reason


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.integers(1, 600), min_size=1, max_size=8), first_up=st.booleans())
def test_the_last_uptime_is_the_same_read_from_a_trace_and_from_its_sightings(
    runs: list[int], first_up: bool
) -> None:
    g = 0.05
    trace = np.concatenate(
        [np.full(n, first_up if i % 2 == 0 else not first_up) for i, n in enumerate(runs)]
    )
    history = MarketHistory("spot-a")
    for i, up in enumerate(trace.tolist()):
        history = history.observe(up, NOW + timedelta(hours=i * g))
    ticks = last_uptime_ticks(trace)
    assert last_uptime_ticks(trace[:0]) is None  # nothing seen yet
    got = history.last_uptime_hours()
    if ticks is None:
        assert got is None
    else:
        assert got == pytest.approx(ticks * g)


def test_no_move_back_while_spot_is_down_latched_or_without_an_eta() -> None:
    live, book, o = _world()
    job = make_job(deadline_hours=12.0)
    od = _attempt("od", "on_demand")
    book.observe(o["spot"], False, NOW - timedelta(hours=1))  # type: ignore[arg-type]
    assert live.move(job, od, _trend(4.0), list, NOW) is None  # spot is down
    book.observe(o["spot"], True, NOW - timedelta(minutes=30))  # type: ignore[arg-type]
    ruled = dataclasses.replace(_attempt("spot-a", "spot"), outcome=AttemptOutcome.TO_ON_DEMAND)
    assert live.move(job, od, _trend(4.0), lambda: [ruled], NOW) is None  # a rule latched it
    sent = dataclasses.replace(_attempt("od", "on_demand"), outcome=AttemptOutcome.TO_SPOT)
    assert live.move(job, od, _trend(4.0), lambda: [sent, od], NOW) is None  # tried once
    assert live.move(job, od, Trend(), list, NOW) is None  # no ETA, no numbers
    off, book2, o2 = _world(Policy(live_spot=False))
    book2.observe(o2["spot"], True, NOW - timedelta(hours=2))  # type: ignore[arg-type]
    assert off.move(job, od, _trend(4.0), list, NOW) is None  # default-planner-spot


def test_a_spot_job_stays_while_its_slack_covers_a_preemption_and_bridges_when_spot_is_dear() -> (
    None
):
    live, book, o = _world()
    book.observe(o["spot"], True, NOW - timedelta(hours=1))  # type: ignore[arg-type]
    job = make_job(deadline_hours=6.0, restart_seconds=300, checkpoint_seconds=600)
    spot = _attempt("spot-a", "spot")
    assert live.move(job, spot, _trend(4.0), list, NOW) is None  # stay
    dear, book2, o2 = _world(prices={"spot-a": 4.0, "od": 3.0})  # spot above on-demand
    book2.observe(o2["spot"], True, NOW - timedelta(hours=1))  # type: ignore[arg-type]
    move = dear.move(job, spot, _trend(4.0), list, NOW)
    assert move is not None
    assert move.outcome is AttemptOutcome.BRIDGE_ON_DEMAND
    assert "leave spot for od" in move.cause
    assert "spot $4.00/h" in move.cause


def test_a_running_attempt_is_planned_to_the_reserve_its_plan_kept() -> None:
    """The decider's due is the deadline less the reserve recorded on the attempt (lengthened
    or waived by the planner), and the dependency graph's only for an attempt without one."""
    job = make_job(deadline_hours=12.0, restart_seconds=300)
    od = _attempt("od", "on_demand")

    def move(reserve: float | None, graph: float) -> AttemptOutcome | None:
        live, book, o = _world()
        book.observe(o["spot"], True, NOW - timedelta(hours=2))  # type: ignore[arg-type]
        live.downstream = {job.id: graph}
        attempt = dataclasses.replace(od, reserve_hours=reserve)
        decided = live.move(job, attempt, _trend(4.0), list, NOW)
        return decided.outcome if decided is not None else None

    # 4 h of work on on-demand, 12 h to the deadline, spot up: back to spot
    assert move(None, 0.0) is AttemptOutcome.TO_SPOT
    # a plan that kept 7.5 h for the jobs waiting on it leaves 0.5 h of slack: less than two
    # changeovers, so no move to spot (the safety net)
    assert move(7.5, 0.0) is None
    # recorded without one: the graph's reserve
    assert move(None, 7.5) is None
    # the plan waived the graph's reserve: planned to its own deadline
    assert move(0.0, 7.5) is AttemptOutcome.TO_SPOT


def test_a_bridged_job_is_planned_without_spot_once_and_a_returned_one_with_it() -> None:
    job = make_job(state=JobState.QUEUED)
    bridged = dataclasses.replace(
        _attempt("spot-a", "spot"), outcome=AttemptOutcome.BRIDGE_ON_DEMAND
    )
    assert not with_history(job, [bridged], Policy()).spot.allowed
    back = dataclasses.replace(_attempt("od", "on_demand"), outcome=AttemptOutcome.TO_SPOT)
    assert with_history(job, [bridged, back], Policy()).spot.allowed
    ruled = dataclasses.replace(_attempt("spot-a", "spot"), outcome=AttemptOutcome.TO_ON_DEMAND)
    assert not with_history(job, [ruled, back], Policy()).spot.allowed  # a rule is for good


def test_the_changeover_is_measured_from_the_jobs_own_restarts() -> None:
    t = NOW - timedelta(hours=5)

    def ran(n: int, start_min: float, end_min: float | None) -> Attempt:
        end = None if end_min is None else t + timedelta(minutes=end_min)
        return Attempt(
            n, "job", n, "sim", "spot-a", "spot", (), t + timedelta(minutes=start_min), end
        )

    def at(minute: float, step: float) -> tuple[datetime, float]:
        return t + timedelta(minutes=minute), step

    first = ran(1, 0, 45)
    refused = ran(2, 50, 50)  # a capacity refusal: never ran, not a restart
    second = ran(3, 60, 150)
    third = ran(4, 180, None)  # still running
    reports = [
        at(30, 3400),
        at(40, 4000),  # 60 a minute: 4,300 reached at the end (45)
        at(70, 4000),
        at(80, 4600),  # resumed at 60: back at 4,300 at 75 → 900 s
        at(140, 8000),  # 8,000 at 140, ended at 150 with (8,000 − 4,600) / 60 min a minute
        at(200, 8300),
        at(210, 9000),  # resumed at 180: 70 a minute, 8,566.67 crossed at 203.8
    ]
    assert measured_changeover_seconds([first], reports) is None  # no restart yet
    assert measured_changeover_seconds([first, refused, second], reports) == pytest.approx(900)
    # the second attempt reached 8,000 + (3,400 / 60) × 10 = 8,566.67 at its end (150)
    back = 200 + (8000 + 3400 / 6 - 8300) / 70
    both = measured_changeover_seconds([first, refused, second, third], reports)
    assert both == pytest.approx((900 + (back - 180) * 60) / 2)  # the median of two
    # one report after the resume: no rate to go back along, no measure
    assert measured_changeover_seconds([first, second], reports[:3]) is None
    # the earlier attempt's last report alone would say "back at once": carried on to its end
    # at its rate it says otherwise (the work after its last report was lost)
    past = [at(30, 3400), at(40, 4000), at(65, 4100), at(75, 4700)]  # 4,300 at 68:20
    assert measured_changeover_seconds([first, second], past) == pytest.approx(500)
    # the decider's changeover is the measure once there is one (never below a start-up), the
    # declared parts before
    _, _, o = _world()
    job = make_job(restart_seconds=900, checkpoint_seconds=600)
    spot = o["spot"]
    assert changeover_hours(job, spot) == pytest.approx((900 + 300) / 3600)  # type: ignore[arg-type]
    assert changeover_hours(job, spot, 700.0) == pytest.approx(700 / 3600)  # type: ignore[arg-type]
    booting = dataclasses.replace(spot, startup_seconds=120.0)  # type: ignore[type-var]
    assert changeover_hours(job, booting, 0.0) == pytest.approx(120 / 3600)


def test_the_decider_reads_the_measured_changeover_when_an_epoch_begins() -> None:
    spot = dataclasses.replace(
        make_offering("spot-a", market=Market.SPOT, price=1.0), instance_type="p3"
    )
    od = dataclasses.replace(make_offering("od", price=3.0), instance_type="p3")
    offerings = {spot.id: spot, od.id: od}
    job = make_job(deadline_hours=12.0, restart_seconds=3000, checkpoint_seconds=600)
    said = {}
    for measured in (None, 600.0):
        book = MarketBook(MemoryStore(), offerings, feed=None)
        book.observe(spot, True, NOW - timedelta(hours=2))
        live = LiveSpot(
            book,
            offerings,
            Policy(),
            lambda o, _at: {"spot-a": 1.0, "od": 3.0}[o.id],
            lambda job_id, m=measured: m,
        )
        move = live.move(job, _attempt("od", "on_demand"), _trend(4.0), list, NOW)
        assert move is not None
        said[measured] = move.record.situation.changeover_hours
    assert said[None] == pytest.approx((3000 + 300) / 3600)  # declared
    assert said[600.0] == pytest.approx(600 / 3600)  # measured
