"""Readiness over the dependency DAG."""

from __future__ import annotations

import pytest

from budgeteer.core import HoldReason, plan_cycle
from budgeteer.core.ready import find_cycle, readiness
from budgeteer.domain.job import JobState as S
from builders import make_job, make_snapshot


@pytest.mark.parametrize(
    ("condition", "upstream", "outcome"),
    [
        ("success", S.SUCCEEDED, "ready"),
        ("success", S.STOPPED_EARLY, "ready"),
        ("success", S.FAILED, "failed"),
        ("success", S.CANCELLED, "failed"),
        ("success", S.RUNNING, "waiting"),
        ("success", S.QUEUED, "waiting"),
        ("any", S.FAILED, "ready"),
        ("any", S.CANCELLED, "ready"),
        ("any", S.RUNNING, "waiting"),
        ("failure", S.FAILED, "ready"),
        ("failure", S.SUCCEEDED, "failed"),
        ("failure", S.PREEMPTED, "waiting"),
    ],
)
def test_dependency_conditions(condition: str, upstream: S, outcome: str) -> None:
    job = make_job("b", depends_on=(("a", condition),))
    result = readiness([job], {"a": upstream, "b": S.QUEUED})
    got = "ready" if result.ready else "waiting" if result.waiting else "failed"
    assert got == outcome


def test_unknown_upstream_fails_the_dependent() -> None:
    result = readiness([make_job("b", depends_on=(("ghost", "success"),))], {})
    assert result.failed[0].upstream_id == "ghost"


def test_find_cycle() -> None:
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None
    assert find_cycle({"a": ["a"]}) == ["a", "a"]
    assert find_cycle({"x": [], "a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]


def test_plan_never_admits_before_parents_succeed() -> None:
    a = make_job("a", state=S.RUNNING)
    b = make_job("b", depends_on=(("a", "success"),))
    c = make_job("c", depends_on=(("b", "success"),))
    plan = plan_cycle(make_snapshot([a, b, c]))
    assert plan.admissions == ()
    assert {h.job_id: h.reason for h in plan.holds} == {
        "b": HoldReason.DEPENDENCIES,
        "c": HoldReason.DEPENDENCIES,
    }


def test_failed_upstream_marks_dependents_dependency_failed() -> None:
    a = make_job("a", state=S.FAILED)
    b = make_job("b", depends_on=(("a", "success"),))
    report = make_job("report", depends_on=(("a", "failure"),))
    plan = plan_cycle(make_snapshot([a, b, report]))
    assert [f.job_id for f in plan.dependency_failures] == ["b"]
    assert "ended failed" in plan.dependency_failures[0].message
    assert [ad.job_id for ad in plan.admissions] == ["report"]
