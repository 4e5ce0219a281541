"""The Airflow provider with a real DAG run by ``dag.test()`` (SQLite metadata) against a real
``budgeteer serve``: a deferrable task succeeds when its job succeeds and fails with the job's
reason otherwise; the provider is discovered through its entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Service, need

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory, service: Service) -> dict[str, str]:
    need("airflow")
    home = tmp_path_factory.mktemp("airflow")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(HERE / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_CONN_BUDGETEER_DEFAULT": json.dumps(
            {"conn_type": "budgeteer", "host": service.url, "password": service.token}
        ),
    }
    airflow = str(Path(sys.executable).with_name("airflow"))
    migrate = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    return env


def _dag_test(env: dict[str, str], auc: float) -> tuple[dict[str, object], str]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "dags" / "budgeteer_test_dag.py")],
        env={**env, "GATE_AUC": str(auc)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert last.startswith("{"), output[-5000:]
    return json.loads(last), output


def test_the_provider_is_discovered_through_its_entry_point(airflow_env: dict[str, str]) -> None:
    airflow = str(Path(sys.executable).with_name("airflow"))
    listed = subprocess.run(
        [airflow, "providers", "list", "-o", "json"],
        env=airflow_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stderr[-3000:]
    names = {p["package_name"] for p in json.loads(listed.stdout)}
    assert "budgeteer" in names
    from budgeteer.integrations.airflow.hooks import BudgeteerHook  # noqa: PLC0415

    assert BudgeteerHook.get_ui_field_behaviour()["relabeling"]["password"] == "Token"


def test_tasks_succeed_with_their_jobs_and_fail_with_the_gate_reason(
    airflow_env: dict[str, str],
) -> None:
    result, output = _dag_test(airflow_env, auc=0.78)
    tasks = result["tasks"]
    assert isinstance(tasks, dict)
    assert tasks["retrain"]["state"] == "success", output[-5000:]
    [ended] = tasks["retrain"]["xcom"]
    assert (ended["name"], ended["state"]) == ("churn", "succeeded")
    assert float(ended["cost_usd"]) > 0
    assert tasks["gated"]["state"] == "failed"
    assert "validate" in output
    assert "gate failed: auc = 0.78, needs auc ≥ 0.81" in output
    assert "failed" in str(result["run"])
    assert "deferred" in output.lower()  # the tasks deferred to the trigger


def test_a_passing_gate_lets_the_pipeline_task_succeed(airflow_env: dict[str, str]) -> None:
    result, output = _dag_test(airflow_env, auc=0.9)
    tasks = result["tasks"]
    assert isinstance(tasks, dict)
    assert tasks["gated"]["state"] == "success", output[-5000:]
    assert [e["state"] for e in tasks["gated"]["xcom"]] == ["succeeded", "succeeded"]


def test_the_trigger_serializes_without_the_token() -> None:
    need("airflow")
    from budgeteer.integrations.airflow.triggers import BudgeteerJobTrigger  # noqa: PLC0415

    path, kwargs = BudgeteerJobTrigger(["a", "b"], "budgeteer_default", 2.0).serialize()
    assert path == "budgeteer.integrations.airflow.triggers.BudgeteerJobTrigger"
    assert kwargs == {
        "job_ids": ["a", "b"],
        "budgeteer_conn_id": "budgeteer_default",
        "poll_interval": 2.0,
    }
    rebuilt = BudgeteerJobTrigger(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)
