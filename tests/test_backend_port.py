"""The ``ComputeBackend`` contract, run over every implementation: the sandbox (real local
processes, a manual clock), the simulated backend (the event kernel's time), the real Slurm
and Ray clusters the tests start, and EC2 on moto's server (``ec2_world``). A harness per
backend says how to express "a job that succeeds / fails / runs long" and how time passes;
the assertions are the same. (Process-level details of the sandbox — SIGKILL after the grace,
the environment a job sees, its exit codes — stay in ``test_backend_contract.py``.)"""

from __future__ import annotations

import itertools
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import numpy as np
import pytest

from budgeteer.backends import SandboxBackend, TraceMarket
from budgeteer.backends.base import (
    CapacityUnavailable,
    ComputeBackend,
    Handle,
    LaunchRequest,
    RunState,
    Status,
)
from budgeteer.backends.ray import RayBackend
from budgeteer.backends.slurm import SlurmBackend, SlurmPlacement
from budgeteer.backends.slurm_local import LocalSlurm
from budgeteer.clock import ManualClock, SystemClock
from budgeteer.domain.offering import Market, Offering
from budgeteer.sim.backend import SimBackend
from budgeteer.sim.kernel import Kernel
from budgeteer.store import MemoryStore
from builders import THROUGHPUT, make_job, make_offering
from ec2_world import open_world, refuse_run_instances
from engines import RayTestCluster
from engines import settle as engine_settle

