"""The Ray backend against a real local Ray cluster (``ray.cluster_utils.Cluster``: a head node
providing the on-demand resource and a worker node providing the spot one). Under ``CI=true`` a
missing Ray is a failure (``.ci/run`` installs ``ray[default]``)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from budgeteer.backends import CapacityUnavailable, LaunchFailed, LaunchRequest, RunState
from budgeteer.backends.ray import RayBackend
from budgeteer.clock import ManualClock, SystemClock
from budgeteer.domain.offering import Market
from builders import make_offering
from engines import (
    V100_OD,
    V100_SPOT,
    RayTestCluster,
    resume_story,
    run_one_job,
    settle,
    until,
)

T0 = datetime(2026, 12, 3, 9, tzinfo=UTC)
PY = sys.executable
SPOT = make_offering("ray-spot", market=Market.SPOT, price=0.9)
OD = make_offering("ray-od", price=3.06)
SCARCE = make_offering("ray-scarce", price=5.0)
POOL = make_offering("ray-pool", price=2.0)  # one unit on each of the two nodes
PLACEMENTS = {
    SPOT.id: "budgeteer-spot",
    OD.id: "budgeteer-od",
    SCARCE.id: "budgeteer-scarce",
    POOL.id: "budgeteer-pool",
}


@pytest.fixture
def cluster(ray_cluster: RayTestCluster) -> RayTestCluster:
    return ray_cluster


@pytest.fixture
def backend(cluster: RayTestCluster) -> Iterator[RayBackend]:
    b = RayBackend(ManualClock(T0), cluster.address, PLACEMENTS, gcs_address=cluster.gcs)
    yield b
    for handle in b.live():
        b.stop(handle, "test teardown")


def _request(tmp_path: Path, command: list[str], **kw: Any) -> LaunchRequest:
    return LaunchRequest(
        kw.pop("job", f"job-{time.monotonic_ns()}"),
        kw.pop("attempt", 1),
        kw.pop("offering", OD),
        tuple(command),
        tmp_path / "ckpt",
        **kw,
    )


def test_a_job_runs_with_its_environment_and_its_exit_code(
    backend: RayBackend, tmp_path: Path
) -> None:
    out = tmp_path / "env"
    dump = (
        "import os, sys, pathlib; e = os.environ; pathlib.Path(sys.argv[1]).write_text(' '.join("
        "[e['BUDGETEER_JOB_ID'], e['BUDGETEER_MARKET'], str('BUDGETEER_ADMIN_TOKEN' in e)]))"
    )
    os.environ["BUDGETEER_ADMIN_TOKEN"] = "must-not-reach-the-job"
    try:
        handle = backend.launch(_request(tmp_path, [PY, "-c", dump, str(out)], job="env-1"))
    finally:
        del os.environ["BUDGETEER_ADMIN_TOKEN"]
    assert handle.id == "bgt-env-1-1"
    status = settle(backend, handle)
    assert (status.state, status.exit_code) == (RunState.SUCCEEDED, 0)
    assert out.read_text() == "env-1 on_demand False"
    failing = backend.launch(_request(tmp_path, [PY, "-c", "raise SystemExit(3)"]))
    status = settle(backend, failing)
    assert (status.state, status.exit_code, status.reason) == (RunState.FAILED, 3, "exited 3")


#: A job that says when it listens (``<arg><rank>.ready``) and, on SIGTERM, that it heard
#: (``<arg><rank>`` = TERM), then exits 75.
_TERM_SCRIPT = (
    "import os, signal, sys, time, pathlib; r = os.environ['BUDGETEER_NODE_RANK']; "
    "signal.signal(signal.SIGTERM, "
    "lambda *a: (pathlib.Path(sys.argv[1] + r).write_text('TERM'), sys.exit(75))); "
    "pathlib.Path(sys.argv[1] + r + '.ready').touch(); time.sleep(600)"
)


def test_stop_sends_the_notice(backend: RayBackend, tmp_path: Path) -> None:
    noticed = tmp_path / "noticed"
    handle = backend.launch(_request(tmp_path, [PY, "-c", _TERM_SCRIPT, str(noticed)]))
    until(Path(f"{noticed}0.ready").exists)
    backend.stop(handle, "cancelled by user")
    status = settle(backend, handle)
    assert (status.state, status.reason) == (RunState.STOPPED, "cancelled by user")
    assert Path(f"{noticed}0").read_text() == "TERM"


def test_an_attempt_on_two_nodes_runs_every_rank_and_fails_as_one(
    backend: RayBackend, tmp_path: Path
) -> None:
    """Two instances: the gang reserves one node of each ``budgeteer-pool`` unit (a placement
    group) and runs the command on each with its rank; a third is beyond the cluster."""
    out = tmp_path / "ranks"
    out.mkdir()
    write = (
        "import os, sys, pathlib; e = os.environ; "
        "pathlib.Path(sys.argv[1], e['BUDGETEER_NODE_RANK']).write_text("
        "e['BUDGETEER_NUM_NODES'] + ' ' + e['BUDGETEER_JOB_ID'])"
    )
    handle = backend.launch(
        _request(tmp_path, [PY, "-c", write, str(out)], offering=POOL, instances=2, job="gang")
    )
    assert handle.instance_ids == ("ray-bgt-gang-1-0", "ray-bgt-gang-1-1")
    with pytest.raises(CapacityUnavailable, match="2 of 2 'budgeteer-pool' in use, 1 asked"):
        backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=POOL))
    status = settle(backend, handle)
    assert (status.state, status.exit_code) == (RunState.SUCCEEDED, 0), status
    assert {f.name: f.read_text() for f in out.iterdir()} == {"0": "2 gang", "1": "2 gang"}
    # rank 1 fails at once; rank 0 would sleep ten minutes unless brought down
    script = (
        "import os, sys, time; "
        "sys.exit(4) if os.environ['BUDGETEER_NODE_RANK'] == '1' else time.sleep(600)"
    )
    failing = backend.launch(
        _request(tmp_path, [PY, "-c", script], offering=POOL, instances=2, job="gang-bad")
    )
    status = settle(backend, failing)
    assert (status.state, status.exit_code) == (RunState.FAILED, 4), status


def test_stop_reaches_every_rank_of_a_gang(backend: RayBackend, tmp_path: Path) -> None:
    noticed = tmp_path / "noticed"
    handle = backend.launch(
        _request(tmp_path, [PY, "-c", _TERM_SCRIPT, str(noticed)], offering=POOL, instances=2)
    )
    until(lambda: all(Path(f"{noticed}{r}.ready").exists() for r in "01"))
    backend.stop(handle, "cancelled by user")
    status = settle(backend, handle)
    assert (status.state, status.reason) == (RunState.STOPPED, "cancelled by user")
    assert [Path(f"{noticed}{r}").read_text() for r in "01"] == ["TERM", "TERM"]


def test_errors_and_re_attach(backend: RayBackend, cluster: RayTestCluster, tmp_path: Path) -> None:
    with pytest.raises(LaunchFailed, match="no Ray placement"):
        backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=make_offering("elsewhere")))
    request = _request(tmp_path, [PY, "-c", "import time; time.sleep(3)"], job="kept")
    handle = backend.launch(request)
    with pytest.raises(LaunchFailed, match="refused"):  # the same attempt cannot run twice
        backend.launch(request)
    again = RayBackend(ManualClock(T0), cluster.address, PLACEMENTS)  # a restarted scheduler
    adopted = again.adopt(request)
    assert adopted is not None
    assert adopted.id == handle.id
    assert settle(again, adopted).state is RunState.SUCCEEDED
    assert again.adopt(_request(tmp_path, [PY, "-c", "0"], job="never")) is None


def test_a_spot_node_taken_away_preempts_its_job(
    backend: RayBackend, cluster: RayTestCluster, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    script = "import sys, time, pathlib; pathlib.Path(sys.argv[1]).touch(); time.sleep(600)"
    handle = backend.launch(_request(tmp_path, [PY, "-c", script, str(ready)], offering=SPOT))
    until(ready.exists)
    cluster.cluster.remove_node(cluster.spot_node, allow_graceful=False)
    cluster.spot_node = None
    try:
        status = settle(backend, handle)
        assert status.state is RunState.PREEMPTED, status
        assert status.reason.startswith("node lost")
    finally:
        cluster.replace_spot()


def test_a_drained_spot_node_gives_its_job_the_notice_and_the_attempt_is_preempted(
    backend: RayBackend, cluster: RayTestCluster, tmp_path: Path
) -> None:
    noticed = tmp_path / "noticed"
    handle = backend.launch(
        _request(tmp_path, [PY, "-c", _TERM_SCRIPT, str(noticed)], offering=SPOT)
    )
    until(Path(f"{noticed}0.ready").exists)
    assert backend.status(handle).state is RunState.RUNNING
    cluster.drain(cluster.spot_node)
    try:
        status = settle(backend, handle)
        assert status.state is RunState.PREEMPTED, status  # never failed, never "stopped"
        assert "drained" in status.reason
        assert Path(f"{noticed}0").read_text() == "TERM"  # its notice: time to checkpoint
        time.sleep(1.5)  # past the node reading's reuse
        with pytest.raises(CapacityUnavailable, match="no node carries 'budgeteer-spot'"):
            backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=SPOT))
    finally:
        cluster.replace_spot()


def test_capacity_comes_from_the_cluster_nodes(backend: RayBackend, tmp_path: Path) -> None:
    """One node carries one unit of ``budgeteer-scarce``: a second attempt is refused up front
    (the scheduler backs off) rather than left pending in Ray's queue."""
    first = backend.launch(
        _request(tmp_path, [PY, "-c", "import time; time.sleep(600)"], offering=SCARCE)
    )
    with pytest.raises(CapacityUnavailable, match="1 of 1 'budgeteer-scarce' in use, 1 asked"):
        backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=SCARCE))
    backend.stop(first, "make room")
    assert settle(backend, first).state is RunState.STOPPED
    second = backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=SCARCE))
    assert settle(backend, second).state is RunState.SUCCEEDED


