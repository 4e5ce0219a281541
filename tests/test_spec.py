"""The public job/budget schema: the issue's example parses; bad input names its field."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from budgeteer.domain.budget import PeriodKind, ScopeKind
from budgeteer.domain.job import DependencyCondition
from budgeteer.domain.tier import Tier
from budgeteer.errors import CycleError, SpecError, SpecErrors
from budgeteer.spec import JobSpec, job_from_spec, jobs_from_specs, parse_duration
from budgeteer.spec.files import load_budgets_file, load_jobs_file, parse_yaml
from builders import NOW

KNOWN = ["T4", "L4", "A10G", "V100", "A100", "A100-80GB", "H100", "H100-MEGA"]

EXAMPLE = """
name: churn-retrain
team: growth
priority: P0                 # P0 critical ... P3 exploratory
resources: {accelerators: [A100, H100], min_gpu_memory_gib: 40, gpus_per_worker: 1, workers: {min: 1, max: 4}}
work: {reference_hours: 12}  # A100-40GB-hours; or {steps: 50000, steps_per_hour_on: {A100: 6000}}
deadline: 2026-12-02T18:00:00Z   # or sla: 4h, relative to submission
budget_usd: 400              # cap for this run, optional
depends_on: [{job: features-a, on: success}]   # success | any | failure
spot: {allowed: true, max_preemptions: 3}
strategy: {full_reference_hours: 12, incremental_reference_hours: 2}   # optional
data: {location: aws/us-east-1, size_gb: 500, uri: s3://fraud/2026-12}  # optional
command: [python, train.py]
"""


def _errors(exc: SpecErrors | SpecError) -> dict[str, str]:
    items = exc.errors if isinstance(exc, SpecErrors) else (exc,)
    return {e.field: e.problem for e in items}


def test_the_issue_example_is_the_contract() -> None:
    spec = JobSpec.parse(parse_yaml(EXAMPLE))
    job = job_from_spec(
        spec,
        job_id="j1",
        now=NOW,
        seq=7,
        known_accelerators=KNOWN,
        dependency_ids={"features-a": "job-42"},
    )
    assert job.tier is Tier.P0
    assert job.resources.accelerators == ("A100", "H100")
    assert (job.resources.min_workers, job.resources.max_workers) == (1, 4)
    assert job.work.reference_hours == 12
    assert job.deadline is not None
    assert job.deadline.hour == 18
    assert job.budget_usd == 400
    assert job.depends_on[0].job == "job-42"
    assert job.depends_on[0].on is DependencyCondition.SUCCESS
    assert job.spot.max_preemptions == 3
    assert job.incremental_reference_hours == 2
    assert job.data is not None
    assert (job.data.size_gb, job.data.uri) == (500, "s3://fraud/2026-12")
    assert job.command == ("python", "train.py")
    assert job.seq == 7


def test_sla_is_resolved_against_submission_time() -> None:
    spec = JobSpec.parse({"name": "a", "team": "t", "work": {"reference_hours": 1}, "sla": "4h"})
    job = job_from_spec(spec, job_id="a", now=NOW, seq=0, known_accelerators=KNOWN)
    assert job.deadline == NOW + timedelta(hours=4)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4h", timedelta(hours=4)),
        ("90m", timedelta(minutes=90)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("2h30m", timedelta(hours=2, minutes=30)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "4", "h", "-1h", "0h", "four hours", "4x"])
def test_bad_durations_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


BASE: dict[str, Any] = {"name": "a", "team": "t", "work": {"reference_hours": 1}}


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"gpus": 2}, "gpus", "unknown field"),
        ({"resources": {"acelerators": ["A100"]}}, "resources.acelerators", "unknown field"),
        ({"budget_usd": -5}, "budget_usd", "greater than 0"),
        ({"budget_usd": 0}, "budget_usd", "greater than 0"),
        ({"priority": "P7"}, "priority", "'P0', 'P1', 'P2' or 'P3'"),
        ({"sla": "soon"}, "sla", "expected a duration"),
        ({"work": {}}, "work", "give reference_hours"),
        ({"work": {"steps": 10}}, "work", "steps needs steps_per_hour_on"),
        ({"work": {"reference_hours": -1}}, "work.reference_hours", "greater than 0"),
        ({"resources": {"workers": {"min": 4, "max": 2}}}, "resources.workers", "max must be"),
        ({"deadline": "2026-12-03T00:00:00"}, "deadline", "timezone"),
        ({"sla": "4h", "deadline": "2026-12-03T00:00:00Z"}, "(root)", "not both"),
        ({"name": "bad name!"}, "name", "pattern"),
        ({"data": {"location": "us-east-1", "size_gb": 1}}, "data.location", "pattern"),
        (
            {"data": {"location": "aws/us-east-1", "size_gb": 1, "uri": "s3://a b"}},
            "data.uri",
            "pattern",
        ),
        ({"data": {"location": "aws/us-east-1", "size_gb": 1, "uri": ""}}, "data.uri", "pattern"),
        ({"depends_on": [{"job": "x", "on": "maybe"}]}, "depends_on[0].on", "'success'"),
        ({"on_deadline_miss": "retry"}, "on_deadline_miss", "'run' or 'cancel'"),
        (
            {"strategy": {"full_reference_hours": 2, "incremental_reference_hours": 3}},
            "strategy",
            "must be below",
        ),
    ],
)
def test_invalid_spec_names_the_field(change: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(SpecErrors) as err:
        JobSpec.parse({**BASE, **change})
    errors = _errors(err.value)
    assert field in errors, errors
    assert problem in errors[field]


def test_unknown_accelerator_names_its_index() -> None:
    spec = JobSpec.parse({**BASE, "resources": {"accelerators": ["A100", "TPUv5"]}})
    with pytest.raises(SpecError) as err:
        job_from_spec(spec, job_id="a", now=NOW, seq=0, known_accelerators=KNOWN)
    assert err.value.field == "resources.accelerators[1]"
    assert "unknown accelerator 'TPUv5'" in err.value.problem


def test_accelerator_families_and_case_resolve_to_catalog_names() -> None:
    spec = JobSpec.parse({**BASE, "resources": {"accelerators": ["a100", "h100"]}})
    job = job_from_spec(spec, job_id="a", now=NOW, seq=0, known_accelerators=KNOWN)
    assert job.resources.accelerators == ("A100", "H100")


def test_deadline_in_the_past_is_rejected() -> None:
    spec = JobSpec.parse({**BASE, "deadline": (NOW - timedelta(minutes=1)).isoformat()})
    with pytest.raises(SpecError) as err:
        job_from_spec(spec, job_id="a", now=NOW, seq=0, known_accelerators=KNOWN)
    assert err.value.field == "deadline"
    assert "in the past" in err.value.problem


def test_dependency_cycles_are_rejected_with_the_cycle_named() -> None:
    specs = [
        JobSpec.parse({**BASE, "name": n, "depends_on": [{"job": d}]})
        for n, d in (("a", "c"), ("b", "a"), ("c", "b"))
    ]
    with pytest.raises(CycleError) as err:
        jobs_from_specs(specs, now=NOW, known_accelerators=KNOWN)
    assert err.value.cycle == ("a", "c", "b", "a")
    assert "a -> c -> b -> a" in str(err.value)


def test_unknown_dependency_and_duplicate_names_are_all_reported() -> None:
    specs = [
        JobSpec.parse({**BASE, "name": "a", "depends_on": [{"job": "ghost"}]}),
        JobSpec.parse({**BASE, "name": "a"}),
    ]
    with pytest.raises(SpecErrors) as err:
        jobs_from_specs(specs, now=NOW, known_accelerators=KNOWN)
    errors = _errors(err.value)
    assert errors["jobs[0].depends_on[0].job"] == "unknown job 'ghost'"
    assert "duplicate job name" in errors["jobs[1].name"]


def test_yaml_on_key_is_not_a_boolean() -> None:
    assert parse_yaml("depends_on: [{job: a, on: failure}]") == {
        "depends_on": [{"job": "a", "on": "failure"}]
    }
    assert parse_yaml("x: yes\ny: true") == {"x": "yes", "y": True}


def test_jobs_file_errors_name_file_and_index(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n  - {name: ok, team: t, work: {reference_hours: 1}}\n"
        "  - {name: bad, team: t, work: {reference_hours: 1}, colour: red}\n"
    )
    with pytest.raises(SpecErrors) as err:
        load_jobs_file(path, now=NOW, known_accelerators=KNOWN)
    assert [(e.source, e.field) for e in err.value.errors] == [(str(path), "jobs[1].colour")]


@pytest.mark.parametrize("content", ["jobs: {name: x}", "::: not yaml :::\n  - [", "42"])
def test_jobs_file_that_is_not_a_list_is_rejected(tmp_path: Path, content: str) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(content)
    with pytest.raises(SpecError):
        load_jobs_file(path, now=NOW, known_accelerators=KNOWN)


def test_budgets_file_parses_scopes_periods_and_spend(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(
        "budgets:\n"
        "  - {id: org, scope: {organisation: acme}, period: quarterly, limit_usd: 100000,"
        " emergency_reserve_usd: 5000, timezone: Europe/Berlin}\n"
        "  - {id: sprint, scope: {project: churn}, period: {start: 2026-11-30, days: 14},"
        " limit_usd: 300.10, thresholds: {P3: 0.5, P2: 0.6, P1: 0.9}}\n"
        "spend:\n  - {team: growth, amount_usd: 12.34, at: 2026-12-01T00:00:00Z}\n"
    )
    budgets, spend = load_budgets_file(path)
    org, sprint = budgets
    assert org.scope.kind is ScopeKind.ORGANISATION
    assert org.period.kind is PeriodKind.QUARTERLY
    assert org.allowance_usd(Tier.P0) == Decimal("105000")
    assert sprint.limit_usd == Decimal("300.10")
    assert sprint.allowance_usd(Tier.P3) == Decimal("150.050")
    assert spend[0].amount_usd == Decimal("12.34")


@pytest.mark.parametrize(
    ("budget", "field", "problem"),
    [
        ("{id: b, scope: {team: t}, limit_usd: 0}", "budgets[0].limit_usd", "greater than 0"),
        ("{id: b, scope: {team: t}, limit_usd: -10}", "budgets[0].limit_usd", "greater than 0"),
        ("{id: b, scope: {team: t, project: p}, limit_usd: 1}", "budgets[0].scope", "exactly one"),
        (
            "{id: b, scope: {team: t}, limit_usd: 1, timezone: Mars/Base}",
            "budgets[0].timezone",
            "unknown time zone",
        ),
        (  # was an OSError (file name too long) from the zone database
            f"{{id: b, scope: {{team: t}}, limit_usd: 1, timezone: {'Z' * 300}}}",
            "budgets[0].timezone",
            "at most 64 characters",
        ),
        (  # a name the zone database would look up as a path
            "{id: b, scope: {team: t}, limit_usd: 1, timezone: ../../../etc/passwd}",
            "budgets[0].timezone",
            "unknown time zone '../../../etc/passwd'",
        ),
        (
            "{id: b, scope: {team: t}, limit_usd: 1, thresholds: {P3: 0.9, P2: 0.8}}",
            "budgets[0].thresholds",
            "P3 <= P2",
        ),
        ("{id: b, scope: {team: t}, limit_usd: 1, period: weekly}", "budgets[0].period", ""),
        (
            "{id: b, scope: {team: t}, limit_usd: 1, emergency_reserve_usd: -1}",
            "budgets[0].emergency_reserve_usd",
            "greater than or equal to 0",
        ),
    ],
)
def test_invalid_budget_names_the_field(
    tmp_path: Path, budget: str, field: str, problem: str
) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(f"budgets:\n  - {budget}\n")
    with pytest.raises(SpecErrors) as err:
        load_budgets_file(path)
    errors = _errors(err.value)
    assert any(f.startswith(field) and problem in p for f, p in errors.items()), errors
