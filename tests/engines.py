"""What the tests of real engines (Slurm, Ray) share: requiring the engine (a failure under CI,
a skip elsewhere), bounded waits in real time, ``budgeteer submit`` + ``run --until-idle`` of
one small V100 job from a config, and the preempted-on-spot → resumed-on-demand story through
the scheduler's loop."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest
import yaml

from budgeteer.backends.base import ComputeBackend, Handle, Status
from budgeteer.catalog import load_catalog
from budgeteer.clock import SystemClock
from budgeteer.domain.job import JobState
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.scheduler import Driver, Scheduler
from budgeteer.spec.batch import jobs_from_specs
from budgeteer.spec.job import JobSpec
from budgeteer.store import Attempt, SqlStore
from budgeteer.store.leader import LocalLeaderLock
from builders import job_env
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
    tmp_path: Path,
    backend: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    python: str = PY,
) -> Attempt:
    """Write a config with ``backend``, submit one small V100 job (run by ``python``: the
    jobs' user must be able to) that writes a file in its checkpoint folder, run the loop
    until idle; assert it succeeded and return its single attempt."""
    cfg = tmp_path / "budgeteer.yaml"
    doc = {"store": "sqlite:///state.db", "interval_seconds": 1, "backend": dict(backend)}
    cfg.write_text(yaml.safe_dump(doc))
    out = (
        tmp_path / str(backend.get("workdir", ".budgeteer")) / "checkpoints" / "retrain" / "trained"
    )
    write = "import os, time; time.sleep(3); "
    write += "open(os.environ['BUDGETEER_CHECKPOINT_DIR'] + '/trained', 'w').write('ok')"
    job = {
        "name": "retrain",
        "team": "t",
        "resources": {"accelerators": ["V100"]},
        "work": {"reference_hours": 0.01},
        # runs a few seconds: Slurm reports whole seconds, and a job ended within the second
        # it was launched in has no time to bill
        "command": [python, "-c", write],
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
    if "launched retrain" not in run.stderr:
        why = budgeteer("status", "retrain", "--config", str(cfg))
        raise AssertionError(f"not launched: {run.stderr[-2000:]}\n{why.stdout}{why.stderr}")
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


def resume_story(
    tmp_path: Path,
    backend: ComputeBackend,
    take_spot_away: Callable[[str], None],
    seconds: float = 240,
) -> None:
    """The scheduler's loop on a real engine: a job starts on the spot offering, the spot
    capacity is taken away mid-training (``take_spot_away(job_id)``, once a checkpoint
    exists), the job resumes from its checkpoint on the on-demand offering, and ends with
    exactly the model of an uninterrupted run (a restart from scratch would repeat epochs);
    every dollar is an attempt × its price, to the cent."""
    script = Path(__file__).parents[1] / "examples" / "train_linear.py"
    args = ["--epochs", "30", "--step-seconds", "0.02"]
    baseline = tmp_path / "baseline.npy"
    subprocess.run(
        [PY, str(script), *args, "--out", str(baseline)],
        check=True,
        timeout=120,
        env=job_env(BUDGETEER_CHECKPOINT_DIR=str(tmp_path / "base")),
    )
    full = load_catalog()
    catalog = dataclasses.replace(
        full, offerings=tuple(o for o in full.offerings if o.id in {V100_SPOT, V100_OD})
    )
    clock = SystemClock()
    store = SqlStore(f"sqlite:///{tmp_path / 'state.db'}")
    sched = Scheduler(store, backend, catalog, clock, tmp_path / "work" / "checkpoints")
    model = tmp_path / "model.npy"
    spec = JobSpec.model_validate(
        {
            "name": "retrain",
            "team": "t",
            "resources": {"accelerators": ["V100"]},
            "work": {"reference_hours": 0.05},
            "sla": "2h",
            "spot": {"allowed": True, "max_preemptions": 1},
            "checkpoint": {"interval_minutes": 1, "restart_overhead_minutes": 1},
            "command": [PY, str(script), *args, "--out", str(model)],
        }
    )
    (job,) = jobs_from_specs([spec], now=clock.now(), known_accelerators=list(catalog.throughput))
    store.submit([job], at=clock.now())
    driver = Driver(sched, LocalLeaderLock(), interval_seconds=1, min_gap_seconds=0.2)
    ck = tmp_path / "work" / "checkpoints" / job.id
    try:
        end = time.monotonic() + seconds
        taken = False
        while time.monotonic() < end and not store.job(job.id).state.is_terminal:
            assert driver.step(), driver.last_error
            attempts = store.attempts(job.id)
            if not taken and attempts and attempts[0].market == "spot" and (ck / "LATEST").exists():
                take_spot_away(job.id)  # the spot instance is taken back mid-training
                taken = True
            time.sleep(0.2)
        assert store.job(job.id).state is JobState.SUCCEEDED, store.events(job.id)
        first, second = store.attempts(job.id)
        assert first.market == "spot"
        assert first.outcome is AttemptOutcome.PREEMPTED, first
        assert second.market == "on_demand"
        # resumed, not restarted: the epochs never go back and none runs twice
        progress = [json.loads(line) for line in (ck / "progress.jsonl").read_text().splitlines()]
        epochs = [p["epoch"] for p in progress]
        assert epochs == sorted(epochs)
        assert len(set(epochs)) == len(epochs)
        assert np.array_equal(np.load(baseline), np.load(model))  # the same model
        total = sum((e.amount_usd for e in store.ledger(job.id)), Decimal(0))
        recomputed = Decimal(0)
        for a in (first, second):
            offering = next(o for o in catalog.offerings if o.id == a.offering_id)
            price, _ = backend.price(offering, a.started_at)
            assert a.ended_at is not None
            hours = Decimal(str((a.ended_at - a.started_at).total_seconds())) / Decimal(3600)
            recomputed += price * a.instances * hours
        assert abs(total - recomputed) < Decimal("0.01")  # to the cent
    finally:
        driver.close()
        store.close()


class RayTestCluster:
    """A real Ray cluster in this process tree (``ray.cluster_utils.Cluster``): a head carrying
    ``budgeteer-od`` (4), ``budgeteer-scarce`` (1) and ``budgeteer-pool`` (1), and a spot worker
    carrying ``budgeteer-spot`` (4) and ``budgeteer-pool`` (1); ``gcs`` is its GCS address."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster  # noqa: PLC0415

        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "include_dashboard": True,
                "dashboard_port": 0,
                "resources": {"budgeteer-od": 4, "budgeteer-scarce": 1, "budgeteer-pool": 1},
            },
        )
        self.spot_node = self.add_spot()
        self.address = f"http://{self.cluster.webui_url}"
        self.gcs = self.cluster.address
        self.wait_for_job_agent()

    def wait_for_job_agent(self, seconds: float = 90) -> None:
        """Until the Jobs API takes a submission (its agent starts after the dashboard)."""
        from ray.job_submission import JobSubmissionClient  # noqa: PLC0415

        client = JobSubmissionClient(self.address)
        end = time.monotonic() + seconds
        while True:
            try:
                sid = client.submit_job(entrypoint="true", entrypoint_num_cpus=0)
            except RuntimeError:
                if time.monotonic() > end:
                    raise
                time.sleep(1)
                continue
            break
        until(lambda: str(client.get_job_status(sid)).endswith(("SUCCEEDED", "FAILED")))

    def add_spot(self) -> Any:
        node = self.cluster.add_node(
            num_cpus=1, resources={"budgeteer-spot": 4, "budgeteer-pool": 1}
        )
        self.cluster.wait_for_nodes()
        return node

    def replace_spot(self) -> None:
        """A fresh spot node for the next test, the old one (drained or killed) gone."""
        if self.spot_node is not None:
            with contextlib.suppress(Exception):  # a drained node may have exited already
                self.cluster.remove_node(self.spot_node, allow_graceful=False)
        self.spot_node = self.add_spot()

    def drain(self, node: Any, deadline_seconds: int = 60) -> None:
        """What the autoscaler (or KubeRay) does before a spot instance is taken back."""
        subprocess.run(
            [
                PY,
                "-m",
                "ray.scripts.scripts",
                "drain-node",
                "--address",
                self.gcs,
                "--node-id",
                node.node_id,
                "--reason",
                "DRAIN_NODE_REASON_PREEMPTION",
                "--reason-message",
                "spot instance reclaimed",
                "--deadline-remaining-seconds",
                str(deadline_seconds),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
