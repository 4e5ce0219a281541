"""``POST /v1/signals``: a monitor's statistics, or raw samples, become a retrain through the
service's trigger policy — with the dedupe of ``budgeteer trigger`` and the API's team rules."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from api_world import ADMIN, World, make_world
from budgeteer.api.app import create_app
from budgeteer.triggers.policy import load_policy

EXAMPLES = Path(__file__).parents[1] / "examples" / "drift"
sys.path.insert(0, str(EXAMPLES))
from make_samples import sample  # noqa: E402


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = make_world(f"sqlite:///{tmp_path / 'api.db'}", tmp_path, max_body_bytes=4 * 1024 * 1024)
    ctx = dataclasses.replace(w.ctx, triggers=(load_policy(EXAMPLES / "policy.yaml"), EXAMPLES))
    w = dataclasses.replace(
        w, http=TestClient(create_app(ctx), raise_server_exceptions=False), ctx=ctx
    )
    yield w
    w.store.close()


def _stats(psi: float, ks: float = 0.0) -> dict[str, object]:
    return {
        "model": "churn",
        "statistics": [{"feature": "tenure", "psi": psi, "ks": ks, "js": 0.0}],
    }


def test_statistics_submit_once_and_a_weaker_signal_is_recorded(world: World) -> None:
    g = world.auth(world.growth)
    r = world.http.post("/v1/signals", json=_stats(0.7), headers=g)
    assert r.status_code == 201, r.text
    out = r.json()
    assert (out["severity"], out["decision"]["action"], out["decision"]["priority"]) == (
        "critical",
        "submit",
        "P0",
    )
    job = world.store.job(out["decision"]["job_id"])
    assert (job.name, job.team, job.tier.name) == ("churn-drift-retrain", "growth", "P0")
    again = world.http.post("/v1/signals", json=_stats(0.3), headers=g)
    assert again.status_code == 200
    assert again.json()["decision"]["action"] == "none"
    assert len(world.store.jobs()) == 1


def test_raw_samples_are_compared_by_the_service(world: World) -> None:
    cols = lambda rows: {k: [r[k] for r in rows] for k in rows[0]}  # noqa: E731
    body = {
        "model": "churn",
        "kind": "skew",
        "reference": cols(sample(1, 400, 0.0)),
        "current": cols(sample(5, 400, 0.15)),
    }
    r = world.http.post("/v1/signals", json=body, headers=world.auth(world.growth))
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["kind"] == "skew"
    assert {s["feature"] for s in out["signals"]} == {"tenure_months", "monthly_spend", "plan"}
    assert out["decision"]["variant"] in {"incremental", "full"}
    assert out["decision"]["job_id"] is not None


def test_teams_unknown_models_and_bad_bodies(world: World) -> None:
    search = world.auth(world.search)
    r = world.http.post("/v1/signals", json=_stats(0.7), headers=search)
    assert r.status_code == 403  # churn is growth's
    r = world.http.post(
        "/v1/signals", json={**_stats(0.7), "model": "ltv"}, headers=world.auth(ADMIN)
    )
    assert r.status_code == 422
    assert "model" in r.text
    both = {**_stats(0.7), "reference": {"x": [1.0]}, "current": {"x": [1.0]}}
    assert world.http.post("/v1/signals", json=both, headers=world.auth(ADMIN)).status_code == 422
    few = {"model": "churn", "reference": {"x": [1.0, 2.0]}, "current": {"x": [1.0, 2.0]}}
    r = world.http.post("/v1/signals", json=few, headers=world.auth(ADMIN))
    assert r.status_code == 422
    assert "reference.x" in r.text
    assert world.store.jobs() == []


def test_without_a_policy_signals_are_refused(tmp_path: Path) -> None:
    w = make_world(f"sqlite:///{tmp_path / 'api.db'}", tmp_path)
    try:
        r = w.http.post("/v1/signals", json=_stats(0.7), headers=w.auth(ADMIN))
        assert r.status_code == 409
        assert "triggers" in r.text
    finally:
        w.store.close()


def test_a_degrading_metric_asks_for_the_rules_level(world: World) -> None:
    rng = np.random.default_rng(4)
    steady = list(rng.normal(0.81, 0.01, 300))
    falling = steady + list(rng.normal(0.70, 0.01, 100))
    g = world.auth(world.growth)
    body = {"model": "churn", "kind": "degradation", "metric": "auc"}
    quiet = world.http.post("/v1/signals", json={**body, "values": steady}, headers=g)
    assert quiet.status_code == 200, quiet.text
    assert quiet.json()["decision"]["action"] == "none"
    r = world.http.post("/v1/signals", json={**body, "values": falling}, headers=g)
    assert r.status_code == 201, r.text
    out = r.json()
    assert (out["severity"], out["decision"]["priority"]) == ("major", "P1")
    bad = world.http.post("/v1/signals", json=body, headers=g)  # no values
    assert bad.status_code == 422


def test_signals_are_kept_listed_linked_counted_and_shown(world: World) -> None:
    g = world.auth(world.growth)
    job_id = world.http.post("/v1/signals", json=_stats(0.7), headers=g).json()["decision"][
        "job_id"
    ]
    world.http.post("/v1/signals", json=_stats(0.3), headers=g)  # recorded, nothing submitted
    listed = world.http.get("/v1/signals", headers=g).json()["signals"]
    assert [(s["severity"], s["action"], s["job_id"]) for s in listed] == [
        ("major", "none", None),
        ("critical", "submit", job_id),
    ]
    assert listed[1]["signals"] == [{"feature": "tenure", "psi": 0.7, "ks": 0.0, "js": 0.0}]
    assert world.http.get("/v1/signals", headers=world.auth(world.search)).json()["signals"] == []
    why = world.http.get(f"/v1/jobs/{job_id}/explain", headers=g).json()
    assert [s["severity"] for s in why["triggered_by"]] == ["critical"]
    metrics = world.http.get("/metrics", headers=world.auth(ADMIN)).text
    assert 'budgeteer_signals_total{action="submit",kind="drift"} 1.0' in metrics
    assert 'budgeteer_signals_total{action="none",kind="drift"} 1.0' in metrics
    page = world.http.get("/", headers=g).text
    assert 'id="signals"' in page
    assert job_id in page
