"""The Slurm backend against a real local Slurm (``budgeteer.backends.slurm_local``: slurmctld + two slurmd,
partitions ``spot`` and ``ondemand``). Under ``CI=true`` a missing Slurm is a failure."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from budgeteer.backends import CapacityUnavailable, LaunchFailed, LaunchRequest, RunState
from budgeteer.backends.slurm import SlurmBackend, SlurmPlacement, _exit_code
from budgeteer.backends.slurm_local import LocalSlurm, available
from budgeteer.clock import ManualClock
from budgeteer.domain.job import JobState
from budgeteer.domain.offering import Market
from budgeteer.store import SqlStore
from builders import make_offering
from engines import V100_OD, V100_SPOT, engine_missing, run_one_job, settle, until
from test_cli import budgeteer

T0 = datetime(2026, 12, 3, 9, tzinfo=UTC)
PY = sys.executable
SPOT = make_offering("slurm-spot", market=Market.SPOT, price=0.9, max_instances=2)
OD = make_offering("slurm-od", price=3.06, max_instances=2)
PLACEMENTS = {SPOT.id: SlurmPlacement("spot"), OD.id: SlurmPlacement("ondemand")}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurm]:
    if not available():
        engine_missing("Slurm is not installed (apt-get install slurmctld slurmd slurm-client)")
    if os.geteuid() != 0:
        engine_missing("the local test cluster runs its daemons as root")
    c = LocalSlurm(kill_wait=5).start()
    yield c
    c.stop()


@pytest.fixture
def backend(cluster: LocalSlurm, tmp_path: Path) -> Iterator[SlurmBackend]:
    b = SlurmBackend(
        ManualClock(T0), tmp_path / "work", PLACEMENTS, grace_seconds=30, environ=cluster.env
    )
    yield b
    for handle in b.live():
        cluster.run("scancel", handle.id)
    cluster.wait_for(lambda: not b.live(), 60)
    for node in ("n1", "n2"):
        if cluster.node_states().get(node, "").startswith(("down", "drain")):
            cluster.resume(node)
    cluster.wait_for(lambda: set(cluster.node_states().values()) == {"idle"}, 60)


def _request(tmp_path: Path, command: list[str], **kw: object) -> LaunchRequest:
    offering = kw.pop("offering", OD)
    return LaunchRequest(
        str(kw.pop("job", "job-1")),
        int(kw.pop("attempt", 1)),  # type: ignore[call-overload]
        offering,  # type: ignore[arg-type]
        tuple(command),
        tmp_path / "ckpt",
        **kw,  # type: ignore[arg-type]
    )


def test_exit_codes_are_decoded_from_the_raw_wait_status() -> None:
    assert _exit_code(0) == 0
    assert _exit_code(3 << 8) == 3
    assert _exit_code(9) == -9
    assert _exit_code(15) == -15
    assert _exit_code(None) is None


def test_a_job_runs_once_per_node_with_its_environment(
    backend: SlurmBackend, tmp_path: Path
) -> None:
    out = tmp_path / "ranks"
    out.mkdir()
    write = (
        "import os, sys, pathlib; e = os.environ; "
        "pathlib.Path(sys.argv[1], e['BUDGETEER_NODE_RANK']).write_text("
        "' '.join([e['BUDGETEER_NUM_NODES'], e['BUDGETEER_WORKERS'], e['BUDGETEER_JOB_ID'], "
        "e['BUDGETEER_MARKET'], str('BUDGETEER_ADMIN_TOKEN' in e), os.getcwd()]))"
    )
    os.environ["BUDGETEER_ADMIN_TOKEN"] = "must-not-reach-the-job"
    try:
        handle = backend.launch(
            _request(tmp_path, [PY, "-c", write, str(out)], instances=2, workers=4)
        )
    finally:
        del os.environ["BUDGETEER_ADMIN_TOKEN"]
    assert backend.status(handle).state in {RunState.PROVISIONING, RunState.RUNNING}
    status = settle(backend, handle)
    assert (status.state, status.exit_code) == (RunState.SUCCEEDED, 0)
    assert status.started_at is not None
    expected = f"2 4 job-1 on_demand False {os.getcwd()}"  # sbatch's folder, as in Slurm
    assert {f.name: f.read_text() for f in out.iterdir()} == {"0": expected, "1": expected}


def test_a_failing_job_is_failed_with_its_code_and_one_rank_brings_the_other_down(
    backend: SlurmBackend, tmp_path: Path
) -> None:
    status = settle(backend, backend.launch(_request(tmp_path, [PY, "-c", "raise SystemExit(3)"])))
    assert (status.state, status.exit_code) == (RunState.FAILED, 3)
    assert status.reason == "exited 3"
    script = (
        "import os, sys, time; "
        "sys.exit(4) if os.environ['BUDGETEER_NODE_RANK'] == '1' else time.sleep(600)"
    )
    two = _request(tmp_path, [PY, "-c", script], instances=2, job="job-2")
    status = settle(backend, backend.launch(two), 90)
    assert status.state is RunState.FAILED  # on spot or not: its own failure, not a preemption


def test_stop_sends_the_notice_then_cancels_after_the_grace(
    backend: SlurmBackend, cluster: LocalSlurm, tmp_path: Path
) -> None:
    noticed = tmp_path / "noticed"
    stubborn = (
        "import signal, sys, time, pathlib; "
        "signal.signal(signal.SIGTERM, lambda *a: pathlib.Path(sys.argv[1]).write_text('TERM')); "
        "pathlib.Path(sys.argv[1] + '.ready').touch(); time.sleep(600)"
    )
    handle = backend.launch(_request(tmp_path, [PY, "-c", stubborn, str(noticed)]))
    until(lambda: backend.status(handle).state is RunState.RUNNING)
    until(Path(f"{noticed}.ready").exists)  # the handler is installed
    backend.stop(handle, "cancelled by user")
    until(noticed.exists, 30)  # the notice reached the job's process
    assert backend.status(handle).state is RunState.RUNNING  # inside its grace period
    assert isinstance(backend.clock, ManualClock)
    backend.clock.advance(31)
    status = settle(backend, handle)
    assert (status.state, status.reason) == (RunState.STOPPED, "cancelled by user")


def test_capacity_and_placement_errors(
    backend: SlurmBackend, cluster: LocalSlurm, tmp_path: Path
) -> None:
    with pytest.raises(LaunchFailed, match="no Slurm placement"):
        backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=make_offering("elsewhere")))
    with pytest.raises(LaunchFailed, match="has 2 nodes, 3 asked for"):
        backend.launch(_request(tmp_path, [PY, "-c", "0"], instances=3))
    first = backend.launch(
        _request(tmp_path, [PY, "-c", "import time; time.sleep(120)"], instances=2)
    )
    until(lambda: backend.status(first).state is RunState.RUNNING)
    with pytest.raises(CapacityUnavailable, match="0 of 2 nodes of partition 'ondemand'") as err:
        backend.launch(_request(tmp_path, [PY, "-c", "0"], job="job-9"))
    assert err.value.transient
    cluster.run("scancel", first.id)
    settle(backend, first)


def test_a_node_taken_away_preempts_the_spot_job_which_gets_its_notice(
    backend: SlurmBackend, cluster: LocalSlurm, tmp_path: Path
) -> None:
    noticed = tmp_path / "noticed"
    script = (
        "import signal, sys, time, pathlib; "
        "signal.signal(signal.SIGTERM, "
        "lambda *a: (pathlib.Path(sys.argv[1]).write_text('TERM'), sys.exit(75))); "
        "pathlib.Path(sys.argv[1] + '.ready').touch(); time.sleep(600)"
    )
    handle = backend.launch(_request(tmp_path, [PY, "-c", script, str(noticed)], offering=SPOT))
    until(lambda: backend.status(handle).state is RunState.RUNNING)
    until(Path(f"{noticed}.ready").exists)
    node = next(j["nodes"] for j in cluster.jobs() if str(j["job_id"]) == handle.id)
    cluster.down(str(node))  # the cloud took the instance back
    status = settle(backend, handle)
    assert status.state is RunState.PREEMPTED, status
    assert status.reason.startswith("node_fail")
    assert noticed.read_text() == "TERM"  # it got the notice and could checkpoint


def test_a_restarted_scheduler_re_attaches_instead_of_launching_again(
    backend: SlurmBackend, cluster: LocalSlurm, tmp_path: Path
) -> None:
    request = _request(tmp_path, [PY, "-c", "import time; time.sleep(3)"], job="kept", attempt=2)
    handle = backend.launch(request)
    until(lambda: backend.status(handle).state is RunState.RUNNING)
    again = SlurmBackend(
        ManualClock(T0), backend.workdir, PLACEMENTS, environ=cluster.env
    )  # a new process of the scheduler
    adopted = again.adopt(request)
    assert adopted is not None
    assert adopted.id == handle.id
    assert [j["name"] for j in cluster.jobs()].count("bgt.kept.2") == 1  # no second launch
    status = settle(again, adopted)
    assert status.state is RunState.SUCCEEDED
    never = _request(tmp_path, [PY, "-c", "0"], job="never", attempt=1)
    assert again.adopt(never) is None
    # the record outlives Slurm's memory of the job
    third = SlurmBackend(ManualClock(T0), backend.workdir, PLACEMENTS, environ=cluster.env)
    kept = third.adopt(request)
    assert kept is not None
    assert third.status(kept).state is RunState.SUCCEEDED


def test_budgeteer_run_on_slurm_from_a_config(cluster: LocalSlurm, tmp_path: Path) -> None:
    placements = {V100_SPOT: {"partition": "spot"}, V100_OD: {"partition": "ondemand"}}
    backend = {"kind": "slurm", "workdir": "work", "slurm_conf": str(cluster.conf)}
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}  # the config names it
    attempt = run_one_job(tmp_path, {**backend, "placements": placements}, env)
    assert attempt.backend == "slurm"
    assert attempt.offering_id in placements
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {"backend": {"kind": "slurm", "placements": {"no/such/offering": {"partition": "x"}}}}
        )
    )
    refused = budgeteer("run", "--config", str(bad), "--cycles", "1")
    assert refused.returncode == 2
    assert "backend.placements.no/such/offering" in refused.stderr


def test_preempted_on_spot_resumes_from_its_checkpoint_on_demand_and_lands(
    cluster: LocalSlurm, tmp_path: Path
) -> None:
    """The scheduler's loop on the Slurm backend: the job starts on the spot partition, its node
    is taken away, it checkpoints on the notice, resumes from the checkpoint on the on-demand
    partition, and ends with exactly the model of an uninterrupted run; every dollar is an
    attempt × its price."""
    import numpy as np  # noqa: PLC0415

    from budgeteer.catalog import load_catalog  # noqa: PLC0415
    from budgeteer.clock import SystemClock  # noqa: PLC0415
    from budgeteer.scheduler import Driver, Scheduler  # noqa: PLC0415
    from budgeteer.spec.job import JobSpec, jobs_from_specs  # noqa: PLC0415
    from budgeteer.store.leader import LocalLeaderLock  # noqa: PLC0415

    script = Path(__file__).parents[1] / "examples" / "train_linear.py"
    args = ["--epochs", "30", "--step-seconds", "0.02"]
    baseline = tmp_path / "baseline.npy"
    subprocess.run(
        [PY, str(script), *args, "--out", str(baseline)],
        check=True,
        timeout=120,
        env={**os.environ, "BUDGETEER_CHECKPOINT_DIR": str(tmp_path / "base")},
    )
    spot_id, od_id = V100_SPOT, V100_OD
    full = load_catalog()
    catalog = dataclasses.replace(
        full, offerings=tuple(o for o in full.offerings if o.id in {spot_id, od_id})
    )
    clock = SystemClock()
    backend = SlurmBackend(
        clock,
        tmp_path / "work",
        {spot_id: SlurmPlacement("spot"), od_id: SlurmPlacement("ondemand")},
        grace_seconds=30,
        environ=cluster.env,
    )
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
        end = time.monotonic() + 240
        preempted = False
        while time.monotonic() < end and not store.job(job.id).state.is_terminal:
            assert driver.step(), driver.last_error
            attempts = store.attempts(job.id)
            if (
                not preempted
                and attempts
                and attempts[0].market == "spot"
                and (ck / "LATEST").exists()
            ):
                node = next(j["nodes"] for j in cluster.jobs() if j["name"] == f"bgt.{job.id}.1")
                cluster.down(str(node))  # the spot instance is taken back mid-training
                preempted = True
            time.sleep(0.2)
        assert store.job(job.id).state is JobState.SUCCEEDED, store.events(job.id)
        first, second = store.attempts(job.id)
        assert first.market == "spot"
        assert first.outcome is not None
        assert first.outcome.value == "preempted"
        assert second.market == "on_demand"
        # resumed, not restarted: the second attempt's first report is past epoch 0
        progress = [json.loads(line) for line in (ck / "progress.jsonl").read_text().splitlines()]
        epochs = [p["epoch"] for p in progress]
        assert epochs == sorted(epochs)  # never back to the start
        assert len(set(epochs)) == len(epochs)
        assert np.array_equal(np.load(baseline), np.load(model))  # the same model
        total = sum((e.amount_usd for e in store.ledger(job.id)), Decimal(0))
        recomputed = Decimal(0)
        for a in (first, second):
            price, _ = backend.price(
                next(o for o in catalog.offerings if o.id == a.offering_id), a.started_at
            )
            assert a.ended_at is not None
            hours = Decimal(str((a.ended_at - a.started_at).total_seconds())) / Decimal(3600)
            recomputed += price * a.instances * hours
        assert abs(total - recomputed) < Decimal("0.01")  # to the cent
    finally:
        driver.close()
        store.close()
        for n, state in cluster.node_states().items():
            if state.startswith(("down", "drain")):
                cluster.resume(n)


def _slurm_config(tmp_path: Path, cluster: LocalSlurm) -> Path:
    spot, od = V100_SPOT, V100_OD
    cfg = tmp_path / "sigkill.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "store": "sqlite:///sigkill.db",
                "interval_seconds": 1,
                "backend": {
                    "kind": "slurm",
                    "workdir": "work-sigkill",
                    "slurm_conf": str(cluster.conf),
                    "placements": {spot: {"partition": "spot"}, od: {"partition": "ondemand"}},
                },
            }
        )
    )
    return cfg


def test_a_sigkilled_run_re_attaches_to_the_running_slurm_job(
    cluster: LocalSlurm, tmp_path: Path
) -> None:
    cfg = _slurm_config(tmp_path, cluster)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "long",
                    "team": "t",
                    "resources": {"accelerators": ["V100"]},
                    "work": {"reference_hours": 0.01},
                    "spot": {"allowed": False},
                    "command": [PY, "-c", "import time; time.sleep(8)"],
                }
            ]
        )
    )
    assert budgeteer("submit", str(jobs), "--config", str(cfg)).returncode == 0
    first = subprocess.Popen(
        [PY, "-m", "budgeteer", "run", "--config", str(cfg)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stderr is not None
    try:
        for line in first.stderr:
            if line.startswith("launched long"):
                break
    finally:
        first.kill()  # SIGKILL: no goodbye, the Slurm job keeps running
        first.wait(timeout=30)
        first.stderr.close()
    assert [j["name"] for j in cluster.jobs()].count("bgt.long.1") == 1
    second = subprocess.run(
        [PY, "-m", "budgeteer", "run", "--config", str(cfg), "--until-idle", "--cycles", "600"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert second.returncode == 0, second.stderr
    assert "re-attached long" in second.stderr
    assert "launched long" not in second.stderr  # never a second launch
    names = [j["name"] for j in cluster.jobs()]
    assert names.count("bgt.long.1") == 1
    assert "bgt.long.2" not in names
    store = SqlStore(f"sqlite:///{tmp_path / 'sigkill.db'}")
    try:
        assert store.job("long").state is JobState.SUCCEEDED
        assert len(store.attempts("long")) == 1
    finally:
        store.close()


def test_the_example_slurm_config_plans_on_its_placements(tmp_path: Path) -> None:
    from budgeteer.config import load_config  # noqa: PLC0415
    from budgeteer.service.wiring import build  # noqa: PLC0415

    example = Path(__file__).parents[1] / "examples" / "slurm.yaml"
    cfg, root = load_config(example)
    cfg = cfg.model_copy(update={"store": f"sqlite:///{tmp_path / 'example.db'}"})
    sched = build(cfg, root).scheduler()
    assert sched.backend.name == "slurm"
    placed = set(cfg.backend.placements)  # type: ignore[union-attr]
    assert {o.id for o in sched.catalog.offerings} == placed
