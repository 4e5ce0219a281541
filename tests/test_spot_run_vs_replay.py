"""One trace, three runners, one decider: a job runs on spot, the trace takes spot away mid-run
and keeps it away, and the spot decider — in the service on the sandbox (real processes), in
the service on the simulated backend, and in the replay benchmark — waits, then takes on-demand
at the same point of the outage.

The service decides every cycle (here every minute) on its epoch's decision grid (10 minutes);
the replay decides once a grid step. So "the same point" means: the service takes on-demand
after the replay's last wait and no later than the replay's switch — in the one grid step where
the replay switches. The replay is the benchmark's own ``default`` (:class:`~budgeteer.core.
spot.decide.Default`: its estimate from the trace's history before the outage, the prior
otherwise), run on the trace sampled on the service's grid, for the job the service's kept
decision describes (work, deadline, changeover, prices). (Catches: a service decision that is
not the replay's function, a queued epoch begun again at every refused launch, decisions the
store does not keep.)

The two services need not decide at the same minute: the simulator knows the work the job did
on spot from its model, while the sandbox's process reports no progress, so the sandbox plans
with the whole hour left and takes on-demand sooner; each agrees with the replay of its own
numbers."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from budgeteer.backends import SandboxBackend, TraceMarket
from budgeteer.catalog import Catalog
from budgeteer.clock import ManualClock
from budgeteer.core import Policy
from budgeteer.core.spot.decide import Default
from budgeteer.core.spot.replay import Market as ReplayMarket
from budgeteer.core.spot.replay import Mode, SpotJob, replay
from budgeteer.domain.job import Job
from budgeteer.domain.job import JobState as S
from budgeteer.domain.offering import Market
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.scheduler import Scheduler
from budgeteer.sim.backend import SimBackend
from budgeteer.sim.kernel import Kernel, SimClock
from budgeteer.store import MemoryStore, SpotDecisionRecord, SqlStore, Store
from builders import EGRESS, THROUGHPUT, make_job, make_offering

T0 = datetime(2026, 11, 10, 8, tzinfo=UTC)
#: minutes: spot up for the first 20, then gone for ten hours
TRACE = np.ones(100_000, dtype=bool)
TRACE[20:600] = False
CYCLE_SECONDS = 60
#: the first attempt waits to be preempted; the one after it (on-demand) finishes at once
COMMAND = (
    sys.executable,
    "-c",
    "import os, pathlib, sys, time\n"
    "mark = pathlib.Path(os.environ['BUDGETEER_CHECKPOINT_DIR']) / 'ran-once'\n"
    "again = mark.exists()\n"
    "mark.parent.mkdir(parents=True, exist_ok=True)\n"
    "mark.touch()\n"
    "sys.exit(0) if again else time.sleep(3600)\n",
)


def _catalog() -> Catalog:
    """Spot and on-demand of one instance type (siblings: the decider's two modes)."""
    offerings = (
        dataclasses.replace(
            make_offering("spot", price=1.0, market=Market.SPOT, interruption_per_hour=0.01),
            instance_type="p3",
        ),
        dataclasses.replace(make_offering("od", price=10.0), instance_type="p3"),
    )
    return Catalog(offerings, dict(THROUGHPUT), EGRESS, "test")


def _job(hours: float, deadline_hours: float) -> Job:
    job = make_job("j", hours=hours, deadline_hours=deadline_hours, checkpoint_seconds=600)
    return dataclasses.replace(
        job, submitted_at=T0, deadline=T0 + timedelta(hours=deadline_hours), command=COMMAND
    )


def _on_simulator(job: Job) -> Store:
    kernel = Kernel(T0)
    store = MemoryStore()
    catalog = _catalog()
    backend = SimBackend(kernel, TraceMarket(TRACE, 60, T0), store, catalog.throughput)
    sched = Scheduler(
        store, backend, catalog, SimClock(kernel), Path("/nonexistent/ckpt"), policy=Policy()
    )
    store.submit([job], at=T0)
    while not store.job(job.id).state.is_terminal:
        assert kernel.now < T0 + timedelta(hours=12), "the simulated run did not end"
        sched.cycle()
        kernel.run(until=kernel.now + timedelta(seconds=CYCLE_SECONDS))
    return store


def _on_sandbox(job: Job, tmp_path: Path) -> Store:
    clock = ManualClock(T0)
    store = SqlStore(f"sqlite:///{tmp_path / 'b.db'}")
    backend = SandboxBackend(clock, TraceMarket(TRACE, 60, T0), tmp_path / "work")
    sched = Scheduler(store, backend, _catalog(), clock, tmp_path / "ckpt", policy=Policy())
    store.submit([job], at=T0)

    def settle(done: Callable[[], bool]) -> None:
        """Cycle without moving the clock until ``done`` (processes start and stop in real
        time)."""
        for _ in range(500):
            sched.cycle()
            if done():
                return
            time.sleep(0.02)
        raise AssertionError("the sandbox did not get there")

    # the first process is under way (it marked its folder) before the clock moves on
    settle((tmp_path / "ckpt" / job.id / "ran-once").exists)
    while not store.job(job.id).state.is_terminal:
        assert clock.now() < T0 + timedelta(hours=12), "the sandbox run did not end"
        clock.advance(CYCLE_SECONDS)
        sched.cycle()
        attempts = store.attempts(job.id)
        if attempts and attempts[-1].offering_id == "od":
            # the on-demand attempt finishes at once: in real time, so the clock waits for it
            settle(lambda: store.job(job.id).state.is_terminal)
        elif store.job(job.id).state is S.CHECKPOINTING:  # let the preempted process stop
            settle(lambda: store.job(job.id).state is not S.CHECKPOINTING)
    return store


def _replay_switch(kept: SpotDecisionRecord) -> tuple[datetime, datetime]:
    """The replay's last wait and its switch to on-demand, as clock times: the trace sampled on
    the decision's grid from its epoch's start (with two steps of history before it), the job
    the kept decision describes, the benchmark's ``default`` prepared on that history."""
    s = kept.situation
    step = timedelta(hours=s.tick_hours)
    began = kept.at - timedelta(hours=s.elapsed_hours)
    origin = began - 2 * step
    minutes = [int((origin + i * step - T0).total_seconds() // 60) for i in range(200)]
    available = np.array([bool(TRACE[m]) if m >= 0 else True for m in minutes])
    market = ReplayMarket(available, np.full(len(available), s.spot_usd_per_hour), s.tick_hours)
    job = SpotJob(s.work_hours, s.deadline_hours, s.changeover_hours, s.on_demand_usd_per_hour)
    result = replay(market, 2, job, Default().prepare(job, market.until(2)))
    modes = dict(result.decisions)
    assert modes[2] is Mode.IDLE  # spot is gone: the replay waits first
    switch = min(t for t, m in result.decisions if m is Mode.ON_DEMAND)
    assert all(m is Mode.IDLE for t, m in result.decisions if t < switch)
    return origin + (switch - 1) * step, origin + switch * step


@pytest.mark.parametrize(("hours", "deadline_hours"), [(1.0, 3.0), (3.0, 5.0)])
def test_sandbox_simulator_and_replay_take_on_demand_at_the_same_point_of_an_outage(
    hours: float, deadline_hours: float, tmp_path: Path
) -> None:
    job = _job(hours, deadline_hours)
    runs = {"simulator": _on_simulator(job), "sandbox": _on_sandbox(job, tmp_path)}
    for name, store in runs.items():
        assert store.job("j").state is S.SUCCEEDED, name
        ran = [a for a in store.attempts("j") if a.outcome is not AttemptOutcome.CAPACITY]
        assert [(a.offering_id, a.outcome) for a in ran] == [
            ("spot", AttemptOutcome.PREEMPTED),
            ("od", AttemptOutcome.SUCCEEDED),
        ], name
        (kept,) = store.spot_decisions("j")  # one move: on-demand while queued
        assert (kept.action, kept.decided, kept.attempt_id) == (
            "take_on_demand",
            Mode.ON_DEMAND,
            None,
        )
        assert not kept.situation.spot_up
        assert kept.situation.mode is Mode.IDLE
        assert kept.situation.elapsed_hours > kept.situation.tick_hours  # it waited first
        assert ran[0].ended_at is not None
        assert kept.at - kept.situation.tick_hours * timedelta(hours=1) > ran[0].ended_at
        assert ran[1].started_at >= kept.at  # on-demand only after the decision
        assert ran[1].ended_at is not None
        assert job.deadline is not None
        assert ran[1].ended_at <= job.deadline
        last_wait, switch = _replay_switch(kept)
        assert last_wait < kept.at <= switch, (name, kept.at, last_wait, switch)
