"""One bad job never stops the cycle: a job whose planning raises is quarantined (held with
reason ``invalid`` and the error), and everyone else is planned exactly as without it — in
the pure core, and in a served instance where another team's P0 still runs."""

from __future__ import annotations

import dataclasses
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from api_world import ADMIN, World, job_spec
from budgeteer.core import HoldReason, Plan, plan_cycle
from budgeteer.core.quarantine import plan_isolated
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.scheduler import Driver, Scheduler
from budgeteer.spec.job import JobSpec, job_from_spec
from budgeteer.store.leader import LocalLeaderLock
from builders import NOW, make_budget, make_job, make_offering, make_snapshot

OFFERINGS = [
    make_offering("od", price=3.0),
    make_offering("od8", gpus=8, price=24.0, max_instances=1),
    make_offering("spot", price=1.0, market=Market.SPOT, interruption_per_hour=0.05),
]
OTHERS = [
    make_job("p0", tier=Tier.P0, hours=8, deadline_hours=3, workers=(1, 8), seq=0),
    make_job("p1", tier=Tier.P1, hours=4, deadline_hours=12, seq=1),
    make_job("p3", tier=Tier.P3, hours=300, spot=False, seq=2),
]


def _decisions(plan: Plan, leave_out: str) -> tuple[object, object]:
    admitted = {
        a.job_id: (a.placement.offering_id, a.placement.instances, a.placement.workers)
        for a in plan.admissions
        if a.job_id != leave_out
    }
    held = {h.job_id: (h.reason, h.message) for h in plan.holds if h.job_id != leave_out}
    return admitted, held


def test_a_job_whose_planning_raises_is_quarantined_and_the_others_planned_as_without_it() -> None:
    poison = make_job("poison", team="search", hours=1e12, deadline_hours=24, seq=3)
    snap = make_snapshot([*OTHERS, poison], OFFERINGS, budgets=[make_budget(limit="500")])
    with pytest.raises(OverflowError):
        plan_cycle(snap)  # what stopped every team's scheduling
    plan = plan_isolated(snap)
    hold = plan.hold("poison")
    assert hold is not None
    assert hold.reason is HoldReason.INVALID
    assert "OverflowError" in hold.message
    without = plan_cycle(make_snapshot(OTHERS, OFFERINGS, budgets=[make_budget(limit="500")]))
    assert _decisions(plan, "poison") == _decisions(without, "poison")
    assert plan.admission("p0") is not None


def test_jobs_known_to_raise_are_not_tried_again() -> None:
    # the API's plans (explain, metrics) take the scheduler's quarantine instead of bisecting
    poison = make_job("poison", hours=1e12, deadline_hours=24, seq=3)
    snap = make_snapshot([*OTHERS, poison], OFFERINGS)
    plan = plan_isolated(snap, known_bad={"poison": "OverflowError: as found before"})
    hold = plan.hold("poison")
    assert hold is not None
    assert hold.message == "planning this job failed: OverflowError: as found before"
    assert _decisions(plan, "poison") == _decisions(
        plan_cycle(make_snapshot(OTHERS, OFFERINGS)), "poison"
    )


def test_two_bad_jobs_among_many_are_both_found() -> None:
    bad = [make_job(f"bad{i}", hours=1e300, seq=10 + i) for i in range(2)]
    good = [make_job(f"ok{i}", hours=1 + i, seq=20 + i) for i in range(9)]
    plan = plan_isolated(make_snapshot([*good[:4], bad[0], *good[4:], bad[1]], OFFERINGS))
    assert {h.job_id for h in plan.holds if h.reason is HoldReason.INVALID} == {"bad0", "bad1"}
    assert {a.job_id for a in plan.admissions} == {j.id for j in good}


finite = st.floats(min_value=1e-6, max_value=1e300, allow_nan=False, allow_infinity=False)