def test_drained_on_spot_resumes_from_its_checkpoint_on_demand_and_lands(
    cluster: RayTestCluster, tmp_path: Path
) -> None:
    """The scheduler's loop on Ray: the spot node is drained mid-training (the autoscaler's
    preemption path: the job gets its notice, checkpoints), and the job resumes on the
    on-demand node (:func:`engines.resume_story`)."""
    backend = RayBackend(
        SystemClock(),
        cluster.address,
        {V100_SPOT: "budgeteer-spot", V100_OD: "budgeteer-od"},
        gcs_address=cluster.gcs,
    )
    try:
        resume_story(tmp_path, backend, lambda _job_id: cluster.drain(cluster.spot_node))
    finally:
        cluster.replace_spot()


def test_budgeteer_run_on_ray_from_a_config(cluster: RayTestCluster, tmp_path: Path) -> None:
    placements = {V100_SPOT: "budgeteer-spot", V100_OD: "budgeteer-od"}
    backend = {"kind": "ray", "address": cluster.address, "workdir": "work"}
    attempt = run_one_job(tmp_path, {**backend, "placements": placements})
    assert attempt.backend == "ray"
    assert attempt.offering_id in placements


def test_the_example_ray_config_plans_on_its_placements(tmp_path: Path) -> None:
    from budgeteer.config import load_config  # noqa: PLC0415
    from budgeteer.service.wiring import build  # noqa: PLC0415

    cfg, root = load_config(Path(__file__).parents[1] / "examples" / "ray.yaml")
    cfg = cfg.model_copy(update={"store": f"sqlite:///{tmp_path / 'example.db'}"})
    sched = build(cfg, root).scheduler()
    assert sched.backend.name == "ray"
    assert {o.id for o in sched.catalog.offerings} == set(cfg.backend.placements)  # type: ignore[union-attr]


