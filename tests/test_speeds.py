"""Throughput learned from the jobs (``core/speed.py``, ``scheduler/speeds.py``): a family that
runs slower than the catalog says on one accelerator is planned with its measured speed next
time, on that accelerator only; the simulator (which runs at the model's speed) teaches nothing
that would change a plan."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from budgeteer.backends import TraceMarket
from budgeteer.backends.base import LaunchRequest
from budgeteer.catalog import Catalog
from budgeteer.core import Policy
from budgeteer.core.speed import Speed, measured_factor, modelled_fraction_per_hour
from budgeteer.domain.job import Job, JobState
from budgeteer.scheduler import Scheduler
from budgeteer.sim.backend import SimBackend
from budgeteer.sim.kernel import Kernel, SimClock
from budgeteer.store import MemoryStore
from builders import EGRESS, THROUGHPUT, make_job, make_offering

T0 = datetime(2026, 12, 3, 0, tzinfo=UTC)


def test_the_factor_starts_at_the_catalog_and_moves_towards_what_is_measured() -> None:
    s = Speed("churn", "L4")
    seen = []
    for _ in range(12):
        s = s.observe(0.5)
        seen.append(round(s.factor, 4))
    assert seen[:4] == [0.75, 0.6667, 0.625, 0.6]
    assert seen == sorted(seen, reverse=True)
    assert abs(seen[-1] - 0.5) < 0.03  # converges
    assert s.runs == 12
    assert Speed("x", "A100").observe(1e9).factor <= 20.0  # a broken report is clamped


def test_a_run_at_the_models_speed_measures_one() -> None:
    per_hour = modelled_fraction_per_hour(10.0, 0.5, 2, 1, 1, Policy())
    steps_per_second = per_hour * 1000 / 3600  # 1000 steps in all
    assert measured_factor(steps_per_second, 1000, per_hour) == pytest.approx(1.0)
    assert measured_factor(0.0, 1000, per_hour) is None


class SlowOnL4(SimBackend):
    """The simulated backend, with jobs named ``churn`` running at half the model's speed on
    L4 (what a memory-bound model does on a card rated by its TFLOPS)."""

    def _rate(self, job: Job, request: LaunchRequest) -> float:
        rate = super()._rate(job, request)
        slow = job.name == "churn" and request.offering.accelerator == "L4"
        return rate / 2 if slow else rate


def _world(backend_type: type[SimBackend]) -> tuple[Kernel, MemoryStore, Scheduler]:
    kernel = Kernel(T0)
    store = MemoryStore()
    offerings = (
        make_offering("l4", accelerator="L4", price=1.0),
        make_offering("a100", accelerator="A100", price=4.0),
    )
    catalog = Catalog(offerings, dict(THROUGHPUT), EGRESS, "test")
    market = TraceMarket(np.ones(100_000, dtype=bool), 60, T0)
    backend = backend_type(kernel, market, store, catalog.throughput)
    sched = Scheduler(store, backend, catalog, SimClock(kernel), Path("/nonexistent/ck"))
    return kernel, store, sched


def _churn(n: int, name: str = "churn") -> Job:
    job = make_job(f"{name}-{n}", hours=2.0, accelerators=("L4",), spot=False)
    return dataclasses.replace(job, name=name, submitted_at=T0, deadline=None)


def _run_one(kernel: Kernel, store: MemoryStore, sched: Scheduler, job: Job) -> float:
    """Submit ``job`` now, run it to the end; its planned runtime (hours)."""
    store.submit([dataclasses.replace(job, submitted_at=kernel.now)], at=kernel.now)
    planned = None
    for _ in range(200):
        report = sched.cycle()
        if planned is None and report.plan is not None:
            for admission in report.plan.admissions:
                if admission.job_id == job.id:
                    planned = admission.placement.runtime_hours
        if store.job(job.id).state is JobState.SUCCEEDED:
            break
        kernel.run(until=kernel.now + timedelta(minutes=10))
    assert store.job(job.id).state is JobState.SUCCEEDED
    assert planned is not None
    return planned


def test_a_family_slower_on_l4_is_planned_with_its_measured_speed_next_time() -> None:
    kernel, store, sched = _world(SlowOnL4)
    first = _run_one(kernel, store, sched, _churn(1))
    (speed,) = store.speeds()
    assert (speed.family, speed.accelerator, speed.runs) == ("churn", "L4", 1)
    assert speed.factor == pytest.approx(0.75, abs=0.03)  # measured ≈ 0.5, prior 1.0
    second = _run_one(kernel, store, sched, _churn(2))
    assert second / first == pytest.approx(1 / 0.75, rel=0.03)
    # another family on the same card is planned at the catalog's speed
    other = _run_one(kernel, store, sched, _churn(1, name="ltv"))
    assert other == pytest.approx(first, rel=1e-6)
    for n in range(3, 7):
        _run_one(kernel, store, sched, _churn(n))
    learned = {(s.family, s.accelerator): s for s in store.speeds()}
    assert learned[("churn", "L4")].factor < 0.62
    last = _run_one(kernel, store, sched, _churn(7))
    assert last / first > 1.6  # towards twice the catalog's runtime
    # a restarted scheduler plans with what the store kept
    again = Scheduler(
        store, sched.backend, sched.catalog, SimClock(kernel), Path("/nonexistent/ck")
    )
    assert again.speeds.snapshot == sched.speeds.snapshot
    assert again.speeds.snapshot


def test_the_simulator_teaches_the_catalogs_own_speed() -> None:
    kernel, store, sched = _world(SimBackend)
    for n in range(3):
        _run_one(kernel, store, sched, _churn(n))
    (speed,) = store.speeds()
    assert speed.runs == 3
    assert speed.factor == pytest.approx(1.0, abs=0.02)
    assert sched.speeds.snapshot == ()  # nothing a plan would change for
