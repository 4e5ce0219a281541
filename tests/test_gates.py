"""Validation gates (issue 17): a pipeline step passes or fails by a metric of its last progress
report or by its exit code; a failed gate ends ``gate_failed`` (not ``failed``), its downstream
never starts, and what the run spent up to it is waste — in the ledger summary, the metrics and
the job's view. End to end on the sandbox with real processes."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from budgeteer.domain.job import Gate, JobState
from budgeteer.errors import SpecErrors
from budgeteer.ledger.waste import spend_by_job, waste_usd, wasted_jobs
from budgeteer.spec.batch import jobs_from_specs
from budgeteer.spec.job import JobSpec
from builders import NOW

PY = sys.executable


def test_gates_pass_by_their_bounds() -> None:
    g = Gate("auc", minimum=0.81)
    assert g.passes(0.81)
    assert not g.passes(0.8099)
    assert not g.passes(None)  # nothing reported: no pass
    assert Gate("loss", maximum=0.3).passes(0.3)
    assert not Gate("loss", maximum=0.3).passes(0.31)
    assert Gate("auc", 0.8, 0.9).describe() == "auc ≥ 0.8 and auc ≤ 0.9"
    assert Gate().describe() == "exit code 0"


@pytest.mark.parametrize(
    "gate",
    [
        {"exit_code": True, "metric": "auc", "min": 0.8},
        {"metric": "auc"},
        {"metric": "auc", "min": 0.9, "max": 0.8},
        {},
        {"metric": "a b", "min": 1},
    ],
)
def test_bad_gates_are_refused(gate: dict[str, Any]) -> None:
    spec = {"name": "v", "team": "t", "work": {"reference_hours": 1}, "gate": gate}
    with pytest.raises(SpecErrors) as err:
        JobSpec.parse(spec)
    assert any(e.field.startswith("gate") for e in err.value.errors)


def _steps(*extra: dict[str, Any]) -> list[JobSpec]:
    base = {"team": "t", "work": {"reference_hours": 1}}
    steps = [
        {**base, "name": "train"},
        {
            **base,
            "name": "auc",
            "gate": {"metric": "auc", "min": 0.8},
            "depends_on": [{"job": "train"}],
        },
        {**base, "name": "bias", "gate": {"exit_code": True}, "depends_on": [{"job": "train"}]},
        *extra,
    ]
    return [JobSpec.parse(s) for s in steps]


def test_a_promotion_step_waits_for_every_gate_of_its_batch() -> None:
    promote = {"name": "ship", "team": "t", "work": {"reference_hours": 1}, "promote": True}
    jobs = {j.id: j for j in jobs_from_specs(_steps(promote), now=NOW, known_accelerators=[])}
    assert {(d.job, d.on.value) for d in jobs["ship"].depends_on} == {
        ("auc", "success"),
        ("bias", "success"),
    }
    assert jobs["ship"].promote
    assert not jobs["auc"].promote
    # its own dependencies stay; a gate it already names is not added twice
    named = {**promote, "depends_on": [{"job": "train", "on": "any"}, {"job": "auc"}]}
    [*_, ship] = jobs_from_specs(_steps(named), now=NOW, known_accelerators=[])
    assert sorted((d.job, d.on.value) for d in ship.depends_on) == [
        ("auc", "success"),
        ("bias", "success"),
        ("train", "any"),
    ]


def test_bad_promotion_steps_are_refused() -> None:
    lone = [JobSpec.parse({"name": "a", "team": "t", "work": {"reference_hours": 1}})]
    lone.append(lone[0].model_copy(update={"name": "ship", "promote": True}))
    with pytest.raises(SpecErrors) as err:
        jobs_from_specs(lone, now=NOW, known_accelerators=[])
    [e] = err.value.errors
    assert (e.field, "no validation gate" in e.problem) == ("jobs[1].promote", True)
    gate_and_promote = {"metric": "auc", "min": 0.5}
    with pytest.raises(SpecErrors, match="promotion step cannot be a gate"):
        JobSpec.parse(
            {"name": "x", "team": "t", "work": {"reference_hours": 1}, "promote": True}
            | {"gate": gate_and_promote}
        )
    # alone (POST /v1/jobs), a promotion step waits for what its depends_on names
    [alone] = jobs_from_specs(lone[1:], now=NOW, known_accelerators=[], single=True)
    assert alone.promote
    assert alone.depends_on == ()


def _budgeteer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "budgeteer", *args], capture_output=True, text=True, timeout=300, check=False
    )


def _pipeline(tmp_path: Path, python: str, auc: float, validate_exit: int = 0) -> Path:
    """features → train → validate (gate auc ≥ 0.81, or its exit code) → package."""
    report = (
        "import json, os, sys; "
        "open(os.environ['BUDGETEER_PROGRESS_FILE'], 'a').write("
        f"json.dumps({{'step': 1, 'total_steps': 1, 'auc': {auc}}}) + '\\n'); "
        f"sys.exit({validate_exit})"
    )
    work = {"reference_hours": 0.01}
    step = {"team": "ads", "project": "fraud", "work": work, "resources": {"accelerators": ["T4"]}}
    jobs = [
        {**step, "name": "features", "command": [python, "-c", "import time; time.sleep(2)"]},
        {
            **step,
            "name": "train",
            "command": [python, "-c", "import time; time.sleep(2)"],
            "depends_on": [{"job": "features"}],
        },
        {
            **step,
            "name": "validate",
            "command": [python, "-c", report],
            "depends_on": [{"job": "train"}],
            "gate": {"exit_code": True} if validate_exit else {"metric": "auc", "min": 0.81},
        },
        {
            **step,
            "name": "package",
            "command": [python, "-c", "print('shipped')"],
            "depends_on": [{"job": "validate"}],
        },
        {  # names only features: waits for the gate because it promotes
            **step,
            "name": "publish",
            "command": [python, "-c", "print('promoted')"],
            "depends_on": [{"job": "features"}],
            "promote": True,
        },
    ]
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(jobs))
    cfg = tmp_path / "budgeteer.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "store": "sqlite:///state.db",
                "interval_seconds": 1,
                "backend": {"kind": "sandbox", "time_scale": 60},
            }
        )
    )
    assert _budgeteer("submit", str(path), "--config", str(cfg)).returncode == 0
    run = _budgeteer("run", "--config", str(cfg), "--until-idle", "--cycles", "600")
    assert run.returncode == 0, run.stderr
    return cfg


def _store(cfg: Path) -> Any:
    from budgeteer.config import load_config  # noqa: PLC0415
    from budgeteer.service.wiring import build  # noqa: PLC0415

    return build(*load_config(cfg)).store


def test_a_gate_below_its_metric_stops_the_pipeline_and_its_spend_is_waste(
    tmp_path: Path, job_python: str
) -> None:
    cfg = _pipeline(tmp_path, job_python, auc=0.78)
    store = _store(cfg)
    states = {j.name: j.state for j in store.jobs()}
    assert states == {
        "features": JobState.SUCCEEDED,
        "train": JobState.SUCCEEDED,
        "validate": JobState.GATE_FAILED,
        "package": JobState.DEPENDENCY_FAILED,
        "publish": JobState.DEPENDENCY_FAILED,
    }
    by_name = {j.name: j for j in store.jobs()}
    assert store.attempts(by_name["package"].id) == []  # downstream never started
    assert store.attempts(by_name["publish"].id) == []  # nothing promoted
    cause = store.events(by_name["validate"].id)[-1].cause
    assert "gate failed: auc = 0.78, needs auc ≥ 0.81" in cause
    # waste: the run up to the gate — recomputed from the ledger of those three steps
    spent = spend_by_job((e.job_id, e.amount_usd) for e in store.ledger())
    expected = sum((spent[by_name[n].id] for n in ("features", "train", "validate")), Decimal(0))
    assert expected > 0
    jobs = {j.id: j for j in store.jobs()}
    assert waste_usd(jobs, spent) == expected
    assert wasted_jobs(jobs)[by_name["validate"].id] == {
        by_name[n].id for n in ("features", "train", "validate")
    }
    ledger = _budgeteer("ledger", "--config", str(cfg))
    assert "waste (runs a validation gate stopped" in ledger.stdout


def test_a_gate_that_passes_lets_the_pipeline_finish(tmp_path: Path, job_python: str) -> None:
    cfg = _pipeline(tmp_path, job_python, auc=0.84)
    store = _store(cfg)
    states = {j.name: j.state for j in store.jobs()}
    assert states["package"] is states["publish"] is JobState.SUCCEEDED
    publish = next(j for j in store.jobs() if j.name == "publish")
    validate_id = next(j.id for j in store.jobs() if j.name == "validate")
    started = store.attempts(publish.id)[0].started_at
    assert started >= store.events(validate_id)[-1].at  # promoted only after the gate passed
    validate = next(j for j in store.jobs() if j.name == "validate")
    assert "gate passed: auc = 0.84" in store.events(validate.id)[-1].cause
    jobs = {j.id: j for j in store.jobs()}
    assert waste_usd(jobs, spend_by_job((e.job_id, e.amount_usd) for e in store.ledger())) == 0


def test_an_exit_code_gate_fails_as_a_gate_not_as_a_crash(tmp_path: Path, job_python: str) -> None:
    cfg = _pipeline(tmp_path, job_python, auc=0.9, validate_exit=3)
    states = {j.name: j.state for j in _store(cfg).jobs()}
    assert states["validate"] is JobState.GATE_FAILED
    assert states["package"] is JobState.DEPENDENCY_FAILED


def _failed_run(w: Any, gate: dict[str, Any]) -> dict[str, str]:
    """A pipeline recs: train ($3.50, succeeded) → validate ($0.25, its gate failed) →
    package (never started); the step ids by name."""
    from api_world import bill, job_spec  # noqa: PLC0415

    body = {
        "name": "recs",
        "jobs": [
            job_spec("train"),
            {**job_spec("validate"), "depends_on": [{"job": "train"}], "gate": gate},
            {**job_spec("package"), "depends_on": [{"job": "validate"}]},
        ],
    }
    r = w.http.post("/v1/pipelines", json=body, headers=w.auth(w.growth))
    assert r.status_code == 201, r.text
    ids = {name: h["id"] for name, h in r.json()["jobs"].items()}
    now = w.clock.now()
    for name, usd, end in (
        ("train", "3.50", JobState.SUCCEEDED),
        ("validate", "0.25", JobState.GATE_FAILED),
    ):
        for state in (JobState.QUEUED, JobState.PROVISIONING, JobState.RUNNING, end):
            w.store.transition(ids[name], state, at=now, cause=f"to {state.value}")
        bill(w, ids[name], usd)
    return ids


def test_waste_shows_in_the_job_view_the_metrics_and_the_dashboard(tmp_path: Path) -> None:
    from api_world import ADMIN, make_world  # noqa: PLC0415

    w = make_world(f"sqlite:///{tmp_path / 'api.db'}", tmp_path)
    try:
        g = w.auth(w.growth)
        ids = _failed_run(w, {"metric": "auc", "min": 0.81})
        view = w.http.get(f"/v1/jobs/{ids['validate']}", headers=g).json()
        assert view["state"] == "gate_failed"
        assert (view["end_reason"], view["hold_reason"]) == ("to gate_failed", None)
        pending = w.http.get(f"/v1/jobs/{ids['package']}", headers=g).json()
        assert pending["end_reason"] is None  # not ended yet
        assert Decimal(view["cost"]["waste_usd"]) == Decimal("3.75")
        assert w.http.get(f"/v1/jobs/{ids['train']}", headers=g).json()["cost"]["waste_usd"] is None
        assert (
            "budgeteer_waste_usd_total 3.75" in w.http.get("/metrics", headers=w.auth(ADMIN)).text
        )
        page = w.http.get("/", headers=g).text
        assert 'id="waste">$3.75' in page
    finally:
        w.store.close()


def test_the_pipeline_budget_view_gives_each_step_the_total_and_the_waste(tmp_path: Path) -> None:
    from api_world import make_world  # noqa: PLC0415

    w = make_world(f"sqlite:///{tmp_path / 'api.db'}", tmp_path)
    try:
        g = w.auth(w.growth)
        _failed_run(w, {"exit_code": True})
        view = w.http.get("/v1/pipelines/recs", headers=g).json()
        steps = {s["name"]: s for s in view["steps"]}
        assert (steps["validate"]["state"], steps["validate"]["gate"]) == (
            "gate_failed",
            "exit code 0",
        )
        assert Decimal(steps["train"]["cost_usd"]) == Decimal("3.50")
        assert Decimal(steps["package"]["cost_usd"]) == 0
        assert (Decimal(view["cost_usd"]), Decimal(view["waste_usd"])) == (
            Decimal("3.75"),
            Decimal("3.75"),
        )
        assert w.http.get("/v1/pipelines/recs", headers=w.auth(w.search)).status_code == 404
        assert w.http.get("/v1/pipelines/nope", headers=g).status_code == 404
    finally:
        w.store.close()
