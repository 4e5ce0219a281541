"""Pipeline reserves: a job others wait on is planned to finish early enough for them, not
merely by the deadline the pipeline's steps share (critical-path latest finish)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from budgeteer.backends import TraceMarket
from budgeteer.catalog import Catalog
from budgeteer.core import Policy, plan_cycle
from budgeteer.core.candidates import _Pricing
from budgeteer.core.reserve import DEPENDENT_STARTUP_HOURS, downstream_hours
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.offering import Offering
from budgeteer.serialize import plan_to_dict
from budgeteer.sim.run import Arrival, simulate
from builders import EGRESS, NOW, THROUGHPUT, make_job, make_offering, make_snapshot

W = JobState.WAITING
START = DEPENDENT_STARTUP_HOURS


def _pipeline(deadline: float) -> list[Job]:
    """features (1 ref-h) → train (6) → validate (0.5) → package (0.2), one deadline."""
    steps = (("features", 1.0), ("train", 6.0), ("validate", 0.5), ("package", 0.2))
    return [
        make_job(
            name,
            hours=hours,
            deadline_hours=deadline,
            seq=seq,
            state=W if seq else JobState.QUEUED,
            depends_on=((steps[seq - 1][0], "success"),) if seq else (),
        )
        for seq, (name, hours) in enumerate(steps)
    ]


# a slow, cheap T4 (1 ref-h in 4 h for $2) and a fast, dearer A100 (1 h for $4)
T4 = make_offering("t4", accelerator="T4", price=0.5)
A100 = make_offering("a100", accelerator="A100", price=4.0)


def test_the_reserve_is_the_longest_chain_of_work_after_a_job() -> None:
    jobs = _pipeline(20)
    # a second branch after train, longer than validate → package
    jobs.append(
        make_job(
            "report",
            hours=2,
            gpus_per_worker=1,
            workers=(2, 2),
            seq=4,
            state=W,
            depends_on=(("train", "success"),),
        )
    )
    got = downstream_hours(jobs)
    assert got["validate"] == pytest.approx(0.2 + START)
    # validate → package is 0.5 + 0.2 + two start-ups; report is 2 ref-h on 2 GPUs + one
    assert got["train"] == pytest.approx(max(0.5 + 0.2 + 2 * START, 1.0 + START))
    assert got["features"] == pytest.approx(6 + START + got["train"])
    assert "package" not in got  # nothing waits on it


def test_only_dependents_that_run_on_success_and_are_unfinished_count() -> None:
    up = make_job("up", hours=1, deadline_hours=10)
    on_failure = make_job("cleanup", hours=5, seq=1, state=W, depends_on=(("up", "failure"),))
    after_any = make_job("notify", hours=0.5, seq=2, state=W, depends_on=(("up", "any"),))
    finished = make_job(
        "old", hours=9, seq=3, state=JobState.SUCCEEDED, depends_on=(("up", "success"),)
    )
    assert downstream_hours([up, on_failure, after_any, finished]) == {
        "up": pytest.approx(0.5 + START)
    }


def test_an_upstream_step_is_planned_to_leave_its_dependents_their_time() -> None:
    jobs = _pipeline(10)
    snapshot = make_snapshot(jobs, [T4, A100])
    # alone, features would take the cheap T4: 4 h, well inside the shared 10 h deadline — and
    # leave train 6 h for 6 ref-h plus validate and package: no time
    [alone] = plan_cycle(snapshot, Policy(pipeline_reserve=False)).admissions
    assert alone.placement.offering_id == "t4"
    assert alone.reserve_hours == 0.0
    # with the reserve (6 + 0.5 + 0.2 ref-h + three start-ups = 7.0 h) it must finish within
    # 3 h: the A100
    [kept] = plan_cycle(snapshot).admissions
    assert kept.job_id == "features"
    assert kept.placement.offering_id == "a100"
    assert kept.reserve_hours == pytest.approx(6.0 + 0.5 + 0.2 + 3 * START)
    assert kept.late is None
    assert kept.due is None


def test_when_no_plan_meets_the_reserve_the_step_is_planned_to_its_own_deadline() -> None:
    # 7.5 h to the deadline: the reserve (7.0 h) leaves 0.5 h, and no plan does 1 ref-h in that
    jobs = _pipeline(7.5)
    [admission] = plan_cycle(make_snapshot(jobs, [T4, A100])).admissions
    assert admission.late is None  # its own deadline is still met
    assert admission.reserve_hours == 0.0
    assert admission.placement.offering_id == "t4"  # the cheapest plan by its own deadline


# three speeds: T4 (a quarter of reference), A100 (reference), H100 (three times)
H100 = make_offering("h100", accelerator="H100", price=30.0)


@pytest.mark.parametrize(
    ("after", "deadline", "only", "placed", "reserve", "why"),
    [
        # train (4 ref-h): T4 16 h for $8, A100 4 h for $16. Any reserve for validate (0.5
        # ref-h) needs the A100: $8 more; the best, 2 h, lets validate take the T4 ($1) where
        # without one it has 0.3 h, the H100 ($5 for 10 min): it would save $4 — waived
        (
            0.5,
            16.3,
            (),
            "t4",
            0.0,
            "planned to its deadline: finishing 2.0 h before it for the jobs waiting on it "
            "would cost $8.00 more and save them $4.00",
        ),
        # 18.7 h: the T4 meets the reserve; 2 h for validate (not 0.6) lets it take the T4 ($1,
        # not the A100's $2) and train still the T4 — lengthened
        (
            0.5,
            18.7,
            (),
            "t4",
            2.0,
            "not 0.6 h: their cheapest plans need that long, which saves them $1.00 for $0.00 more",
        ),
        # 17.5 h: the same 2 h would put train on the A100 ($8 more) to save validate $1 — kept
        (0.5, 17.5, (), "t4", 0.5 + START, None),
        # validate of 2 ref-h by 17 h: the reserve (2.1 h) needs the A100 for train, and so does
        # 8 h, which lets validate take the T4 ($4, not the A100's $8) — lengthened, not waived
        (
            2.0,
            17.0,
            (),
            "a100",
            8.0,
            "not 2.1 h: their cheapest plans need that long, which saves them $4.00 for $0.00 more",
        ),
        # a validate that runs on T4s only (2 h) cannot finish in the 0.6 h the reserve counts
        # at reference speed: 2 h, at no cost to train (the A100 either way)
        (
            0.5,
            16.1,
            ("T4",),
            "a100",
            2.0,
            "not 0.6 h: their cheapest plans need that long, "
            "which lets them finish at all (not in 0.6 h) for $0.00 more",
        ),
    ],
)
def test_a_reserve_is_priced_waived_kept_or_lengthened(
    after: float,
    deadline: float,
    only: tuple[str, ...],
    placed: str,
    reserve: float,
    why: str | None,
) -> None:
    up = make_job("train", hours=4, deadline_hours=deadline)
    down = make_job(
        "validate",
        hours=after,
        accelerators=only,
        deadline_hours=deadline,
        seq=1,
        state=W,
        depends_on=(("train", "success"),),
    )
    [admission] = plan_cycle(make_snapshot([up, down], [T4, A100, H100])).admissions
    assert admission.placement.offering_id == placed
    assert admission.reserve_hours == pytest.approx(reserve)
    assert admission.reserve_why == why
    assert admission.late is None
    if reserve:  # the plan finishes by the reserve
        assert admission.placement.finish <= NOW + timedelta(hours=deadline - reserve)


def test_the_queue_orders_an_upstream_step_by_the_slack_its_reserve_leaves() -> None:
    pipeline = _pipeline(10)  # features: 1 h of work, 10 h to go, 7 h reserved: 2 h of slack
    other = make_job("other", hours=1, deadline_hours=6, seq=9)  # 5 h of slack
    snapshot = make_snapshot([*pipeline, other], [A100])
    assert plan_cycle(snapshot).order == ("features", "other")
    assert plan_cycle(snapshot, Policy(pipeline_reserve=False)).order == ("other", "features")


LOOP_START = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _two_steps(up: tuple[str, float], down: tuple[str, float], deadline: float) -> list[Job]:
    """``up`` → ``down`` (name, ref-h), one deadline, on-demand only."""
    return [
        make_job(up[0], hours=up[1], deadline_hours=deadline, spot=False),
        make_job(
            down[0],
            hours=down[1],
            deadline_hours=deadline,
            spot=False,
            seq=1,
            depends_on=((up[0], "success"),),
        ),
    ]


def _through_the_loop(
    steps: list[Job], offerings: list[Offering], policy: Policy | None = None
) -> tuple[dict[str, bool], dict[str, list[str]], dict[str, list[float | None]]]:
    """The scheduler's own loop on simulated time (no spot in the market), every step
    succeeding: whether each met its deadline, each one's event causes, and the reserve each
    of its attempts recorded."""
    catalog = Catalog(tuple(offerings), dict(THROUGHPUT), EGRESS, "test")
    market = TraceMarket(np.array([False] * 200), 600, LOOP_START, source="trace")
    shift = LOOP_START - NOW
    arrivals = [
        Arrival(
            LOOP_START, dataclasses.replace(j, submitted_at=LOOP_START, deadline=j.deadline + shift)
        )
        for j in steps
        if j.deadline is not None
    ]
    end = LOOP_START + timedelta(hours=30)
    store = simulate(arrivals, catalog, market, start=LOOP_START, end=end, policy=policy).store
    met: dict[str, bool] = {}
    causes: dict[str, list[str]] = {}
    reserves: dict[str, list[float | None]] = {}
    for step in steps:
        job = store.job(step.id)
        assert job.state is JobState.SUCCEEDED
        assert job.deadline is not None
        met[job.id] = store.events(job.id)[-1].at <= job.deadline
        causes[job.id] = [e.cause for e in store.events(job.id)]
        reserves[job.id] = [a.reserve_hours for a in store.attempts(job.id)]
    return met, causes, reserves


def test_through_the_loop_a_pipeline_meets_its_deadline_and_the_launch_says_why() -> None:
    # features (1 ref-h) → train (6 ref-h), one deadline 9.5 h away
    steps = _two_steps(("features", 1), ("train", 6), 9.5)
    met, causes, _ = _through_the_loop(steps, [T4, A100], Policy())
    assert met == {"features": True, "train": True}
    assert any(
        "placed on 1×a100.type" in c and "6.1 h before its deadline for the jobs waiting on it" in c
        for c in causes["features"]
    )
    # planned to the shared deadline alone, features takes the T4's 4 h and train is late
    met, causes, _ = _through_the_loop(steps, [T4, A100], Policy(pipeline_reserve=False))
    assert met == {"features": True, "train": False}
    assert any("placed on 1×t4.type" in c for c in causes["features"])


def test_through_the_loop_a_reserve_that_does_not_pay_is_waived_and_the_launch_says_why() -> None:
    # train (4 ref-h) → validate (0.5 ref-h), due 16.3 h away: the T4 for train ($8, 16 h) and
    # the H100 for validate in the 0.3 h left ($5), not the A100 for train ($16)
    steps = _two_steps(("train", 4), ("validate", 0.5), 16.3)
    met, causes, reserves = _through_the_loop(steps, [T4, A100, H100])
    assert met == {"train": True, "validate": True}
    assert reserves["train"] == [0.0]  # what the spot decider plans it to: its own deadline
    assert any(
        "placed on 1×t4.type" in c
        and "planned to its deadline: finishing 2.0 h before it" in c
        and "would cost $8.00 more and save them $4.00" in c
        for c in causes["train"]
    )
    assert any("placed on 1×h100.type" in c for c in causes["validate"])


def test_through_the_loop_a_reserve_is_lengthened_for_a_dependents_cheaper_plan() -> None:
    # train (4 ref-h) → validate (2 ref-h), due 17 h away. The reserve counts validate at
    # reference speed (2.1 h): the A100's 2 h for $8. 8 h lets it take the T4 ($4), and train
    # needs the A100 ($16) either way — so train is planned to finish 8 h early
    steps = _two_steps(("train", 4), ("validate", 2), 17)
    met, causes, reserves = _through_the_loop(steps, [T4, A100, H100])
    assert met == {"train": True, "validate": True}
    assert any(
        "placed on 1×a100.type" in c
        and "8.0 h before its deadline for the jobs waiting on it, not 2.1 h: their cheapest "
        "plans need that long, which saves them $4.00 for $0.00 more"
        in c
        for c in causes["train"]
    )
    assert any("placed on 1×t4.type" in c for c in causes["validate"])
    assert reserves == {"train": [pytest.approx(8.0)], "validate": [0.0]}


def test_the_plan_as_data_carries_the_reserve_and_why() -> None:
    """``budgeteer plan --json`` and the API's ``explain`` show the reserve as numbers."""
    up = make_job("train", hours=4, deadline_hours=17)
    down = make_job(
        "validate", hours=2, deadline_hours=17, seq=1, state=W, depends_on=(("train", "success"),)
    )
    [doc] = plan_to_dict(plan_cycle(make_snapshot([up, down], [T4, A100, H100])))["admissions"]
    assert doc["pipeline_reserve_hours"] == pytest.approx(8.0)
    assert doc["pipeline_reserve_why"].startswith("not 2.1 h: their cheapest plans need that long")


@dataclasses.dataclass(frozen=True)
class _Cheapest:
    cheapest_usd: float


def test_reserve_pricing_prices_a_dependent_once_per_length() -> None:
    """Lengthening and waiving reserves ask for some dependents' cheapest plans within the
    same hours again; the pass remembers each (job, hours) it priced, and a new length is
    priced anew."""
    job = make_job("train", hours=2.0, deadline_hours=10.0)
    asked: list[float] = []

    def price(jobs: object, dues: dict[str, datetime]) -> object:
        hours = (dues[job.id] - NOW).total_seconds() / 3600.0
        asked.append(hours)
        return {job.id: _Cheapest(100.0 / hours)}, {job.id: 1.0}

    pricing = _Pricing(NOW, {}, {}, price)
    assert pricing.within(job, 4.0) == pytest.approx(25.0)
    assert pricing.within(job, 4.0) == pytest.approx(25.0)
    assert pricing.within(job, 5.0) == pytest.approx(20.0)
    assert pricing.within(job, 0.0) == float("inf")  # no time: nothing priced
    assert asked == [4.0, 5.0]
