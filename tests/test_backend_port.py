"""The ``ComputeBackend`` contract, run over every implementation: the sandbox (real local
processes, a manual clock) and the simulated backend (the event kernel's time). A harness per
backend says how to express "a job that succeeds / fails / runs long" and how time passes;
the assertions are the same. (Process-level details of the sandbox — SIGKILL after the grace,
the environment a job sees, its exit codes — stay in ``test_backend_contract.py``.)"""

from __future__ import annotations

import itertools
import sys
import time
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
from budgeteer.clock import ManualClock
from budgeteer.domain.offering import Market, Offering
from budgeteer.sim.backend import SimBackend
from budgeteer.sim.kernel import Kernel
from budgeteer.store import MemoryStore
from builders import THROUGHPUT, make_job, make_offering

T0 = datetime(2026, 12, 2, 9, tzinfo=UTC)
PY = sys.executable
#: spot is up for the first 10 minutes, then gone for 50
SPOT_TRACE = np.array([True] * 10 + [False] * 50 + [True] * 1000)
PRICES = 0.9 + 0.001 * (np.arange(len(SPOT_TRACE)) // 30)  # moves every half hour
ON_DEMAND = make_offering("od", startup_seconds=120)
SPOT = make_offering("spot", market=Market.SPOT, price=0.9, startup_seconds=60)


class Harness(Protocol):
    backend: ComputeBackend

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


class SandboxHarness:
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

    def close(self) -> None:
        for h in self.backend.live():
            self.backend.stop(h, "test teardown")
        self.clock.advance(60)
        self.backend.poll()


class SimHarness:
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

    def close(self) -> None:
        pass


@pytest.fixture(params=["sandbox", "sim"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    h = SandboxHarness(tmp_path) if request.param == "sandbox" else SimHarness(tmp_path)
    yield h
    h.close()


def test_declares_spot_and_the_preemption_notice(harness: Harness) -> None:
    caps = harness.backend.capabilities
    assert caps.spot
    assert caps.preemption_notice


def test_provisions_for_the_start_up_then_runs_then_succeeds(harness: Harness) -> None:
    handle = harness.backend.launch(harness.request("succeeds", ON_DEMAND))
    assert handle.offering_id == "od"
    assert harness.backend.status(handle).state is RunState.PROVISIONING  # 120 s start-up
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
    assert harness.backend.status(handle).state is RunState.RUNNING
    harness.backend.stop(handle, "cancelled by user")
    harness.advance(60)  # past the grace period
    status = harness.settle(handle)
    assert status.state is RunState.STOPPED
    assert status.reason == "cancelled by user"


def test_capacity_is_enforced_per_offering_counting_instances(harness: Harness) -> None:
    three = make_offering("three", max_instances=3)
    first = harness.backend.launch(harness.request("long", three, job="a", instances=2))
    with pytest.raises(CapacityUnavailable) as err:
        harness.backend.launch(harness.request("succeeds", three, job="b", instances=2))
    assert err.value.transient
    harness.backend.launch(harness.request("long", three, job="c", instances=1))  # fits
    harness.backend.stop(first, "make room")
    harness.advance(60)
    harness.settle(first)
    harness.backend.launch(harness.request("succeeds", three, job="d", instances=2))


def test_spot_revoked_is_preempted_never_failed(harness: Harness) -> None:
    handle = harness.backend.launch(harness.request("long", SPOT))
    harness.advance(120)
    assert harness.backend.status(handle).state is RunState.RUNNING
    harness.advance(10 * 60)  # the trace takes spot away at 10 minutes
    status = harness.settle(handle)
    assert status.state is RunState.PREEMPTED
    with pytest.raises(CapacityUnavailable, match="no spot capacity"):
        harness.backend.launch(harness.request("succeeds", SPOT, job="later"))


def test_a_restarted_scheduler_re_attaches_to_what_was_launched_and_only_that(
    harness: Harness,
) -> None:
    request = harness.request("long", ON_DEMAND)
    handle = harness.backend.launch(request)
    harness.advance(180)
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
    assert len({price for _, _, price, _ in segments}) > 1  # the price moved inside it
    for seg_start, _, price, source in segments:
        assert (price, source) == harness.backend.price(SPOT, seg_start)
