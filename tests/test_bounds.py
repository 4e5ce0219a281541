"""Bounded input at the API's door, closed metrics and security headers (issue 13, in part): every number and duration of a job
spec has a bound, and what breaks one is a 4xx problem document naming the field — never a 500
and never a job the planner cannot plan. Also what the schema alone cannot say: a command where
the backend runs commands, a job depending on itself, a webhook into the service's network, a
body that is not readable JSON."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from api_world import ADMIN, World, bill, job_spec
from budgeteer.clock import SystemClock
from budgeteer.domain.job import JobState


def _post(world: World, body: dict[str, Any]) -> Any:
    return world.http.post("/v1/jobs", json=body, headers=world.auth(world.growth))


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        (
            {"work": {"reference_hours": 1e12}},
            "work.reference_hours",
            "less than or equal to 1000000",
        ),
        ({"sla": "3000000d"}, "sla", "longer than 366 days"),
        ({"sla": None, "deadline": "2031-01-01T00:00:00Z"}, "deadline", "more than 366 days ahead"),
        ({"resources": {"workers": 100000}}, "resources.workers", "between 1 and 1024"),
        ({"resources": {"min_gpu_memory_gib": 1e9}}, "resources.min_gpu_memory_gib", "1024"),
        ({"budget_usd": "1e12"}, "budget_usd", "less than or equal to 1000000000"),
        ({"data": {"location": "aws/us-east-1", "size_gb": 1e12}}, "data.size_gb", "10000000"),
        ({"command": []}, "command", "required"),
        ({"depends_on": [{"job": "churn"}]}, "depends_on[0].job", "cannot depend on itself"),
        ({"webhook": {"url": "http://169.254.169.254/latest"}}, "webhook.url", "private"),
        ({"webhook": {"url": "http://localhost:8080/hook"}}, "webhook.url", "private"),
    ],
)
def test_out_of_bounds_is_a_422_naming_the_field(
    world: World, changes: dict[str, Any], field: str, problem: str
) -> None:
    body = {k: v for k, v in {**job_spec(), **changes}.items() if v is not None}
    r = _post(world, body)
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert [e["field"] for e in errors] == [field]  # one message, on the field at fault
    assert problem in errors[0]["problem"]
    assert world.store.jobs() == []  # nothing stored


def test_a_missing_command_is_refused_where_the_backend_runs_commands(world: World) -> None:
    body = {k: v for k, v in job_spec().items() if k != "command"}
    r = _post(world, body)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "command"


@pytest.mark.parametrize(
    "raw", [b'{"name": "\xff\xfe"}', b"[" * 20000 + b"]" * 20000], ids=["bad-utf8", "deep"]
)
def test_unreadable_bodies_get_errors_like_every_other_4xx(world: World, raw: bytes) -> None:
    r = world.http.post(
        "/v1/jobs",
        content=raw,
        headers={**world.auth(world.growth), "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["errors"][0]["field"] == "(body)"


def test_at_the_bounds_a_job_is_accepted_and_planned(world: World) -> None:
    big = job_spec(work={"reference_hours": 1_000_000}, sla="366d", resources={"workers": 1024})
    r = _post(world, big)
    assert r.status_code == 201, r.text
    why = world.http.get(r.json()["links"]["explain"], headers=world.auth(world.growth))
    assert why.status_code == 200
    assert why.json()["decision"] in {"admit", "hold"}


def test_metrics_need_the_admin_or_the_metrics_token(world: World) -> None:
    assert world.http.get("/metrics").status_code == 401  # every team's spend is there
    team = world.http.get("/metrics", headers=world.auth(world.growth))
    assert team.status_code == 401  # a team token sees only its team: not the whole
    assert world.http.get("/metrics", headers=world.auth(ADMIN)).status_code == 200
    world.ctx.metrics_token = "prometheus-scrape-token-0123"
    scrape = world.http.get("/metrics", headers=world.auth("prometheus-scrape-token-0123"))
    assert scrape.status_code == 200
    assert "budgeteer_queue_depth" in scrape.text
    world.ctx.metrics_public = True  # the operator opened it (serve warns)
    assert world.http.get("/metrics").status_code == 200


def test_every_response_carries_the_security_headers(world: World) -> None:
    for path, headers in [("/healthz", {}), ("/", world.auth(ADMIN)), ("/v1/jobs", {})]:
        r = world.http.get(path, headers=headers)
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert "content-security-policy" not in world.http.get("/docs").headers  # CDN scripts


def test_the_dashboard_says_why_a_job_failed_and_flags_a_budget_forecast_over_its_limit(
    world: World,
) -> None:
    admin = world.auth(ADMIN)
    world.http.post(
        "/v1/budgets",
        json={"id": "growth-monthly", "scope": {"team": "growth"}, "limit_usd": 1},
        headers=admin,
    )
    g = world.auth(world.growth)
    job_id = world.http.post("/v1/jobs", json=job_spec(), headers=g).json()["id"]
    for state in (JobState.QUEUED, JobState.PROVISIONING, JobState.RUNNING):
        world.store.transition(job_id, state, at=world.clock.now(), cause="test")
    world.store.transition(
        job_id, JobState.FAILED, at=world.clock.now(), cause="failed: exited 3 (OOM in step 7)"
    )
    bill(world, job_id, "5", market="on_demand")
    page = world.http.get("/", headers=admin).text
    assert "failed: exited 3 (OOM in step 7)" in page
    assert "forecast over the limit" in page


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        (["python", "-m", "mypkg.train", "--epochs", "3"], True),
        (["python", "-m", "mypkg.train"], True),
        (["python", "-c", "import os; os.system('id')"], False),
        (["python", "-m", "mypkg.train_evil"], False),
        (["/bin/sh", "-c", "cat /etc/shadow"], False),
        (["/tmp/python", "-m", "mypkg.train"], False),  # a path the operator did not name
        (["python", "-m"], False),
    ],
)
def test_commands_outside_the_allow_list_are_refused(
    world: World, command: list[str], allowed: bool
) -> None:
    world.ctx.run_any_command = False
    world.ctx.allowed_commands = (("python", "-m", "mypkg.train"),)
    r = _post(world, job_spec(command=command))
    if allowed:
        assert r.status_code == 201, r.text
    else:
        assert r.status_code == 403
        assert r.json()["errors"][0]["field"] == "command"
        assert world.store.jobs() == []


def test_by_default_no_command_runs() -> None:
    from budgeteer.config import ApiConfig  # noqa: PLC0415

    cfg = ApiConfig()
    assert cfg.allowed_commands == []
    assert cfg.run_any_command is False


def test_the_dashboard_shows_wall_clock_time_and_labels_a_simulated_clock(world: World) -> None:
    admin = world.auth(ADMIN)
    plain = world.http.get("/", headers=admin).text
    assert "simulated clock" not in plain  # a manual clock has no scale: shown as it is
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    world.ctx.clock = SystemClock(60.0, anchor)  # the sandbox's accelerated clock
    page = world.http.get("/", headers=admin).text
    assert "simulated clock:" in page
    assert "60× real time" in page
    wall = SystemClock().now()
    assert f"{wall:%Y-%m-%d}" in page.split("simulated clock:")[0]  # today's date first


def test_the_dashboard_shows_money_to_the_cent_and_times_for_people(world: World) -> None:
    admin = world.auth(ADMIN)
    world.http.post(
        "/v1/budgets",
        json={"id": "growth-monthly", "scope": {"team": "growth"}, "limit_usd": 2000},
        headers=admin,
    )
    g = world.auth(world.growth)
    job_id = world.http.post("/v1/jobs", json=job_spec(), headers=g).json()["id"]
    for state in (JobState.QUEUED, JobState.PROVISIONING, JobState.RUNNING):
        world.store.transition(job_id, state, at=world.clock.now(), cause="test")
    bill(world, job_id, "1234.567891")
    page = world.http.get("/", headers=admin).text
    assert "of $2,000.00" in page
    assert "accrued $1,234.57" in page  # rounded to the cent on the page …
    assert "1234.567891" not in page
    exact = world.http.get(f"/v1/jobs/{job_id}", headers=g).json()["cost"]["accrued_usd"]
    assert exact.startswith("1234.567891")  # … exact in the API
    assert re.search(r"\d{2}:\d{2}:\d{2}\.\d{6}", page) is None  # no raw ISO microseconds
    deadline = world.store.job(job_id).deadline
    assert deadline is not None
    assert f"{deadline:%Y-%m-%d %H:%M} UTC" in page
