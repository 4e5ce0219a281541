"""Step 2 — nominate: every job's cost/time Pareto front of feasible placements.

A placement is (offering × workers), packed onto whole instances. Jobs that ask for the same
resources share one set of placements (a *shape*), pruned once per cycle to those not dominated
for *any* job of the shape; each job is then evaluated against the survivors in one vectorised
pass and keeps the cheapest ``Policy.max_front`` points of its front that meet its deadline and
its own cost cap. The full variant and, when the job offers one, the incremental variant get a
front each.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from budgeteer.core.outcomes import Variant
from budgeteer.core.policy import Policy
from budgeteer.core.runtime import FloatArray, evaluate, preemption_moments, scaling_efficiency
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Market, Offering

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class OfferingTable:
    """The cycle's offerings as parallel arrays, built once per cycle; names are coded."""

    offerings: tuple[Offering, ...]
    gpus: IntArray
    gpu_memory_gib: FloatArray
    spot: BoolArray
    usd_per_hour: FloatArray
    startup_hours: FloatArray
    interruptions_per_hour: FloatArray
    max_instances: FloatArray  # inf when unlimited
    rel: FloatArray
    venue: IntArray
    venues: tuple[str, ...]
    accelerator: IntArray
    accelerators: tuple[str, ...]

    @classmethod
    def build(cls, offerings: Sequence[Offering], throughput: dict[str, float]) -> OfferingTable:
        """Arrays for ``offerings``; ``throughput`` must know every accelerator."""
        venues = tuple(sorted({o.venue for o in offerings}))
        accs = tuple(sorted({o.accelerator for o in offerings}))
        v_code = {v: i for i, v in enumerate(venues)}
        a_code = {a: i for i, a in enumerate(accs)}
        return cls(
            offerings=tuple(offerings),
            gpus=np.array([o.accelerators_per_instance for o in offerings], dtype=np.int64),
            gpu_memory_gib=np.array([o.gpu_memory_gib for o in offerings], dtype=np.float64),
            spot=np.array([o.market is Market.SPOT for o in offerings], dtype=bool),
            usd_per_hour=np.array([o.usd_per_hour for o in offerings], dtype=np.float64),
            startup_hours=np.array([o.startup_seconds / 3600.0 for o in offerings]),
            interruptions_per_hour=np.array([o.interruption_per_hour for o in offerings]),
            max_instances=np.array(
                [math.inf if o.max_instances is None else o.max_instances for o in offerings]
            ),
            rel=np.array([throughput[o.accelerator] for o in offerings], dtype=np.float64),
            venue=np.array([v_code[o.venue] for o in offerings], dtype=np.int64),
            venues=venues,
            accelerator=np.array([a_code[o.accelerator] for o in offerings], dtype=np.int64),
            accelerators=accs,
        )

    def family_mask(self, families: Sequence[str]) -> BoolArray:
        """Offerings whose accelerator belongs to one of ``families`` (all if none given)."""
        if not families:
            return np.ones(len(self.offerings), dtype=bool)
        ok = [any(a == f or a.startswith(f + "-") for f in families) for a in self.accelerators]
        mask: BoolArray = np.array(ok, dtype=bool)[self.accelerator]
        return mask


@dataclass(frozen=True, slots=True)
class Configs:
    """The placements of one resource shape (parallel arrays; ``offering`` indexes the table)."""

    table: OfferingTable
    offering: IntArray
    workers: IntArray
    instances: IntArray
    speed: FloatArray
    usd_per_hour: FloatArray
    startup_hours: FloatArray
    interruptions_per_hour: FloatArray
    limited: BoolArray

    def __len__(self) -> int:
        return len(self.offering)

    @property
    def venue(self) -> IntArray:
        """Venue code of each placement (see ``table.venues``)."""
        return self.table.venue[self.offering]

    @property
    def accelerator(self) -> IntArray:
        """Accelerator code of each placement (see ``table.accelerators``)."""
        return self.table.accelerator[self.offering]

    def select(self, sel: IntArray) -> Configs:
        """The placements at positions ``sel``."""
        return Configs(
            self.table,
            self.offering[sel],
            self.workers[sel],
            self.instances[sel],
            self.speed[sel],
            self.usd_per_hour[sel],
            self.startup_hours[sel],
            self.interruptions_per_hour[sel],
            self.limited[sel],
        )


