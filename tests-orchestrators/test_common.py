"""What the three integrations share, against the real service: submit with a key (a retry
finds the same jobs), wait, success or an error naming each job's reason."""

from __future__ import annotations

import pytest

from budgeteer.client import Client
from budgeteer.integrations.common import JobsDidNotSucceed, idempotency_key, run, submit
from conftest import Service, job, reporting


def test_keys_are_printable_and_bounded() -> None:
    assert idempotency_key("airflow", "dag 1", "run\t2", None, "", 3) == "airflow:dag_1:run_2:3"
    long = idempotency_key("x" * 300, "end")
    assert len(long) == 255
    assert long.endswith(":end")
    with pytest.raises(ValueError, match="non-empty"):
        idempotency_key(None, "")


def test_a_retried_submission_finds_the_same_job(service: Service) -> None:
    with Client(service.url, service.token) as client:
        first = submit(client, job("same-key"), "test:same-key")
        again = submit(client, job("same-key"), "test:same-key")
        other = submit(client, job("same-key"), "test:other-key")
    assert first == again
    assert other != first


def test_a_gate_that_fails_names_its_reason(service: Service) -> None:
    pipeline = {
        "name": "common-gate",
        "jobs": [
            job("train"),
            job(
                "validate",
                reporting("auc", 0.78),
                depends_on=[{"job": "train"}],
                gate={"metric": "auc", "min": 0.81},
            ),
            job("publish", promote=True),
        ],
    }
    with pytest.raises(JobsDidNotSucceed) as err:
        run(service.url, service.token, pipeline, "test:gate", timeout=300, poll_seconds=0.5)
    states = {e.name: e.state for e in err.value.ended}
    assert states == {
        "train": "succeeded",
        "validate": "gate_failed",
        "publish": "dependency_failed",
    }
    message = str(err.value)
    assert "validate" in message
    assert "gate failed: auc = 0.78, needs auc ≥ 0.81" in message
    assert "train" not in message.split(";", maxsplit=1)[0]  # only the jobs that did not succeed
