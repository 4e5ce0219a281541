"""A job whose deadline has passed is held as infeasible with that reason (no placement can help)."""

from __future__ import annotations

from budgeteer.core import HoldReason, plan_cycle
from builders import make_job, make_snapshot


def test_a_job_past_its_deadline_is_held_saying_so() -> None:
    late = make_job("late", deadline_hours=-1, submitted_hours_ago=5)
    on_time = make_job("fine", deadline_hours=10, seq=1)
    plan = plan_cycle(make_snapshot([late, on_time]))
    [hold] = plan.holds
    assert (hold.job_id, hold.reason) == ("late", HoldReason.INFEASIBLE)
    assert hold.message == "deadline 2026-12-02 08:00 UTC has passed"
    assert [a.job_id for a in plan.admissions] == ["fine"]