@dataclass(frozen=True, slots=True)
class Front:
    """One job's Pareto front for one variant, cheapest first (``size`` valid entries)."""

    configs: Configs
    variant: Variant
    config: IntArray
    cost_usd: FloatArray
    cost_std_usd: FloatArray
    finish_hours: FloatArray
    runtime_hours: FloatArray
    runtime_std_hours: FloatArray
    egress_usd: FloatArray
    size: int


@dataclass(frozen=True, slots=True)
class Candidates:
    """Everything the later steps need to know about placing one job."""

    job: Job
    full: Front
    incremental: Front | None
    infeasible: str | None = None
    details: tuple[tuple[str, str], ...] = ()

    @property
    def cheapest_usd(self) -> float:
        """Cost of the cheapest feasible plan, either variant (``inf`` if none)."""
        best = float(self.full.cost_usd[0]) if self.full.size else math.inf
        if self.incremental is not None and self.incremental.size:
            best = min(best, float(self.incremental.cost_usd[0]))
        return best


def _worker_options(lo: int, hi: int) -> list[int]:
    """Worker counts considered: the range's ends and the powers of two between them."""
    opts = {lo, hi}
    p = 1
    while p < hi:
        if p > lo:
            opts.add(p)
        p *= 2
    return sorted(opts)