@st.composite
def extreme_jobs(draw: st.DrawFn) -> Job:
    """Jobs the spec schema accepts today (positive numbers, no upper bounds yet)."""
    low = draw(st.integers(min_value=1, max_value=64))
    high = draw(st.integers(min_value=low, max_value=100_000))
    return make_job(
        "x",
        team=draw(st.sampled_from(["growth", "search"])),
        tier=draw(st.sampled_from(list(Tier))),
        hours=draw(finite),
        workers=(low, high),
        gpus_per_worker=draw(st.integers(min_value=1, max_value=16)),
        # a deadline must be a date (the spec refuses one past the year 9999)
        deadline_hours=draw(st.none() | st.floats(min_value=1e-6, max_value=1e7)),
        budget_usd=draw(st.none() | finite),
        spot=draw(st.booleans()),
        incremental_hours=draw(st.none() | st.floats(min_value=1e-6, max_value=1e-3)),
        checkpoint_seconds=draw(finite),
        restart_seconds=draw(st.floats(min_value=0, max_value=1e300)),
        data=draw(st.none() | st.tuples(st.just("aws/us-east-1"), finite)),
        seq=99,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=extreme_jobs())
def test_any_accepted_job_is_planned_held_or_quarantined_never_a_crash(job: Job) -> None:
    budgets = [make_budget(limit="500")]
    plan = plan_isolated(make_snapshot([*OTHERS, job], OFFERINGS, budgets=budgets))
    decided = plan.admission("x") is not None or plan.hold("x") is not None
    assert decided
    hold = plan.hold("x")
    if hold is not None and hold.reason is HoldReason.INVALID:
        without = plan_cycle(make_snapshot(OTHERS, OFFERINGS, budgets=budgets))
        assert _decisions(plan, "x") == _decisions(without, "x")


# -- served: a poisoned job from one team, a P0 from another ---------------------------------
def test_a_poisoned_job_does_not_stop_another_teams_p0(world: World) -> None:
    driver = Driver(world.sched, LocalLeaderLock(), interval_seconds=60)
    try:
        _poisoned_story(world, driver)
    finally:
        driver.close()


def _poisoned_story(world: World, driver: Driver) -> None:
    world.ctx.loop_ready = driver.ready
    world.ctx.quarantined = lambda: world.sched.quarantined
    g, s = world.auth(world.growth), world.auth(world.search)
    # the API's bounds now refuse such a spec (test_bounds.py); isolation must hold for a job
    # that reaches the store anyway (an older release's, a bound that proves too loose)
    poison = dataclasses.replace(
        make_job("poison", team="growth", hours=1e12, deadline_hours=24),
        submitted_at=world.clock.now(),
        deadline=world.clock.now() + timedelta(hours=24),
        command=("true",),
    )
    world.store.submit([poison], at=world.clock.now())
    p0 = job_spec(
        "urgent",
        team="search",
        priority="P0",
        sla="4h",
        command=[sys.executable, "-c", "print('trained')"],
    )
    p0_id = world.http.post("/v1/jobs", json=p0, headers=s).json()["id"]

    for _ in range(200):
        assert driver.step(), driver.last_error  # the cycle goes on for everyone
        if world.store.job(p0_id).state.is_terminal:
            break
        world.clock.advance(30)
        time.sleep(0.05)
    assert world.store.job(p0_id).state is JobState.SUCCEEDED

    poisoned = next(j for j in world.store.jobs() if j.name == "poison")
    assert poisoned.state is JobState.HELD
    assert list(world.sched.quarantined) == [poisoned.id]
    assert "planning this job failed: OverflowError" in world.store.events(poisoned.id)[-1].cause
    why = world.http.get(f"/v1/jobs/{poisoned.id}/explain", headers=g)
    assert why.status_code == 200
    assert (why.json()["decision"], why.json()["reason"]) == ("hold", "invalid")
    admin = world.auth(ADMIN)
    metrics = world.http.get("/metrics", headers=admin)
    assert metrics.status_code == 200
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(metrics.text)
        for sample in family.samples
    }
    assert values["budgeteer_jobs_quarantined"] == 1
    page = world.http.get("/", headers=admin)
    assert page.status_code == 200
    assert "planning this job failed" in page.text
    ready = world.http.get("/readyz")
    assert ready.status_code == 200, ready.text


