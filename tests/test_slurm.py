"""The Slurm backend against a real local Slurm (``budgeteer.backends.slurm_local``: slurmctld + two slurmd,
partitions ``spot`` and ``ondemand``). Under ``CI=true`` a missing Slurm is a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from budgeteer.backends import CapacityUnavailable, LaunchFailed, LaunchRequest, RunState
from budgeteer.backends.jobuser import resolve_job_user
from budgeteer.backends.slurm import SlurmBackend, SlurmPlacement
from budgeteer.backends.slurm_local import LocalSlurm
from budgeteer.backends.slurm_parse import end_time, exit_code
from budgeteer.clock import ManualClock, SystemClock
from budgeteer.domain.job import JobState
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from budgeteer.store import SqlStore
from builders import make_offering
from engines import (
    V100_OD,
    V100_SPOT,
    resume_story,
    run_one_job,
    settle,
    until,
)
from test_cli import budgeteer

T0 = datetime(2026, 12, 3, 9, tzinfo=UTC)
PY = sys.executable
SPOT = make_offering("slurm-spot", market=Market.SPOT, price=0.9, max_instances=2)
OD = make_offering("slurm-od", price=3.06, max_instances=2)
PLACEMENTS = {SPOT.id: SlurmPlacement("spot"), OD.id: SlurmPlacement("ondemand")}


@pytest.fixture
def cluster(slurm_cluster: LocalSlurm) -> LocalSlurm:
    return slurm_cluster


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
    assert exit_code(0) == 0
    assert exit_code(3 << 8) == 3
    assert exit_code(9) == -9
    assert exit_code(15) == -15
    assert exit_code(None) is None


def test_an_end_time_in_whole_seconds_is_rounded_up_but_not_past_when_it_was_seen() -> None:
    launched = datetime(2026, 12, 3, 9, 0, 0, 700_000, tzinfo=UTC)
    slurm_end = int(datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC).timestamp())  # same second
    assert end_time(slurm_end, launched + timedelta(seconds=5)) == launched.replace(
        second=1, microsecond=0
    )
    assert end_time(slurm_end, launched + timedelta(milliseconds=100)) == launched + timedelta(
        milliseconds=100
    )
    assert end_time(None, launched) == launched


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
    backend: SlurmBackend, cluster: LocalSlurm, tmp_path: Path
) -> None:
    # on the real clock, as the service runs: a job over within its first second is billed
    real = SlurmBackend(
        SystemClock(), tmp_path / "real", PLACEMENTS, grace_seconds=30, environ=cluster.env
    )
    quick = real.launch(_request(tmp_path, [PY, "-c", "raise SystemExit(3)"], job="quick"))
    status = settle(real, quick)
    assert (status.state, status.exit_code) == (RunState.FAILED, 3)
    assert status.reason == "exited 3"
    assert status.ended_at is not None
    assert status.ended_at > quick.launched_at  # billed: its end is not cut to the second
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


def test_every_rank_of_a_multi_node_job_gets_the_notice(
    backend: SlurmBackend, cluster: LocalSlurm, tmp_path: Path
) -> None:
    """Budgeteer's notice (``scancel --signal=TERM`` to the steps) and Slurm's own end of a
    job (a cancel or a preemption: SIGTERM to every step, SIGKILL after ``KillWait``) reach each
    rank's process on each node, each with time to checkpoint."""
    script = (
        "import os, signal, sys, time, pathlib; r = os.environ['BUDGETEER_NODE_RANK']; "
        "signal.signal(signal.SIGTERM, "
        "lambda *a: (pathlib.Path(sys.argv[1] + r).write_text('TERM'), sys.exit(75))); "
        "pathlib.Path(sys.argv[1] + r + '.ready').touch(); time.sleep(600)"
    )
    for how, job in (("budgeteer", "gang-1"), ("slurm", "gang-2")):
        noticed = tmp_path / f"{how}-noticed"
        handle = backend.launch(
            _request(tmp_path, [PY, "-c", script, str(noticed)], instances=2, job=job)
        )
        until(lambda n=noticed: all(Path(f"{n}{r}.ready").exists() for r in "01"))  # type: ignore[misc]
        if how == "budgeteer":
            backend.stop(handle, "cancelled by user")
        else:
            cluster.run("scancel", handle.id)
        status = settle(backend, handle, 60)
        assert status.state is RunState.STOPPED, status
        assert [Path(f"{noticed}{r}").read_text() for r in "01"] == ["TERM", "TERM"], how


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
    # it got the notice and could checkpoint: slurmd delivers the signal after the controller
    # has marked the job failed, so on a loaded machine the file may come a moment later
    until(noticed.exists, seconds=60)
    assert noticed.read_text() == "TERM"


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


