"""Time shown to people is wall-clock time; an accelerated clock's time is labelled as
simulated (issue 13)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api_world import ADMIN, World, job_spec
from budgeteer.clock import SystemClock, simulated_time


def test_an_accelerated_clock_is_labelled_in_errors_and_answers(world: World) -> None:
    wall = datetime.now(UTC)
    world.ctx.clock = SystemClock(120, anchor=wall - timedelta(hours=1))  # 119 h ahead
    ahead = wall + timedelta(hours=2)  # in the wall clock's future, the simulated clock's past
    r = world.http.post(
        "/v1/jobs",
        json=job_spec(sla=None, deadline=ahead.isoformat()),
        headers=world.auth(world.growth),
    )
    assert r.status_code == 422
    body = r.json()
    assert body["errors"][0]["field"] == "deadline"
    assert "not after the scheduler's current time" in body["errors"][0]["problem"]
    assert "simulated clock (120× real time)" in body["detail"]
    assert f"{wall:%Y-%m-%d %H}" in body["detail"]  # the wall clock, said beside it

    job_id = world.http.post("/v1/jobs", json=job_spec(), headers=world.auth(world.growth)).json()[
        "id"
    ]
    job = world.http.get(f"/v1/jobs/{job_id}", headers=world.auth(world.growth)).json()
    assert job["clock"]["simulated"] is True
    assert job["clock"]["scale"] == 120
    events = world.http.get(f"/v1/jobs/{job_id}/events", headers=world.auth(world.growth))
    assert events.json()["clock"]["scale"] == 120


def test_a_real_time_service_adds_no_label(world: World) -> None:
    assert simulated_time(world.ctx.clock) is None
    job_id = world.http.post("/v1/jobs", json=job_spec(), headers=world.auth(world.growth)).json()[
        "id"
    ]
    assert "clock" not in world.http.get(f"/v1/jobs/{job_id}", headers=world.auth(ADMIN)).json()


def test_token_records_carry_wall_clock_times(world: World) -> None:
    before = datetime.now(UTC)
    made = world.http.post(
        "/v1/tokens", json={"name": "n", "teams": ["x"]}, headers=world.auth(ADMIN)
    ).json()
    created = datetime.fromisoformat(made["created_at"])
    assert before - timedelta(seconds=5) <= created <= datetime.now(UTC)
    assert abs(created - world.clock.now()) > timedelta(days=1)  # not the service's clock
