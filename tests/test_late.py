"""Jobs that can no longer meet their deadline: planned late against a fresh deadline (flagged,
after the on-time jobs of their tier), cancelled when they ask to be, or held when the policy
says so — never held for ever without a word."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from budgeteer.core import HoldReason, Policy, plan_cycle
from budgeteer.core.control import Running, runtime_action
from budgeteer.core.progress import Sample, Trend
from budgeteer.domain.job import DeadlineMiss, Job
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from builders import NOW, make_job, make_offering, make_snapshot


def _cancel(job: Job) -> Job:
    return dataclasses.replace(job, on_deadline_miss=DeadlineMiss.CANCEL)


def test_a_job_past_its_deadline_runs_late_within_its_original_window() -> None:
    # submitted 5 h ago with a 4 h window: the deadline passed an hour ago
    late = make_job("late", hours=2, deadline_hours=-1, submitted_hours_ago=5)
    plan = plan_cycle(make_snapshot([late]))
    [admission] = plan.admissions
    assert admission.job_id == "late"
    assert admission.late is not None
    assert "deadline 2026-12-02 08:00 UTC has passed" in admission.late
    assert "finish by 2026-12-02 13:00 UTC" in admission.late  # now + the original 4 h
    assert admission.placement.finish <= NOW + timedelta(hours=4)
    assert not plan.holds
    assert not plan.expired


def test_a_job_no_plan_can_finish_in_time_runs_late_as_fast_as_reasonable() -> None:
    # 10 reference hours on one A100 take 10 h; the deadline is in 2 h
    tight = make_job("tight", hours=10, deadline_hours=2)
    plan = plan_cycle(make_snapshot([tight]))
    [admission] = plan.admissions
    assert admission.late is not None
    assert "no plan meets the deadline 2026-12-02 11:00 UTC" in admission.late
    hours = (admission.placement.finish - NOW).total_seconds() / 3600
    assert hours > 2.0
    # the only offering's fastest plan is the one chosen, and it is what the message names
    assert f"the fastest finishes in {hours:.1f} h" in admission.late


def test_on_deadline_miss_cancel_expires_a_passed_job_and_holds_an_infeasible_one() -> None:
    passed = _cancel(make_job("passed", deadline_hours=-1, submitted_hours_ago=5))
    tight = _cancel(make_job("tight", hours=10, deadline_hours=2, seq=1))
    plan = plan_cycle(make_snapshot([passed, tight]))
    assert [e.job_id for e in plan.expired] == ["passed"]
    assert "has passed" in plan.expired[0].message
    [hold] = plan.holds
    assert (hold.job_id, hold.reason) == ("tight", HoldReason.INFEASIBLE)
    assert "deadline in 2.0 h" in hold.message
    assert not plan.admissions


def test_with_late_jobs_off_they_are_held_saying_why() -> None:
    late = make_job("late", deadline_hours=-1, submitted_hours_ago=5)
    on_time = make_job("fine", deadline_hours=10, seq=1)
    plan = plan_cycle(make_snapshot([late, on_time]), Policy(run_late_jobs=False))
    [hold] = plan.holds
    assert (hold.job_id, hold.reason) == ("late", HoldReason.INFEASIBLE)
    assert hold.message == "deadline 2026-12-02 08:00 UTC has passed"
    assert [a.job_id for a in plan.admissions] == ["fine"]
    assert not plan.expired


def test_late_jobs_go_after_the_on_time_jobs_of_their_tier_and_before_lower_tiers() -> None:
    late = make_job("late", hours=2, deadline_hours=-1, submitted_hours_ago=5, seq=0)
    on_time = make_job("on-time", hours=2, deadline_hours=3, seq=1)
    lower = make_job("lower", tier=Tier.P3, hours=2, deadline_hours=30, seq=2)
    plan = plan_cycle(make_snapshot([late, on_time, lower]))
    # by slack alone the late job (negative slack) would go first
    assert plan.order == ("on-time", "late", "lower")
    late_of = {a.job_id: a.late for a in plan.admissions}
    assert late_of["late"] is not None
    assert late_of["on-time"] is None


def test_a_job_started_after_its_deadline_is_not_moved_off_spot_for_it() -> None:
    job = make_job("j", deadline_hours=-1, submitted_hours_ago=5)
    slow = (Sample(NOW, 0, 100), Sample(NOW + timedelta(hours=1), 10, 100))  # ETA NOW + 10 h
    started_late = Running(job, Market.SPOT, 1, NOW, Trend.of(slow), ())
    assert runtime_action(started_late, NOW + timedelta(hours=1), Policy()) is None
    # the same job started before its deadline is behind schedule and leaves spot
    started_early = dataclasses.replace(started_late, started_at=NOW - timedelta(hours=2))
    action = runtime_action(started_early, NOW + timedelta(hours=1), Policy())
    assert action is not None
    assert "past the deadline" in action.reason


def test_capacity_goes_to_the_on_time_job_before_a_late_one_of_its_tier() -> None:
    # one instance left; the late job is the cheaper to place, but it can wait (it is late
    # anyway) while the on-time job cannot: late jobs are placed on what on-time ones leave
    scarce = make_offering("scarce", price=4.0, max_instances=1)
    late = make_job("late", hours=1, deadline_hours=-1, submitted_hours_ago=5, spot=False, seq=0)
    on_time = make_job("on-time", hours=3, deadline_hours=6, spot=False, seq=1)
    plan = plan_cycle(make_snapshot([late, on_time], [scarce]))
    assert [a.job_id for a in plan.admissions] == ["on-time"]
    hold = plan.hold("late")
    assert hold is not None
    assert hold.reason is HoldReason.CAPACITY
