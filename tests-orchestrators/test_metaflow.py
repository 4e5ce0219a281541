"""The Metaflow step helper, run by ``metaflow.Runner`` (local datastore) against a real
``budgeteer serve``: the step's artifact is the jobs; a failing gate fails the step with its
reason; no service configured is a clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import Service, need

FLOW = Path(__file__).parent / "flows" / "retrain_flow.py"


@pytest.fixture(autouse=True)
def _metaflow_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local datastore in the test's folder, and a user name (Metaflow refuses root's)."""
    monkeypatch.setenv("METAFLOW_DEFAULT_DATASTORE", "local")
    monkeypatch.setenv("METAFLOW_DATASTORE_SYSROOT_LOCAL", str(tmp_path))
    monkeypatch.setenv("METAFLOW_USER", "budgeteer-test")


def _run(tmp: Path, env: dict[str, str], **params: Any) -> Any:
    need("metaflow")
    from metaflow import Runner  # noqa: PLC0415

    with Runner(str(FLOW), cwd=str(tmp), env=env, show_output=False).run(**params) as running:
        return running.run, running.stdout + running.stderr


def test_a_step_runs_its_training_through_budgeteer(tmp_path: Path, service: Service) -> None:
    run, output = _run(
        tmp_path, {"BUDGETEER_URL": service.url, "BUDGETEER_TOKEN": service.token}, auc=0.9
    )
    assert run.successful, output[-5000:]
    jobs = run["train"].task.data.jobs
    assert [(j["name"], j["state"]) for j in jobs] == [
        ("train", "succeeded"),
        ("validate", "succeeded"),
    ]
    assert all(float(j["cost_usd"]) > 0 for j in jobs)


def test_a_failing_gate_fails_the_step_with_its_reason(tmp_path: Path, service: Service) -> None:
    run, output = _run(
        tmp_path, {"BUDGETEER_URL": service.url, "BUDGETEER_TOKEN": service.token}, auc=0.5
    )
    assert not run.successful
    assert "gate failed: auc = 0.5, needs auc ≥ 0.81" in output


def test_no_service_configured_is_a_clear_error(tmp_path: Path) -> None:
    run, output = _run(tmp_path, {"BUDGETEER_URL": "", "BUDGETEER_TOKEN": ""})
    assert not run.successful
    assert "url: not given, and BUDGETEER_URL is not set" in output