def build_configs(job: Job, table: OfferingTable, policy: Policy) -> Configs:
    """All placements of ``job``'s resource shape, before pruning."""
    res = job.resources
    k = res.gpus_per_worker
    ok = (
        (table.gpus >= k)
        & (table.gpu_memory_gib >= res.min_gpu_memory_gib)
        & (job.spot.allowed | ~table.spot)
        & table.family_mask(res.accelerators)
    )
    idx = np.flatnonzero(ok)
    per_instance = table.gpus[idx] // k
    parts = []
    for w in _worker_options(res.min_workers, res.max_workers):
        n = -(-w // per_instance)
        fits = n <= table.max_instances[idx]
        parts.append(
            (
                idx[fits],
                np.full(int(fits.sum()), w, dtype=np.int64),
                n[fits],
                np.minimum(w, per_instance[fits]) * k,
            )
        )
    offering = np.concatenate([p[0] for p in parts])
    workers = np.concatenate([p[1] for p in parts])
    instances = np.concatenate([p[2] for p in parts])
    used = np.concatenate([p[3] for p in parts]).astype(np.float64)
    eff = scaling_efficiency(used, instances.astype(np.float64), policy)
    return Configs(
        table=table,
        offering=offering,
        workers=workers,
        instances=instances,
        speed=table.rel[offering] * workers * k * eff,
        usd_per_hour=table.usd_per_hour[offering] * instances,
        startup_hours=table.startup_hours[offering],
        interruptions_per_hour=table.interruptions_per_hour[offering] * instances,
        limited=np.isfinite(table.max_instances[offering]),
    )


def prune(configs: Configs, group_by_venue: bool, group_by_accelerator: bool) -> Configs:
    """Drop placements dominated for every job: no cheaper, no faster, no steadier for any work,
    checkpoint interval or restart overhead. Only placements with equal egress (same venue) and,
    for jobs with measured per-accelerator rates, equal accelerator are compared; a placement on
    a capacity-limited offering never dominates (it may be full).

    A cheap pre-pass removes what the 2-D skyline (cost and time per unit of work) of each group
    dominates in all six dimensions; the exact pairwise check then runs on the survivors.
    """
    m = len(configs)
    if m <= 1:
        return configs
    v = 1.0 / configs.speed
    p, s, lam = configs.usd_per_hour, configs.startup_hours, configs.interruptions_per_hour
    dims = np.stack([p * v, p * v * lam, p * s, v, v * lam, s], axis=1)
    label = (configs.venue if group_by_venue else np.zeros(m, dtype=np.int64)) * 1000 + (
        configs.accelerator if group_by_accelerator else 0
    )
    keep = np.ones(m, dtype=bool)
    for code in np.unique(label):
        g = np.flatnonzero(label == code)
        keep[g] = _undominated(dims[g], configs.limited[g])
    return configs.select(np.flatnonzero(keep))


def _dominates(a: FloatArray, b: FloatArray, tie: BoolArray) -> BoolArray:
    """``out[i, j]``: row ``a[i]`` dominates row ``b[j]`` (``tie[i, j]`` breaks exact ties)."""
    le = np.ones((len(a), len(b)), dtype=bool)
    lt = np.zeros((len(a), len(b)), dtype=bool)
    for k in range(a.shape[1]):
        x, y = a[:, k][:, None], b[:, k][None, :]
        le &= x <= y + 1e-12
        lt |= x < y - 1e-12
    result: BoolArray = le & (lt | tie)
    return result


def _undominated(d: FloatArray, limited: BoolArray) -> BoolArray:
    n = len(d)
    order = np.lexsort(d.T[::-1])  # lexicographic: any dominator comes before what it dominates
    d, limited = d[order], limited[order]
    # pivots: the unlimited 2-D skyline on (cost per work, time per work)
    free = np.flatnonzero(~limited)
    best = np.minimum.accumulate(np.concatenate([[math.inf], d[free, 3]]))[:-1]
    pivots = free[d[free, 3] < best]
    pos = np.arange(n)
    alive: BoolArray = np.asarray(
        ~_dominates(d[pivots], d, pivots[:, None] < pos[None, :]).any(axis=0), dtype=bool
    )
    rest = np.flatnonzero(alive)
    sub = d[rest]
    tie = rest[:, None] < rest[None, :]
    beaten = (_dominates(sub, sub, tie) & ~limited[rest][:, None]).any(axis=0)
    alive[rest[beaten]] = False
    out = np.zeros(n, dtype=bool)
    out[order] = alive
    return out


def _shape_key(job: Job) -> tuple[object, ...]:
    r = job.resources
    return (
        r.accelerators,
        r.min_gpu_memory_gib,
        r.gpus_per_worker,
        r.min_workers,
        r.max_workers,
        job.spot.allowed,
        job.data.location if job.data else None,
        bool(job.work.steps_per_hour_on),
    )


def _work_matrix(
    jobs: Sequence[Job], configs: Configs, throughput: dict[str, float], variant: Variant
) -> FloatArray:
    """Reference hours of each job on each placement (a column when it does not vary)."""
    if variant is Variant.INCREMENTAL:
        return np.array([[j.incremental_reference_hours or math.nan] for j in jobs])
    if not any(j.work.steps_per_hour_on for j in jobs):
        return np.array([[j.work.reference_hours or math.nan] for j in jobs])
    out = np.empty((len(jobs), len(configs)))
    for row, job in enumerate(jobs):
        k = job.resources.gpus_per_worker
        rates = dict(job.work.steps_per_hour_on)
        if not rates:
            out[row, :] = job.work.reference_hours or math.nan
            continue
        steps = float(job.work.steps or 0)
        first_acc, first_rate = job.work.steps_per_hour_on[0]
        default = steps / first_rate * throughput[first_acc] * k
        names = configs.table.accelerators
        per_acc = np.array(
            [
                default if (rate := rates.get(a)) is None else steps / rate * throughput[a] * k
                for a in names
            ]
        )
        out[row, :] = per_acc[configs.accelerator]
    return out


def _egress_matrix(snapshot: Snapshot, jobs: Sequence[Job], configs: Configs) -> FloatArray:
    """Egress cost of each job's data to each placement's venue (a column of zeros if none)."""
    if not any(j.data and j.data.size_gb > 0 for j in jobs):
        return np.zeros((len(jobs), 1))
    venue_codes = np.unique(configs.venue)
    per_venue = np.zeros((len(jobs), len(configs.table.venues)))
    by_location: dict[str, list[int]] = defaultdict(list)
    size_of: dict[str, list[float]] = defaultdict(list)
    for row, job in enumerate(jobs):
        if job.data and job.data.size_gb > 0:
            by_location[job.data.location].append(row)
            size_of[job.data.location].append(job.data.size_gb)
    for location, rows in by_location.items():
        sizes = np.array(size_of[location])
        for code in venue_codes.tolist():
            venue = configs.table.venues[code]
            per_venue[rows, code] = snapshot.egress.cost_usd_many(location, venue, sizes)
    result: FloatArray = per_venue[:, configs.venue]
    return result


def _front(
    snapshot: Snapshot,
    jobs: Sequence[Job],
    configs: Configs,
    throughput: dict[str, float],
    policy: Policy,
    variant: Variant,
) -> tuple[list[Front], FloatArray, IntArray, FloatArray]:
    """Each job's front; also its fastest finish, the placement giving it, and its cheapest
    deadline-meeting cost (to explain infeasibility)."""
    now = snapshot.now
    horizon = np.array(
        [[(j.deadline - now).total_seconds() / 3600.0 if j.deadline else math.inf] for j in jobs]
    )
    cap = np.array([[j.budget_usd if j.budget_usd is not None else math.inf] for j in jobs])
    egress = _egress_matrix(snapshot, jobs, configs)
    moments = [
        preemption_moments(j.checkpoint_interval_seconds, j.restart_overhead_seconds) for j in jobs
    ]
    ev = evaluate(
        work_ref_hours=_work_matrix(jobs, configs, throughput, variant),
        speed_ref_per_hour=configs.speed[None, :],
        usd_per_hour=configs.usd_per_hour[None, :],
        startup_hours=configs.startup_hours[None, :],
        interruptions_per_hour=configs.interruptions_per_hour[None, :],
        loss_mean_hours=np.array([[m[0]] for m in moments]),
        loss_second_moment=np.array([[m[1]] for m in moments]),
        egress_usd=egress,
        sigmas=policy.spot_deadline_sigmas,
    )
    shape = (len(jobs), len(configs))
    cost = np.broadcast_to(ev.cost_usd, shape)
    finish = np.broadcast_to(ev.finish_hours, shape)
    reliable = np.broadcast_to(ev.inflation <= policy.max_spot_inflation, shape)
    on_time = reliable & (finish <= horizon)
    feasible = on_time & (cost <= cap)
    reliable_finish = np.where(reliable, finish, math.inf)
    fastest = reliable_finish.min(axis=1, initial=math.inf)
    fastest_col = reliable_finish.argmin(axis=1)
    cheapest_on_time = np.where(on_time, cost, math.inf).min(axis=1, initial=math.inf)

    masked = np.where(feasible, cost, math.inf)
    order = np.argsort(masked, axis=1, kind="stable")
    f_sorted = np.take_along_axis(np.where(feasible, finish, math.inf), order, axis=1)
    # only a cheaper point on an unlimited offering rules a point out: a limited one may be full
    f_unlimited = np.where(configs.limited[order], math.inf, f_sorted)
    prev_best = np.minimum.accumulate(
        np.concatenate([np.full((shape[0], 1), math.inf), f_unlimited[:, :-1]], axis=1), axis=1
    )
    on_front = np.isfinite(f_sorted) & (f_sorted < prev_best)
    keep = on_front & (np.cumsum(on_front, axis=1) <= policy.max_front)
    width = max(1, min(policy.max_front, shape[1]))
    pick = np.argsort(~keep, axis=1, kind="stable")[:, :width]
    cols = np.take_along_axis(order, pick, axis=1)
    valid = np.take_along_axis(keep, pick, axis=1)
    sizes = valid.sum(axis=1)

    def gather(a: FloatArray) -> FloatArray:
        g: FloatArray = np.take_along_axis(np.broadcast_to(a, shape), cols, axis=1)
        return g

    arrays = [
        gather(a)
        for a in (
            ev.cost_usd,
            ev.cost_std_usd,
            ev.finish_hours,
            ev.runtime_hours,
            ev.runtime_std_hours,
        )
    ]
    egress_front = gather(egress)
    fronts = [
        Front(
            configs,
            variant,
            cols[r],
            arrays[0][r],
            arrays[1][r],
            arrays[2][r],
            arrays[3][r],
            arrays[4][r],
            egress_front[r],
            int(sizes[r]),
        )
        for r in range(len(jobs))
    ]
    return fronts, fastest, fastest_col, cheapest_on_time


def _empty_front(configs: Configs, variant: Variant) -> Front:
    z = np.zeros(0)
    return Front(configs, variant, np.zeros(0, dtype=np.int64), z, z, z, z, z, z, 0)


def nominate(snapshot: Snapshot, jobs: Sequence[Job], policy: Policy) -> dict[str, Candidates]:
    """Candidates for every job in ``jobs`` (by job id), fronts cheapest first."""
    throughput = dict(snapshot.throughput)
    table = OfferingTable.build(snapshot.offerings, throughput)
    shapes: dict[tuple[object, ...], list[Job]] = defaultdict(list)
    for job in jobs:
        shapes[_shape_key(job)].append(job)
    out: dict[str, Candidates] = {}
    for key, members in shapes.items():
        configs = prune(
            build_configs(members[0], table, policy),
            group_by_venue=key[6] is not None,
            group_by_accelerator=bool(key[7]),
        )
        if len(configs) == 0:
            for job in members:
                out[job.id] = Candidates(
                    job, _empty_front(configs, Variant.FULL), None, _no_offering_message(job)
                )
            continue
        full, fastest, fastest_col, cheapest = _front(
            snapshot, members, configs, throughput, policy, Variant.FULL
        )
        incr_jobs = [j for j in members if j.incremental_reference_hours is not None]
        incr: dict[str, Front] = {}
        if incr_jobs:
            fronts, _, _, _ = _front(
                snapshot, incr_jobs, configs, throughput, policy, Variant.INCREMENTAL
            )
            incr = {j.id: f for j, f in zip(incr_jobs, fronts, strict=True)}
        for row, job in enumerate(members):
            inc = incr.get(job.id)
            message: str | None = None
            details: tuple[tuple[str, str], ...] = ()
            if full[row].size == 0 and (inc is None or inc.size == 0):
                message, details = _infeasible_message(
                    snapshot,
                    job,
                    configs,
                    float(fastest[row]),
                    int(fastest_col[row]),
                    float(cheapest[row]),
                )
            out[job.id] = Candidates(job, full[row], inc, message, details)
    return out


def _no_offering_message(job: Job) -> str:
    r = job.resources
    families = ", ".join(r.accelerators) or "any accelerator"
    spot = "" if job.spot.allowed else " (spot not allowed)"
    return (
        f"no offering matches: {families}, ≥{r.min_gpu_memory_gib:g} GiB per GPU, "
        f"{r.gpus_per_worker} GPU(s) per worker, {r.min_workers}-{r.max_workers} workers{spot}"
    )


def _infeasible_message(
    snapshot: Snapshot,
    job: Job,
    configs: Configs,
    fastest_h: float,
    best: int,
    cheapest_usd: float,
) -> tuple[str, tuple[tuple[str, str], ...]]:
    horizon = (job.deadline - snapshot.now).total_seconds() / 3600.0 if job.deadline else math.inf
    if not math.isfinite(fastest_h):
        return "every matching spot plan is too unreliable and no other market fits", ()
    if fastest_h > horizon:
        o = snapshot.offerings[int(configs.offering[best])]
        what = (
            f"{int(configs.instances[best])}×{o.instance_type} "
            f"({o.accelerators_per_instance}×{o.accelerator}) {o.market.value} {o.venue}"
        )
        return (
            f"fastest option {what} finishes in {fastest_h:.1f} h; deadline in {horizon:.1f} h",
            (
                ("fastest_finish_hours", f"{fastest_h:.3f}"),
                ("deadline_hours", f"{horizon:.3f}"),
                ("fastest_option", what),
            ),
        )
    cap = job.budget_usd if job.budget_usd is not None else math.inf
    return (
        f"cheapest plan that meets the deadline costs ${cheapest_usd:,.2f}; "
        f"the job's budget_usd is ${cap:,.2f}",
        (("cheapest_on_time_usd", f"{cheapest_usd:.2f}"), ("budget_usd", f"{cap:.2f}")),
    )