def test_a_pool_on_ray_counts_free_units_and_holds_to_its_max(
    cluster: RayTestCluster, tmp_path: Path
) -> None:
    """A pooled Ray offering's warm instances are the free units of its resource on the live
    nodes (one ``budgeteer-pool`` unit on each of the two); its ``max`` bounds what budgeteer
    runs there at once, before the cluster's own capacity."""
    from budgeteer.core.pools import PoolSettings  # noqa: PLC0415

    pools = {POOL.id: PoolSettings(POOL.id, 0, 1, 0.0, 0.0, 600.0)}
    b = RayBackend(
        ManualClock(T0), cluster.address, PLACEMENTS, gcs_address=cluster.gcs, pools=pools
    )
    assert b.pool_settings() == pools
    assert b.warm_instances() == {POOL.id: 2}
    first = b.launch(_request(tmp_path, [PY, "-c", "import time; time.sleep(600)"], offering=POOL))
    assert b.warm_instances() == {POOL.id: 1}
    with pytest.raises(CapacityUnavailable, match=r"1 of 1 instances in use \(the pool's max\)"):
        b.launch(_request(tmp_path, [PY, "-c", "0"], offering=POOL))
    assert b.warm_data() == {}
    b.stop(first, "make room")
    assert settle(b, first).state is RunState.STOPPED
    assert b.warm_instances() == {POOL.id: 2}
