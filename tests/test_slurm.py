"""The Slurm backend against a real local Slurm (``slurm_cluster.py``: slurmctld + two slurmd,
partitions ``spot`` and ``ondemand``). Under ``CI=true`` a missing Slurm is a failure."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from budgeteer.backends import CapacityUnavailable, LaunchFailed, LaunchRequest, RunState
from budgeteer.backends.base import Handle, Status
from budgeteer.backends.slurm import SlurmBackend, SlurmPlacement, _exit_code
from budgeteer.clock import ManualClock
from budgeteer.domain.offering import Market
from builders import make_offering
from slurm_cluster import LocalSlurm, available

T0 = datetime(2026, 12, 3, 9, tzinfo=UTC)
PY = sys.executable
SPOT = make_offering("slurm-spot", market=Market.SPOT, price=0.9, max_instances=2)
OD = make_offering("slurm-od", price=3.06, max_instances=2)
PLACEMENTS = {SPOT.id: SlurmPlacement("spot"), OD.id: SlurmPlacement("ondemand")}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurm]:
    if not available():
        if os.environ.get("CI") == "true":
            pytest.fail("Slurm is not installed (.ci/run installs slurmctld slurmd slurm-client)")
        pytest.skip("Slurm is not installed (apt-get install slurmctld slurmd slurm-client)")
    if os.geteuid() != 0:
        pytest.skip("the local test cluster runs its daemons as root")
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


def _settle(backend: SlurmBackend, handle: Handle, seconds: float = 60) -> Status:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        status = backend.status(handle)
        if status.state.is_final:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{handle.id} did not end")


def _until(check: object, seconds: float = 60) -> None:
    LocalSlurm.wait_for(check, seconds)


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
    status = _settle(backend, handle)
    assert (status.state, status.exit_code) == (RunState.SUCCEEDED, 0)
    assert status.started_at is not None
    expected = f"2 4 job-1 on_demand False {os.getcwd()}"  # sbatch's folder, as in Slurm
    assert {f.name: f.read_text() for f in out.iterdir()} == {"0": expected, "1": expected}


def test_a_failing_job_is_failed_with_its_code_and_one_rank_brings_the_other_down(
    backend: SlurmBackend, tmp_path: Path
) -> None:
    status = _settle(backend, backend.launch(_request(tmp_path, [PY, "-c", "raise SystemExit(3)"])))
    assert (status.state, status.exit_code) == (RunState.FAILED, 3)
    assert status.reason == "exited 3"
    script = (
        "import os, sys, time; "
        "sys.exit(4) if os.environ['BUDGETEER_NODE_RANK'] == '1' else time.sleep(600)"
    )
    two = _request(tmp_path, [PY, "-c", script], instances=2, job="job-2")
    status = _settle(backend, backend.launch(two), 90)
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
    _until(lambda: backend.status(handle).state is RunState.RUNNING)
    _until(Path(f"{noticed}.ready").exists)  # the handler is installed
    backend.stop(handle, "cancelled by user")
    _until(noticed.exists, 30)  # the notice reached the job's process
    assert backend.status(handle).state is RunState.RUNNING  # inside its grace period
    assert isinstance(backend.clock, ManualClock)
    backend.clock.advance(31)
    status = _settle(backend, handle)
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
    _until(lambda: backend.status(first).state is RunState.RUNNING)
    with pytest.raises(CapacityUnavailable, match="0 of 2 nodes of partition 'ondemand'") as err:
        backend.launch(_request(tmp_path, [PY, "-c", "0"], job="job-9"))
    assert err.value.transient
    cluster.run("scancel", first.id)
    _settle(backend, first)


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
    _until(lambda: backend.status(handle).state is RunState.RUNNING)
    _until(Path(f"{noticed}.ready").exists)
    node = next(j["nodes"] for j in cluster.jobs() if str(j["job_id"]) == handle.id)
    cluster.down(str(node))  # the cloud took the instance back
    status = _settle(backend, handle)
    assert status.state is RunState.PREEMPTED, status
    assert status.reason.startswith("node_fail")
    assert noticed.read_text() == "TERM"  # it got the notice and could checkpoint


def test_a_restarted_scheduler_re_attaches_instead_of_launching_again(
    backend: SlurmBackend, cluster: LocalSlurm, tmp_path: Path
) -> None:
    request = _request(tmp_path, [PY, "-c", "import time; time.sleep(3)"], job="kept", attempt=2)
    handle = backend.launch(request)
    _until(lambda: backend.status(handle).state is RunState.RUNNING)
    again = SlurmBackend(
        ManualClock(T0), backend.workdir, PLACEMENTS, environ=cluster.env
    )  # a new process of the scheduler
    adopted = again.adopt(request)
    assert adopted is not None
    assert adopted.id == handle.id
    assert [j["name"] for j in cluster.jobs()].count("bgt.kept.2") == 1  # no second launch
    status = _settle(again, adopted)
    assert status.state is RunState.SUCCEEDED
    never = _request(tmp_path, [PY, "-c", "0"], job="never", attempt=1)
    assert again.adopt(never) is None
    # the record outlives Slurm's memory of the job
    third = SlurmBackend(ManualClock(T0), backend.workdir, PLACEMENTS, environ=cluster.env)
    kept = third.adopt(request)
    assert kept is not None
    assert third.status(kept).state is RunState.SUCCEEDED