def test_readyz_fails_while_cycles_fail(world: World) -> None:
    class Broken(Scheduler):
        def cycle(self) -> object:  # type: ignore[override]
            raise RuntimeError("the backend is on fire")

    broken = Broken(world.store, world.sched.backend, world.sched.catalog, world.clock, Path("/x"))
    driver = Driver(broken, LocalLeaderLock(), interval_seconds=60)
    world.ctx.loop_ready = driver.ready
    try:
        assert not driver.step()
        r = world.http.get("/readyz")
        assert r.status_code == 503
        assert "the backend is on fire" in r.json()["reason"]
    finally:
        driver.close()
    assert world.http.get("/healthz").status_code == 200  # liveness is another question


number = st.floats(min_value=1e-9, max_value=1e300, allow_nan=False, allow_infinity=False)


@st.composite
def accepted_specs(draw: st.DrawFn) -> dict[str, object]:
    """Job specs as a user sends them, with numbers anywhere the schema allows today."""
    spec: dict[str, object] = {
        "name": "x",
        "team": draw(st.sampled_from(["growth", "search"])),
        "priority": draw(st.sampled_from(["P0", "P1", "P2", "P3"])),
        "work": {"reference_hours": draw(number)},
        "resources": {
            "gpus_per_worker": draw(st.integers(1, 64)),
            "workers": draw(st.integers(1, 1024)),
            "min_gpu_memory_gib": draw(st.floats(0, 1e6)),
        },
        "spot": {"allowed": draw(st.booleans())},
        "command": ["true"],
    }
    days = draw(st.none() | st.floats(min_value=1e-6, max_value=2.9e6))
    if days is not None:
        spec["sla"] = f"{days:.6f}d"
    if draw(st.booleans()):
        spec["budget_usd"] = str(draw(st.decimals(min_value="0.01", max_value="1e15", places=2)))
    if draw(st.booleans()):
        spec["data"] = {"location": "aws/us-east-1", "size_gb": draw(number)}
    return spec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=accepted_specs())
def test_any_spec_the_schema_accepts_is_planned_held_or_quarantined(doc: dict[str, object]) -> None:
    try:
        spec = JobSpec.parse(doc)
        job = job_from_spec(spec, job_id="x", now=NOW, seq=99, known_accelerators=["A100", "T4"])
    except (SpecError, SpecErrors):
        return  # refused with a named field: not this test's concern
    budgets = [make_budget(limit="500")]
    plan = plan_isolated(make_snapshot([*OTHERS, job], OFFERINGS, budgets=budgets))
    assert plan.admission("x") is not None or plan.hold("x") is not None
    hold = plan.hold("x")
    if hold is not None and hold.reason is HoldReason.INVALID:
        without = plan_cycle(make_snapshot(OTHERS, OFFERINGS, budgets=budgets))
        assert _decisions(plan, "x") == _decisions(without, "x")


def test_the_loop_rests_in_proportion_to_its_cycles(world: World) -> None:
    driver = Driver(world.sched, LocalLeaderLock(), interval_seconds=60, min_gap_seconds=0.5)
    assert driver.gap_seconds() == 0.5  # no cycle yet
    driver.last_cycle_seconds = 0.1
    assert driver.gap_seconds() == 0.5  # short cycles: the minimum gap
    driver.last_cycle_seconds = 2.0
    assert driver.gap_seconds() == 4.0  # a long cycle: twice its length, the API the rest
    driver.last_cycle_seconds = 120.0
    assert driver.gap_seconds() == 60.0  # never past the interval
    assert driver.step()
    assert driver.last_cycle_seconds > 0  # measured by a real cycle
    driver.close()


def test_a_leader_keeps_leading_without_waiting_or_saying_it_waits(world: World) -> None:
    said: list[str] = []
    driver = Driver(world.sched, LocalLeaderLock(), interval_seconds=60, say=said.append)
    waits: list[float] = []
    original = driver.stopping.wait

    def wait(timeout: float | None = None) -> bool:
        waits.append(timeout or 0.0)
        return original(0)

    driver.stopping.wait = wait  # type: ignore[method-assign]
    for _ in range(3):
        assert driver.step()
    assert said == ["leading"]  # not "another scheduler is the leader" while it leads
    assert waits == []  # and no retry pause between its own cycles
    driver.close()
