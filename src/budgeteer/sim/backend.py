"""The simulated compute backend: attempts that progress at the modelled throughput, on the
kernel's time.

It implements the :class:`~budgeteer.backends.base.ComputeBackend` port like the sandbox, with
the same market (:class:`~budgeteer.backends.market.SandboxMarket`: a replayed trace or an
interruption rate) and the same rules — capacity per offering, start-up delay, spot availability
at launch, the notice on revocation — but no processes: an attempt of a job of ``W`` reference
hours on ``n`` instances of ``g`` GPUs of relative throughput ``rel`` (``w`` workers of ``k``
GPUs) advances at ``rel × w × k × eff`` reference hours per hour, with the planner's scaling
efficiency (:func:`budgeteer.core.runtime.scaling_efficiency`), after ``restart_overhead`` on a
resumed attempt. Every ``report_seconds`` it posts a progress report to the store (as the SDK
does through the API), so the loop's runtime control sees ETA and risk exactly as in the service.

A job keeps its progress across attempts (its checkpoint): on a notice — market revocation or
``stop`` — it checkpoints and exits ``CHECKPOINT_SECONDS`` later (within the grace period), so
it loses only the restart overhead when it resumes.

Pools (``pools``, with the policy's ``use_pools``): an attempt that ends on an offering with a
pool leaves its instances warm (idle, still holding the offering's capacity) unless the market
took them; the next launch there that fits in the warm instances starts on them at once, with
no start-up, and keeps the instances' ids (one instance, one id, however many jobs ran on it).
An idle instance is billed while it idles — as in the service, the scheduler bills its idle time
(:meth:`SimBackend.take_idle`) into the ledger, to the attempt that left it warm, so the budgets
see it; :attr:`SimBackend.idle` keeps each instance's idle stretches with their prices beside
(the instance time billed is the attempts' plus the idle, to the cent) — and is given back when
:func:`~budgeteer.core.pools.size_pool` says so (idle past the pool's ``idle_timeout`` and
above its ``min``), or when the market takes a warm spot instance. A pool with a floor (its
``min``, a ``warm`` window) boots what it lacks with no job — at the start, one start-up before
each window, and whenever a cycle finds it short — and the scheduler charges those instances'
idle time, boot included, to the pool's team until a job takes them (:attr:`SimBackend.boots`
lists the boots).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from budgeteer.backends.base import (
    Capabilities,
    CapacityUnavailable,
    Handle,
    IdleTime,
    LaunchFailed,
    LaunchRequest,
    RunState,
    Status,
)
from budgeteer.backends.market import (
    REVOCABLE,
    MarketPrices,
    SandboxMarket,
    next_available,
)
from budgeteer.core.policy import Policy
from budgeteer.core.pools import PoolSettings
from budgeteer.core.speed import modelled_fraction_per_hour
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Market, Offering
from budgeteer.sim.idle import Idle, IdleStretch, Warm
from budgeteer.sim.kernel import AFTER_CYCLE, Event, Kernel
from budgeteer.sim.pools import SimPools
from budgeteer.store.base import Store

#: Seconds a job takes to write its checkpoint and exit after the notice.
CHECKPOINT_SECONDS = 30.0
TOTAL_STEPS = 1000  # progress reports count the job's work in thousandths


@dataclass
class _Run:
    handle: Handle
    request: LaunchRequest
    job: Job
    ready_at: datetime
    rate_per_hour: float  # share of the whole job done per hour once running
    started_at: datetime | None = None
    work_from: datetime | None = None  # when progress starts (after the restart overhead)
    done_at_start: float = 0.0
    final: Status | None = None
    notice: str | None = None
    preempted: bool = False
    events: tuple[Event, ...] = ()


class SimBackend(SimPools, MarketPrices):
    """A :class:`~budgeteer.backends.base.ComputeBackend` on simulated time (see the module
    docstring). ``job_of`` returns the job an attempt belongs to (its work and resources)."""

    name = "sim"
    capabilities = Capabilities(spot=True, preemption_notice=True, multi_node=True)

    def __init__(
        self,
        kernel: Kernel,
        market: SandboxMarket,
        store: Store,
        throughput: dict[str, float],
        *,
        policy: Policy | None = None,
        grace_seconds: float = 30.0,
        report_seconds: float = 600.0,
        on_change: Callable[[], None] = lambda: None,
        fails: frozenset[str] = frozenset(),
        pools: dict[str, PoolSettings] | None = None,
        offerings: Sequence[Offering] = (),
    ) -> None:
        self.kernel = kernel
        self.market = market
        self.store = store
        self.throughput = throughput
        self.policy = policy or Policy()
        self.grace_seconds = grace_seconds
        self.report_seconds = report_seconds
        self.on_change = on_change  # called when an attempt starts or ends (wakes the loop)
        self._runs: dict[str, _Run] = {}
        self._done: dict[str, float] = {}  # share of each job's work checkpointed
        self._in_use: dict[str, int] = {}  # instances of live attempts per offering
        self.fails = fails  # jobs that exit non-zero when their work is done (a failed gate)
        use = self.policy.use_pools
        self._pools = {oid: Warm(p) for oid, p in (pools or {}).items()} if use else {}
        self.idle: list[IdleStretch] = []  # the pools' idle stretches, per instance
        self._to_bill: list[IdleTime] = []  # idle time for the ledger, not yet handed out
        self.warm_starts: set[str] = set()  # attempts (handle ids) started on warm instances
        self._offerings = {o.id: o for o in offerings}
        #: instances the pools booted with no job: (offering id, when, instance id)
        self.boots: list[tuple[str, datetime, str]] = []
        self._schedule_floors()

    # -- the port -------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Handle:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        offering = request.offering
        now = self.kernel.now
        if request.instances < 1 or request.workers < 1:
            raise LaunchFailed("instances and workers must be ≥ 1")
        job = self.store.job(request.job_id)
        if job.work.reference_hours is None:
            raise LaunchFailed("the simulator needs work in reference hours")
        took = self._reusable(offering, request.instances, now, request.data_uri, job.team)
        reused, held = took if took is not None else (None, False)
        warm = reused is not None
        in_use = self._in_use.get(offering.id, 0)
        limit = offering.max_instances
        if not warm and limit is not None and in_use + request.instances > limit:
            in_use -= self._make_room(offering, in_use + request.instances - limit, now)
        if not warm and limit is not None and in_use + request.instances > limit:
            raise CapacityUnavailable(f"{offering.id}: {in_use} of {limit} instances are in use")
        if not self.market.available(offering, now):
            if offering.market is Market.ON_PREM:  # a pool's calendar is public: say when
                opens = next_available(self.market, offering, now)
                raise CapacityUnavailable(
                    f"{offering.id}: the pool is closed at {now:%Y-%m-%d %H:%M}", opens
                )
            raise CapacityUnavailable(f"{offering.id}: no spot capacity at {now:%Y-%m-%d %H:%M}")
        hid = f"{request.job_id}.{request.attempt}"
        ids = reused or tuple(f"{hid}-{i}" for i in range(request.instances))
        handle = Handle.of(self.name, hid, request, ids, now)
        boot = 0.0 if warm else offering.startup_seconds
        # the dataset reaches a fresh instance at the policy's rate; one holding it has it
        rate = self.policy.data_download_gb_per_hour
        size = job.data.size_gb if job.data and not held and rate > 0 else 0.0
        ready_at = now + timedelta(seconds=boot, hours=size / rate if size else 0.0)
        run = _Run(handle, request, job, ready_at, self._rate(job, request))
        self._runs[hid] = run
        if warm:
            self.warm_starts.add(hid)  # its instances were already held
        else:
            self._in_use[offering.id] = in_use + request.instances
        ready = self.kernel.schedule(run.ready_at, lambda: self._start(run), label=f"ready {hid}")
        run.events = (ready,)
        return handle

    def adopt(self, request: LaunchRequest) -> Handle | None:
        """Attempts of this backend live as long as the simulation: re-attach if known."""
        run = self._runs.get(f"{request.job_id}.{request.attempt}")
        return run.handle if run else None

    def status(self, handle: Handle) -> Status:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        run = self._runs[handle.id]
        if run.final is not None:
            return run.final
        if run.started_at is None:
            return Status(RunState.PROVISIONING)
        return Status(RunState.RUNNING, started_at=run.started_at)

    def stop(self, handle: Handle, reason: str) -> None:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        run = self._runs[handle.id]
        if run.final is None and run.notice is None:
            self._notify(run, reason, preempted=False)

    # -- the simulation -------------------------------------------------------------------
    def done(self, job_id: str) -> float:
        """Share of the job's work checkpointed so far."""
        return self._done.get(job_id, 0.0)

    def _rate(self, job: Job, request: LaunchRequest) -> float:
        """The share of the job's work done per hour: the runtime model's, exactly."""
        assert job.work.reference_hours is not None
        return modelled_fraction_per_hour(
            job.work.reference_hours,
            self.throughput.get(request.offering.accelerator, 0.0),
            request.workers,
            job.resources.gpus_per_worker,
            request.instances,
            self.policy,
        )

    def _progress(self, run: _Run, at: datetime) -> float:
        if run.work_from is None or at <= run.work_from:
            return run.done_at_start
        hours = (at - run.work_from).total_seconds() / 3600
        return min(1.0, run.done_at_start + run.rate_per_hour * hours)

    def _start(self, run: _Run) -> None:
        now = self.kernel.now
        # spot, and on-prem pools lent out on a calendar, can be taken back
        spot = run.request.offering.market in REVOCABLE
        hid = run.handle.id
        if run.notice is not None:
            run.final = Status(RunState.STOPPED, None, run.notice, None, now)
            self._ended(run)
            return
        if spot and not self.market.available(run.request.offering, now):
            run.preempted = True
            run.final = Status(
                RunState.PREEMPTED, None, f"{_what(run)} lost while provisioning", None, now
            )
            self._ended(run)
            return
        job_id = run.request.job_id
        run.started_at = now
        run.done_at_start = self._done.get(job_id, 0.0)
        overhead = run.job.restart_overhead_seconds if run.done_at_start > 0 else 0.0
        run.work_from = now + timedelta(seconds=overhead)
        left_hours = (
            (1.0 - run.done_at_start) / run.rate_per_hour if run.rate_per_hour > 0 else float("inf")
        )
        finish = run.work_from + timedelta(hours=min(left_hours, 24 * 3650))
        events = [self.kernel.schedule(finish, lambda: self._succeed(run), label=f"finish {hid}")]
        if spot:
            revoked = self._next_revocation(run.request.offering, now, finish)
            if revoked is not None:
                events.append(
                    self.kernel.schedule(
                        revoked,
                        lambda: self._notify(run, f"{_what(run)} revoked", preempted=True),
                        label=f"revoke {hid}",
                    )
                )
        events.append(
            self.kernel.after(self.report_seconds, lambda: self._report(run), label=f"report {hid}")
        )
        run.events = tuple(events)
        self.on_change()

    def _report(self, run: _Run) -> None:
        if run.final is not None or run.notice is not None:
            return
        done = self._progress(run, self.kernel.now)
        self.store.add_progress(
            run.request.job_id,
            {"step": int(done * TOTAL_STEPS), "total_steps": TOTAL_STEPS},
            at=self.kernel.now,
        )
        self.kernel.after(
            self.report_seconds, lambda: self._report(run), label=f"report {run.handle.id}"
        )

    def _succeed(self, run: _Run) -> None:
        if run.final is not None or run.notice is not None:
            return
        self._done[run.request.job_id] = 1.0
        if run.request.job_id in self.fails:
            run.final = Status(RunState.FAILED, 1, "exited 1", run.started_at, self.kernel.now)
        else:
            run.final = Status(RunState.SUCCEEDED, 0, "exited 0", run.started_at, self.kernel.now)
        self._cancel_pending(run)
        self._ended(run)

    def _notify(self, run: _Run, reason: str, *, preempted: bool) -> None:
        if run.final is not None or run.notice is not None:
            return
        now = self.kernel.now
        run.notice = reason
        run.preempted = preempted
        self._cancel_pending(run)
        if run.started_at is None:  # stopped or revoked before it ran
            return
        self._done[run.request.job_id] = self._progress(run, now)  # it checkpoints on the notice
        exit_after = min(CHECKPOINT_SECONDS, self.grace_seconds)
        self.kernel.after(exit_after, lambda: self._exit(run), label=f"exit {run.handle.id}")

    def _exit(self, run: _Run) -> None:
        state = RunState.PREEMPTED if run.preempted else RunState.STOPPED
        run.final = Status(state, 75, run.notice or "", run.started_at, self.kernel.now)
        self._ended(run)

    def _ended(self, run: _Run) -> None:
        """Give the attempt's instances back to its offering's capacity — or to its pool, warm,
        unless the market took them."""
        oid = run.request.offering.id
        pool = self._pools.get(oid)
        if pool is not None and not pool.settings.serves(run.job.team):
            pool = None  # the pool is other teams': the instances go back
        if pool is not None and not run.preempted:
            now = self.kernel.now
            req = run.request
            pool.idle += [
                Idle(now, i, req.job_id, req.attempt, now, req.data_uri)
                for i in run.handle.instance_ids
            ]
            timeout = pool.settings.idle_timeout_seconds
            # after the cycle of the same instant: a job batched behind this one takes the
            # instance first, even with a timeout of 0
            self.kernel.after(
                timeout,
                lambda: self._trim(run.request.offering),
                priority=AFTER_CYCLE,
                label=f"idle {oid}",
            )
        else:
            self._in_use[oid] = self._in_use.get(oid, 0) - run.request.instances
        self.on_change()

    def close_pools(self, at: datetime) -> None:
        """Bill every instance still idle up to ``at`` (the end of the simulation) and give it
        back."""
        offerings = {r.request.offering.id: r.request.offering for r in self._runs.values()}
        offerings |= self._offerings
        for oid, pool in self._pools.items():
            offering = offerings.get(oid)
            if offering is None:
                continue
            self._drop_revoked(offering, pool, at)
            for idle in list(pool.idle):
                self._give_back(offering, pool, idle, until=at)

    def _cancel_pending(self, run: _Run) -> None:
        for event in run.events:
            if event.label.startswith(("finish", "revoke")):
                self.kernel.cancel(event)


def _what(run: _Run) -> str:
    """What a revocation takes away, for exit reasons."""
    if run.request.offering.market is Market.ON_PREM:
        return "on-prem pool (closing time)"
    return "spot capacity"
