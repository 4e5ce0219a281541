"""Drive the service's own scheduler loop on simulated time.

:func:`simulate` wires a :class:`~budgeteer.scheduler.Scheduler` — the very class
``budgeteer serve`` runs — to a :class:`~budgeteer.sim.kernel.SimClock`, a
:class:`~budgeteer.sim.backend.SimBackend` and an in-memory store, submits each job at its
arrival time, and runs a cycle whenever something happened (an arrival, an attempt starting or
ending) and every ``cycle_seconds`` in between (progress, budget-period resets). Cycles run at a
lower priority than the events of the same instant, so a cycle sees everything that happened at
its time. Nothing reads the wall clock; a run is a pure function of its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from budgeteer.backends.market import SandboxMarket
from budgeteer.catalog import Catalog
from budgeteer.core import Policy
from budgeteer.core.pools import PoolSettings
from budgeteer.core.spot.estimate import MarketHistory
from budgeteer.domain.budget import Budget
from budgeteer.domain.job import Job
from budgeteer.scheduler import Scheduler
from budgeteer.scheduler.progress import StoreProgress
from budgeteer.sim.backend import SimBackend
from budgeteer.sim.kernel import Kernel, SimClock
from budgeteer.store import MemoryStore

CYCLE_PRIORITY = 10  # after the market and backend events of the same instant


@dataclass(frozen=True, slots=True)
class Arrival:
    """A job submitted at ``at`` (its ``submitted_at`` and deadline are set accordingly)."""

    at: datetime
    job: Job


@dataclass
class SimRun:
    """What a simulation leaves: the store (jobs, events, attempts, ledger), the kernel (its
    event log) and how many cycles ran."""

    store: MemoryStore
    kernel: Kernel
    backend: SimBackend
    cycles: int


def simulate(
    arrivals: Sequence[Arrival],
    catalog: Catalog,
    market: SandboxMarket,
    *,
    start: datetime,
    end: datetime,
    budgets: Sequence[Budget] = (),
    policy: Policy | None = None,
    cycle_seconds: float = 600.0,
    grace_seconds: float = 30.0,
    fails: frozenset[str] = frozenset(),
    on_day: Callable[[datetime], None] | None = None,
    pools: dict[str, PoolSettings] | None = None,
    histories: Sequence[MarketHistory] = (),
) -> SimRun:
    """Run the loop from ``start`` to ``end`` (see the module docstring); ``histories`` are
    the market histories the store holds at the start (what ``market_seeds:`` gives a
    deployment)."""
    kernel = Kernel(start)
    clock = SimClock(kernel)
    store = MemoryStore()
    for history in histories:
        store.put_market(history)
    policy = policy or Policy()
    pending: set[datetime] = set()
    cycles = 0

    def wake() -> None:
        if kernel.now in pending or kernel.now > end:
            return
        pending.add(kernel.now)
        kernel.schedule(kernel.now, cycle, priority=CYCLE_PRIORITY, label="cycle")

    def cycle() -> None:
        nonlocal cycles
        pending.discard(kernel.now)
        sched.cycle()
        cycles += 1

    def tick() -> None:
        wake()
        if kernel.now + timedelta(seconds=cycle_seconds) <= end:
            kernel.after(cycle_seconds, tick, priority=CYCLE_PRIORITY - 1, label="tick")

    backend = SimBackend(
        kernel,
        market,
        store,
        catalog.throughput,
        policy=policy,
        grace_seconds=grace_seconds,
        on_change=wake,
        fails=fails,
        pools=pools,
        offerings=catalog.offerings,
    )
    # progress comes from the store (the simulated backend posts it): no file is ever read
    sched = Scheduler(
        store,
        backend,
        catalog,
        clock,
        Path("/nonexistent/budgeteer-sim"),
        budgets=budgets,
        policy=policy,
        progress=StoreProgress(store),
    )
    for arrival in sorted(arrivals, key=lambda a: (a.at, a.job.seq)):

        def submit(job: Job = arrival.job) -> None:
            store.submit([job], at=kernel.now)
            wake()

        kernel.schedule(arrival.at, submit, priority=1, label=f"arrive {arrival.job.id}")
    kernel.schedule(start, tick, priority=CYCLE_PRIORITY - 1, label="tick")
    if on_day is not None:
        report = on_day

        def day() -> None:
            report(kernel.now)
            if kernel.now + timedelta(days=1) <= end:
                kernel.after(86400, day, priority=CYCLE_PRIORITY + 1, label="day")

        kernel.schedule(start, day, priority=CYCLE_PRIORITY + 1, label="day")
    kernel.run(until=end)
    backend.close_pools(end)  # what still idles is billed to the end
    if policy.use_pools:
        sched.reconciler.bill_idle(backend.take_idle())
    return SimRun(store, kernel, backend, cycles)