T0 = datetime(2026, 12, 2, 9, tzinfo=UTC)
PY = sys.executable
#: spot is up for the first 10 minutes, then gone for 50
SPOT_TRACE = np.array([True] * 10 + [False] * 50 + [True] * 1000)
PRICES = 0.9 + 0.001 * (np.arange(len(SPOT_TRACE)) // 30)  # moves every half hour
ON_DEMAND = make_offering("od", startup_seconds=120)
SPOT = make_offering("spot", market=Market.SPOT, price=0.9, startup_seconds=60)


class Harness(Protocol):
    backend: ComputeBackend
    #: whether the harness decides when start-up ends (a simulated clock) — on a real engine
    #: it ends when the engine says
    controls_startup: bool
    #: whether prices move within an interval (a market trace) or are the catalog's
    moving_prices: bool
    #: an offering the backend can run ``units`` instances of at once, and how many
    pool: tuple[Offering, int]
    #: what a launch on spot is refused with once spot capacity is gone
    no_spot: str

    def request(
        self, kind: str, offering: Offering, *, job: str = "job-1", instances: int = 1
    ) -> LaunchRequest:
        """A launch of a job that ``succeeds`` quickly, ``fails``, or runs ``long``."""
        ...

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of the backend's time pass."""
        ...

    def settle(self, handle: Handle) -> Status:
        """Let time pass until the attempt ends (bounded)."""
        ...

    def restarted(self) -> ComputeBackend:
        """The backend as a new scheduler process would open it."""
        ...

    def revoke_spot(self) -> None:
        """Take the spot capacity away (the market's trace, a node taken down)."""
        ...

    def launch_when_free(self, request: LaunchRequest) -> Handle:
        """Launch once capacity just given back is free (a real engine frees it a moment after
        the attempt ends)."""
        ...

    def close(self) -> None:
        """Stop what the test left running; give back what it took away."""
        ...


class SandboxHarness:
    controls_startup = True
    moving_prices = True
    pool = (make_offering("three", max_instances=3), 3)
    no_spot = "no spot capacity"

    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock(T0)
        self.market = TraceMarket(SPOT_TRACE, 60, T0, prices=PRICES)
        self.work = tmp_path / "work"
        self.tmp = tmp_path
        self.backend = SandboxBackend(self.clock, self.market, self.work, grace_seconds=30)

    def request(
        self, kind: str, offering: Offering, *, job: str = "job-1", instances: int = 1
    ) -> LaunchRequest:
        code = {
            "succeeds": "print('hi')",
            "fails": "raise SystemExit(3)",
            "long": "import time; time.sleep(600)",
        }[kind]
        return LaunchRequest(
            job, 1, offering, (PY, "-c", code), self.tmp / "ck" / job, instances=instances
        )

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.backend.poll()

    def settle(self, handle: Handle) -> Status:
        for _ in range(3000):
            status = self.backend.status(handle)
            if status.state.is_final:
                return status
            self.clock.advance(1)
            time.sleep(0.01)
        raise AssertionError(f"{handle.id} did not finish")

    def restarted(self) -> ComputeBackend:
        return SandboxBackend(self.clock, self.market, self.work, grace_seconds=30)

    def revoke_spot(self) -> None:
        self.advance(10 * 60)  # the trace takes spot away at 10 minutes

    def launch_when_free(self, request: LaunchRequest) -> Handle:
        return self.backend.launch(request)

    def close(self) -> None:
        for h in self.backend.live():
            self.backend.stop(h, "test teardown")
        self.clock.advance(60)
        self.backend.poll()


class SimHarness:
    controls_startup = True
    moving_prices = True
    pool = (make_offering("three", max_instances=3), 3)
    no_spot = "no spot capacity"

    def __init__(self, tmp_path: Path) -> None:
        self.kernel = Kernel(T0)
        self.store = MemoryStore()
        market = TraceMarket(SPOT_TRACE, 60, T0, prices=PRICES)
        self.backend = SimBackend(
            self.kernel, market, self.store, dict(THROUGHPUT), fails=frozenset({"bad"})
        )
        self.tmp = tmp_path

    def request(
        self, kind: str, offering: Offering, *, job: str = "job-1", instances: int = 1
    ) -> LaunchRequest:
        job_id = "bad" if kind == "fails" else job
        hours = 100.0 if kind == "long" else 0.01  # 36 s on one A100
        known = {j.id for j in self.store.jobs()}
        if job_id not in known:
            self.store.submit([make_job(job_id, hours=hours)], at=self.kernel.now)
        return LaunchRequest(
            job_id, 1, offering, ("train",), self.tmp / "ck" / job_id, instances=instances
        )

    def advance(self, seconds: float) -> None:
        self.kernel.run(until=self.kernel.now + timedelta(seconds=seconds))

    def settle(self, handle: Handle) -> Status:
        for _ in range(3000):
            status = self.backend.status(handle)
            if status.state.is_final:
                return status
            self.advance(10)
        raise AssertionError(f"{handle.id} did not finish")

    def restarted(self) -> ComputeBackend:
        return self.backend  # simulated attempts live as long as the simulation

    def revoke_spot(self) -> None:
        self.advance(10 * 60)

    def launch_when_free(self, request: LaunchRequest) -> Handle:
        return self.backend.launch(request)

    def close(self) -> None:
        pass


_ENGINE_CODE = {
    "succeeds": "print('hi')",
    "fails": "raise SystemExit(3)",
    "long": "import time; time.sleep(600)",
}


class _EngineHarness:
    """What the real engines share: real time, job names unique to the test (a cluster
    outlives a test, and its job records a while longer)."""

    controls_startup = False
    moving_prices = False
    backend: ComputeBackend

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.tag = uuid.uuid4().hex[:6]

    def request(
        self, kind: str, offering: Offering, *, job: str = "job-1", instances: int = 1
    ) -> LaunchRequest:
        name = f"{job}-{self.tag}"
        command = (PY, "-c", _ENGINE_CODE[kind])
        return LaunchRequest(
            name, 1, offering, command, self.tmp / "ck" / name, instances=instances
        )

    def advance(self, seconds: float) -> None:
        """Real time passes by itself."""

    def settle(self, handle: Handle) -> Status:
        return engine_settle(self.backend, handle, 180)

    def launch_when_free(self, request: LaunchRequest) -> Handle:
        end = time.monotonic() + 60
        while True:
            try:
                return self.backend.launch(request)
            except CapacityUnavailable:
                if time.monotonic() > end:
                    raise
                time.sleep(0.5)


class SlurmHarness(_EngineHarness):
    """The local Slurm: ``spot`` and ``ondemand`` partitions over the same two nodes."""

    pool = (make_offering("pool", max_instances=2), 2)
    no_spot = "0 of 2 nodes of partition 'spot' are idle"

    def __init__(self, tmp_path: Path, cluster: LocalSlurm) -> None:
        super().__init__(tmp_path)
        self.cluster = cluster
        self.placements = {
            ON_DEMAND.id: SlurmPlacement("ondemand"),
            SPOT.id: SlurmPlacement("spot"),
            "pool": SlurmPlacement("ondemand"),
        }
        self.backend = self.restarted()

    def restarted(self) -> ComputeBackend:
        return SlurmBackend(
            SystemClock(),
            self.tmp / "work",
            self.placements,
            grace_seconds=5,
            environ=self.cluster.env,
        )

    def revoke_spot(self) -> None:
        for node in ("n1", "n2"):  # the spot partition's nodes
            self.cluster.down(node)

    def close(self) -> None:
        for handle in self.backend.live():
            self.cluster.run("scancel", handle.id)
        for node, state in self.cluster.node_states().items():
            if state.startswith(("down", "drain")):
                self.cluster.resume(node)
        self.cluster.wait_for(lambda: set(self.cluster.node_states().values()) == {"idle"}, 60)


class RayHarness(_EngineHarness):
    """The local Ray cluster: a head carrying the on-demand resource, a spot worker; one
    ``budgeteer-pool`` unit on each."""

    pool = (make_offering("pool", max_instances=2), 2)
    no_spot = "no node carries 'budgeteer-spot'"

    def __init__(self, tmp_path: Path, cluster: RayTestCluster) -> None:
        super().__init__(tmp_path)
        self.cluster = cluster
        self.backend = self.restarted()

    def restarted(self) -> ComputeBackend:
        return RayBackend(
            SystemClock(),
            self.cluster.address,
            {ON_DEMAND.id: "budgeteer-od", SPOT.id: "budgeteer-spot", "pool": "budgeteer-pool"},
            gcs_address=self.cluster.gcs,
            namespace=self.tag,
        )

    def revoke_spot(self) -> None:
        self.cluster.cluster.remove_node(self.cluster.spot_node, allow_graceful=False)
        self.cluster.spot_node = None
        time.sleep(1.5)  # past the backend's reuse of its reading of the nodes

    def close(self) -> None:
        for handle in self.backend.live():
            self.backend.stop(handle, "test teardown")
        if self.cluster.spot_node is None:
            self.cluster.replace_spot()


class Ec2Harness(_EngineHarness):
    """EC2 on moto's server, the instances played by local processes running their user data
    (``ec2_world``); spot taken away as AWS does it (the warning, then the instance), and later
    spot launches refused with AWS's ``InsufficientInstanceCapacity``."""

    pool = (make_offering("pool", max_instances=2), 2)
    no_spot = "InsufficientInstanceCapacity"

    def __init__(self, tmp_path: Path, moto_url: str) -> None:
        super().__init__(tmp_path)
        self.world = open_world(moto_url, tmp_path, (ON_DEMAND, SPOT, self.pool[0]))
        self.backend = self.world.backend

    def restarted(self) -> ComputeBackend:
        return self.world.restarted()

    def revoke_spot(self) -> None:
        for handle in self.backend.live():
            if handle.offering_id == SPOT.id:
                for instance in handle.instance_ids:
                    self.world.instances.interrupt(instance, terminate_after=3.0)
        refuse_run_instances(
            self.world.backend, "InsufficientInstanceCapacity", 400, spot_only=True
        )

    def close(self) -> None:
        for handle in self.backend.live():
            self.backend.stop(handle, "test teardown")
        self.world.instances.close()


@pytest.fixture(params=["sandbox", "sim", "slurm", "ray", "ec2"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    h: Harness
    if request.param == "sandbox":
        h = SandboxHarness(tmp_path)
    elif request.param == "sim":
        h = SimHarness(tmp_path)
    elif request.param == "slurm":
        h = SlurmHarness(tmp_path, request.getfixturevalue("slurm_cluster"))
    elif request.param == "ec2":
        h = Ec2Harness(tmp_path, request.getfixturevalue("moto_url"))
    else:
        h = RayHarness(tmp_path, request.getfixturevalue("ray_cluster"))
    yield h
    h.close()


def _until_running(harness: Harness, handle: Handle) -> None:
    """Let time pass until the attempt runs (bounded)."""
    for _ in range(600):
        state = harness.backend.status(handle).state
        if state is RunState.RUNNING:
            return
        assert not state.is_final, state
        harness.advance(1)
        time.sleep(0.2)
    raise AssertionError(f"{handle.id} did not start")


def test_declares_spot_and_the_preemption_notice(harness: Harness) -> None:
    caps = harness.backend.capabilities
    assert caps.spot
    assert caps.preemption_notice


def test_provisions_for_the_start_up_then_runs_then_succeeds(harness: Harness) -> None:
    handle = harness.backend.launch(harness.request("succeeds", ON_DEMAND))
    assert handle.offering_id == "od"
    first = harness.backend.status(handle).state
    if harness.controls_startup:
        assert first is RunState.PROVISIONING  # 120 s start-up
    else:  # the engine's own start-up: it may be quick
        assert first in {RunState.PROVISIONING, RunState.RUNNING, RunState.SUCCEEDED}
    harness.advance(120)
    status = harness.settle(handle)
    assert status.state is RunState.SUCCEEDED
    assert status.exit_code == 0


def test_a_job_that_fails_is_reported_failed(harness: Harness) -> None:
    handle = harness.backend.launch(harness.request("fails", ON_DEMAND))
    harness.advance(120)
    status = harness.settle(handle)
    assert status.state is RunState.FAILED
    assert status.exit_code not in (None, 0)


def test_stop_ends_the_attempt_with_the_reason_given(harness: Harness) -> None:
    handle = harness.backend.launch(harness.request("long", ON_DEMAND))
    harness.advance(180)
    _until_running(harness, handle)
    harness.backend.stop(handle, "cancelled by user")
    harness.advance(60)  # past the grace period
    status = harness.settle(handle)
    assert status.state is RunState.STOPPED
    assert status.reason == "cancelled by user"


def test_capacity_is_enforced_per_offering_counting_instances(harness: Harness) -> None:
    pool, units = harness.pool  # 3 in the sandbox and the simulator, 2 nodes on an engine
    first = harness.backend.launch(harness.request("long", pool, job="a", instances=units - 1))
    _until_running(harness, first)
    with pytest.raises(CapacityUnavailable) as err:
        harness.backend.launch(harness.request("succeeds", pool, job="b", instances=2))
    assert err.value.transient
    third = harness.backend.launch(harness.request("long", pool, job="c", instances=1))  # fits
    harness.backend.stop(first, "make room")
    harness.advance(60)
    harness.settle(first)
    harness.launch_when_free(harness.request("succeeds", pool, job="d", instances=units - 1))
    harness.backend.stop(third, "test over")


def test_spot_revoked_is_preempted_never_failed(harness: Harness) -> None:
    handle = harness.backend.launch(harness.request("long", SPOT))
    harness.advance(120)
    _until_running(harness, handle)
    harness.revoke_spot()
    status = harness.settle(handle)
    assert status.state is RunState.PREEMPTED, status
    with pytest.raises(CapacityUnavailable, match=harness.no_spot):
        harness.backend.launch(harness.request("succeeds", SPOT, job="later"))


def test_a_restarted_scheduler_re_attaches_to_what_was_launched_and_only_that(
    harness: Harness,
) -> None:
    request = harness.request("long", ON_DEMAND)
    handle = harness.backend.launch(request)
    harness.advance(180)
    _until_running(harness, handle)
    again = harness.restarted()
    adopted = again.adopt(request)
    assert adopted is not None
    assert adopted.id == handle.id
    assert again.status(adopted).state is RunState.RUNNING
    never = harness.request("long", ON_DEMAND, job="never-launched")
    assert again.adopt(never) is None
    again.stop(adopted, "test over")
    harness.advance(60)


def test_price_segments_cover_the_interval_at_the_prices_in_force(harness: Harness) -> None:
    start, end = T0 + timedelta(minutes=5), T0 + timedelta(hours=2, minutes=7)
    segments = harness.backend.price_segments(SPOT, start, end)
    assert segments[0][0] == start
    assert segments[-1][1] == end
    for (_, a_end, _, _), (b_start, _, _, _) in itertools.pairwise(segments):
        assert a_end == b_start  # no gap, no overlap
    if harness.moving_prices:
        assert len({price for _, _, price, _ in segments}) > 1  # the price moved inside it
    else:  # an engine bills the catalog's price: one piece
        assert [(p, src) for _, _, p, src in segments] == [harness.backend.price(SPOT, start)]
    for seg_start, _, price, source in segments:
        assert (price, source) == harness.backend.price(SPOT, seg_start)
