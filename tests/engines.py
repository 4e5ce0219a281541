"""What the tests of real engines (Slurm, Ray) share: requiring the engine (a failure under CI,
a skip elsewhere), bounded waits in real time, and ``budgeteer submit`` + ``run --until-idle``
of one small V100 job from a config."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from budgeteer.backends.base import ComputeBackend, Handle, Status
from budgeteer.domain.job import JobState
from budgeteer.store import Attempt, SqlStore
from test_cli import budgeteer

PY = sys.executable
#: The catalog offerings the engines' configs place (the planner sees only placed ones).
V100_SPOT = "aws/us-east-1/use1-az1/p3.2xlarge/spot"
V100_OD = "aws/us-east-1/*/p3.2xlarge/on_demand"


def engine_missing(why: str) -> NoReturn:
    """Under ``CI=true`` an engine the tests need must be there: fail; elsewhere, skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI must provide it: .ci/run)")
    pytest.skip(why)


def settle(backend: ComputeBackend, handle: Handle, seconds: float = 120) -> Status:
    """Poll the attempt until it ends; AssertionError after ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        status = backend.status(handle)
        if status.state.is_final:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{handle.id} did not end within {seconds} s")


def until(check: Callable[[], object], seconds: float = 120) -> None:
    """Poll ``check()`` until true; AssertionError after ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds} s")


def run_one_job(
    tmp_path: Path, backend: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> Attempt:
    """Write a config with ``backend``, submit one small V100 job that writes a file, run the
    loop until idle; assert it succeeded and return its single attempt."""
    cfg = tmp_path / "budgeteer.yaml"
    doc = {"store": "sqlite:///state.db", "interval_seconds": 1, "backend": dict(backend)}
    cfg.write_text(yaml.safe_dump(doc))
    out = tmp_path / "trained"
    job = {
        "name": "retrain",
        "team": "t",
        "resources": {"accelerators": ["V100"]},
        "work": {"reference_hours": 0.01},
        # runs a few seconds: Slurm reports whole seconds, and a job ended within the second
        # it was launched in has no time to bill
        "command": [PY, "-c", f"import time; time.sleep(3); open({str(out)!r}, 'w').write('ok')"],
    }
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump([job]))
    assert budgeteer("submit", str(jobs), "--config", str(cfg)).returncode == 0
    run = subprocess.run(
        [PY, "-m", "budgeteer", "run", "--config", str(cfg), "--until-idle", "--cycles", "600"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(env) if env is not None else None,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "launched retrain" in run.stderr
    assert out.read_text() == "ok"
    store = SqlStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        assert store.job("retrain").state is JobState.SUCCEEDED
        (attempt,) = store.attempts("retrain")
        entries = store.ledger("retrain")
        assert entries
        assert all(e.price_source for e in entries)
        return attempt
    finally:
        store.close()
