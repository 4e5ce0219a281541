"""The simulator and the service share code: the same arrivals, run once through ``simulate()``
(simulated clock and backend) and once through the service's loop on the sandbox backend (real
processes, a manual clock moved to the same instants), lead to the same decisions — the same
placements for the same jobs, the same holds with the same reasons, the same states."""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from budgeteer.backends import SandboxBackend, TraceMarket
from budgeteer.catalog import Catalog
from budgeteer.clock import ManualClock
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from budgeteer.scheduler import Scheduler
from budgeteer.sim.run import Arrival, simulate
from budgeteer.store import MemoryStore, Store
from builders import EGRESS, THROUGHPUT, make_budget, make_job, make_offering

T0 = datetime(2026, 11, 10, 8, tzinfo=UTC)
SLEEP = (sys.executable, "-c", "import time; time.sleep(120)")


def _catalog() -> Catalog:
    offerings = (
        make_offering(
            "spot", price=1.0, market=Market.SPOT, interruption_per_hour=0.05, startup_seconds=120
        ),
        make_offering("od", price=3.0, startup_seconds=120),
        make_offering("od8", gpus=8, price=24.0, startup_seconds=300, max_instances=1),
    )
    return Catalog(offerings, dict(THROUGHPUT), EGRESS, "test")


def _arrivals() -> list[Arrival]:
    def at(hours: float, job: Job) -> Arrival:
        when = T0 + timedelta(hours=hours)
        deadline = None if job.deadline is None else when + (job.deadline - job.submitted_at)
        return Arrival(
            when, dataclasses.replace(job, submitted_at=when, deadline=deadline, command=SLEEP)
        )

    return [
        at(0, make_job("p1-spot", hours=20, deadline_hours=30, tier=Tier.P1, seq=0)),
        at(
            0,
            make_job(
                "p0-wide",
                hours=40,
                deadline_hours=6,
                tier=Tier.P0,
                workers=(1, 8),
                spot=False,
                seq=1,
            ),
        ),
        at(0.5, make_job("p3-dear", hours=200, tier=Tier.P3, spot=False, seq=2)),
        at(0.5, make_job("child", hours=5, depends_on=(("p1-spot", "success"),), seq=3)),
        at(
            1,
            make_job(
                "p2-second-wide", hours=40, deadline_hours=8, workers=(8, 8), spot=False, seq=4
            ),
        ),
    ]


def _decisions(store: Store) -> dict[str, object]:
    return {
        j.id: (
            j.state.value,
            [(a.offering_id, a.market, a.instances, a.workers) for a in store.attempts(j.id)],
            [e.cause for e in store.events(j.id) if e.to_state.value in {"held", "waiting"}][:1],
        )
        for j in store.jobs()
    }


def test_the_simulator_and_the_service_decide_alike(tmp_path: Path) -> None:
    budgets = [make_budget(limit="400")]
    market = TraceMarket(np.ones(10_000, dtype=bool), 60, T0)
    end = T0 + timedelta(hours=1, minutes=20)
    arrivals = _arrivals()

    sim = simulate(arrivals, _catalog(), market, start=T0, end=end, budgets=budgets)

    clock = ManualClock(T0)
    store = MemoryStore()
    backend = SandboxBackend(clock, market, tmp_path / "work")
    sched = Scheduler(store, backend, _catalog(), clock, tmp_path / "ck", budgets=budgets)
    try:
        instants = sorted({a.at for a in arrivals} | {end})
        for instant in instants:
            clock.advance((instant - clock.now()).total_seconds())
            store.submit([a.job for a in arrivals if a.at == instant], at=instant)
            sched.cycle()
        live = _decisions(store)
    finally:
        for handle in backend.live():
            backend.stop(handle, "test over")
        clock.advance(60)
        backend.poll()

    assert live == _decisions(sim.store)
    # and the story is the one we meant to tell
    assert live["p1-spot"][1] == [("spot", "spot", 1, 1)]
    assert live["p0-wide"][1][0][0] == "od8"  # only eight GPUs make the 6 h deadline
    assert live["p3-dear"][0] == "held"
    assert "budget" in live["p3-dear"][2][0]
    assert live["child"][0] == "waiting"
    # the one 8-GPU machine is the P0's: the second wide job spreads over eight 1-GPU instances
    assert live["p2-second-wide"][1] == [("od", "on_demand", 8, 8)]