def test_jobs_run_as_the_configured_user_in_their_own_folder(
    cluster: LocalSlurm, tmp_path: Path, job_python: str
) -> None:
    """A root service never submits root jobs: ``sbatch --uid`` makes the job ``nobody``'s,
    started in its private checkpoint folder, which it alone may enter."""
    nobody = resolve_job_user("nobody")
    assert nobody is not None
    backend = SlurmBackend(
        ManualClock(T0), tmp_path / "work", PLACEMENTS, environ=cluster.env, run_as=nobody
    )
    report = "import os; open('who', 'w').write(f'{os.getuid()} {os.getgid()} {os.getcwd()}')"
    request = _request(tmp_path, [job_python, "-c", report], job="as-nobody")
    status = settle(backend, backend.launch(request))
    assert status.state is RunState.SUCCEEDED, status
    ck = request.checkpoint_dir
    assert (ck / "who").read_text() == f"{nobody.uid} {nobody.gid} {ck}"
    assert (ck.stat().st_uid, ck.stat().st_mode & 0o777) == (nobody.uid, 0o700)


def test_budgeteer_run_on_slurm_from_a_config(
    cluster: LocalSlurm, tmp_path: Path, job_python: str
) -> None:
    """Under root (as here) the config's jobs run as ``nobody`` (``backend.run_as``'s
    default), so their interpreter is one ``nobody`` can run (``job_python``)."""
    placements = {V100_SPOT: {"partition": "spot"}, V100_OD: {"partition": "ondemand"}}
    backend = {"kind": "slurm", "workdir": "work", "slurm_conf": str(cluster.conf)}
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}  # the config names it
    attempt = run_one_job(tmp_path, {**backend, "placements": placements}, env, job_python)
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
    """The scheduler's loop on the Slurm backend: the spot node is taken down mid-training
    (the job gets its notice: SIGTERM, checkpoint), and the job resumes on the on-demand
    partition (:func:`engines.resume_story`)."""
    backend = SlurmBackend(
        SystemClock(),
        tmp_path / "work",
        {V100_SPOT: SlurmPlacement("spot"), V100_OD: SlurmPlacement("ondemand")},
        grace_seconds=30,
        environ=cluster.env,
    )

    def take_spot_away(job_id: str) -> None:
        node = next(j["nodes"] for j in cluster.jobs() if j["name"] == f"bgt.{job_id}.1")
        cluster.down(str(node))

    try:
        resume_story(tmp_path, backend, take_spot_away)
    finally:
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
    cluster: LocalSlurm, tmp_path: Path, job_python: str
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
                    "command": [job_python, "-c", "import time; time.sleep(8)"],
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


def test_a_pool_on_slurm_counts_the_partitions_idle_nodes_and_holds_to_its_max(
    cluster: LocalSlurm, tmp_path: Path
) -> None:
    """A pooled Slurm offering's warm instances are its partition's idle nodes (what the
    planner prices without a wait); its ``max`` bounds what budgeteer runs there at once."""
    from budgeteer.core.pools import PoolSettings  # noqa: PLC0415

    pools = {OD.id: PoolSettings(OD.id, 0, 1, 0.0, 0.0, 600.0)}
    b = SlurmBackend(
        ManualClock(T0), tmp_path / "work", PLACEMENTS, environ=cluster.env, pools=pools
    )
    assert b.pool_settings() == pools
    assert b.warm_instances() == {OD.id: 2}  # both nodes of 'ondemand' idle; spot not pooled
    first = b.launch(_request(tmp_path, [PY, "-c", "import time; time.sleep(120)"]))
    until(lambda: b.status(first).state is RunState.RUNNING)
    until(lambda: b.warm_instances() == {OD.id: 1})  # one node now runs the job
    with pytest.raises(CapacityUnavailable, match=r"1 of 1 instances in use \(the pool's max\)"):
        b.launch(_request(tmp_path, [PY, "-c", "0"], job="job-2"))
    assert b.warm_data() == {}
    cluster.run("scancel", first.id)
    settle(b, first)
    until(lambda: b.warm_instances() == {OD.id: 2})


def test_pools_in_a_slurm_config_reach_the_backend_and_the_plans(tmp_path: Path) -> None:
    from budgeteer.config import load_config  # noqa: PLC0415
    from budgeteer.service.wiring import build  # noqa: PLC0415

    example = Path(__file__).parents[1] / "examples" / "slurm.yaml"
    doc = yaml.safe_load(example.read_text())
    placed = sorted(doc["backend"]["placements"])
    doc["pools"] = [{"offerings": placed[0], "max": 2, "batch_wait": {"P3": "1h"}}]
    doc["store"] = f"sqlite:///{tmp_path / 'pools.db'}"
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg, _ = load_config(path)
    sched = build(cfg, example.parent).scheduler()
    assert isinstance(sched.backend, SlurmBackend)
    [(oid, pool)] = sched.backend.pool_settings().items()
    assert (oid, pool.maximum, pool.batch_wait_by_tier) == (placed[0], 2, ((Tier.P3, 3600.0),))
    assert [v.settings.name for v in sched.snapshot().pools] == [placed[0]]
