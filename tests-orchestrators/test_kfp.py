"""The Kubeflow Pipelines component, run by kfp's local ``SubprocessRunner`` (no cluster)
against a real ``budgeteer serve``: the task's output is the jobs; a failing gate fails the
task with the gate's reason."""

# no ``from __future__ import annotations``: kfp reads the pipeline's annotations as types

import json
from typing import Any

import pytest

from conftest import Service, job, need, reporting


@pytest.fixture(scope="module")
def kfp_local(tmp_path_factory: pytest.TempPathFactory) -> Any:
    need("kfp")
    from kfp import local  # noqa: PLC0415

    root = tmp_path_factory.mktemp("kfp")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    from budgeteer.integrations import kfp as component  # noqa: PLC0415

    return component


def test_the_component_returns_the_jobs_it_ran(kfp_local: Any, service: Service) -> None:
    task = kfp_local.budgeteer_job(
        url=service.url,
        token=service.token,
        spec_json=json.dumps(job("kfp-churn")),
        run_id="run-1",
        poll_seconds=0.5,
    )
    [ended] = json.loads(task.output)
    assert (ended["name"], ended["state"]) == ("kfp-churn", "succeeded")
    assert float(ended["cost_usd"]) > 0


def test_a_pipeline_whose_gate_fails_fails_with_the_reason(
    kfp_local: Any, service: Service, capfd: pytest.CaptureFixture[str]
) -> None:
    from kfp import dsl  # noqa: PLC0415

    spec = {
        "name": "kfp-fraud",
        "jobs": [
            job("train"),
            job(
                "validate",
                reporting("auc", 0.7),
                depends_on=[{"job": "train"}],
                gate={"metric": "auc", "min": 0.81},
            ),
        ],
    }

    @dsl.pipeline
    def retrain(url: str, token: str, spec_json: str) -> None:
        kfp_local.budgeteer_job(
            url=url,
            token=token,
            spec_json=spec_json,
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            poll_seconds=0.5,
        )

    with pytest.raises(RuntimeError):
        retrain(url=service.url, token=service.token, spec_json=json.dumps(spec))
    logged = capfd.readouterr()
    text = logged.out + logged.err
    assert "gate failed: auc = 0.7, needs auc ≥ 0.81" in text


def test_bad_input_names_the_parameter(kfp_local: Any, service: Service) -> None:
    with pytest.raises(RuntimeError):
        kfp_local.budgeteer_job(url=service.url, token=service.token, spec_json="[1]", run_id="r")
    from budgeteer.integrations.kfp import _budgeteer_job  # noqa: PLC0415

    with pytest.raises(ValueError, match="spec_json: must be a JSON object"):
        _budgeteer_job(url=service.url, token="t", spec_json="[1]", run_id="r")
    with pytest.raises(ValueError, match="spec_json: not JSON"):
        _budgeteer_job(url=service.url, token="t", spec_json="{", run_id="r")
    with pytest.raises(ValueError, match="BUDGETEER_TOKEN is not set"):
        _budgeteer_job(url=service.url, token="", spec_json="{}", run_id="r")
