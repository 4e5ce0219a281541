"""Fronts: each job's cost/time Pareto front of feasible placements, priced in one vectorised
pass per resource shape, and the caller-owned :class:`FrontCache` that keeps the pure parts
(pruned placements, timeless fronts) between cycles.

A placement is (offering × workers), packed onto whole instances. Jobs that ask for the same
resources share one set of placements (a *shape*), pruned once to those not dominated for
*any* job of the shape; each job is then evaluated against the survivors and keeps the cheapest
``Policy.max_front`` points of its front that meet its deadline and its own cost cap.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from budgeteer.core.data_moves import data_moves
from budgeteer.core.outcomes import Variant
from budgeteer.core.placements import (
    Configs,
    IntArray,
    OfferingTable,
    build_configs,
    prune,
    with_boots,
)
from budgeteer.core.policy import Policy
from budgeteer.core.pools import boots_of
from budgeteer.core.runtime import FloatArray, evaluate, preemption_moments
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.job import Job


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


def _work_matrix(
    jobs: Sequence[Job],
    configs: Configs,
    throughput: dict[str, float],
    variant: Variant,
    speeds: Sequence[tuple[str, str, float]] = (),
) -> FloatArray:
    """Reference hours of each job on each placement (a column when it does not vary), each
    divided by its family's learned speed on the placement's accelerator."""
    work = _catalog_work(jobs, configs, throughput, variant)
    learned: dict[str, dict[str, float]] = {}
    for family, accelerator, factor in speeds:
        learned.setdefault(family, {})[accelerator] = factor
    if not any(j.name in learned for j in jobs):
        return work
    names = configs.table.accelerators
    factors = np.ones((len(jobs), len(names)))
    for row, job in enumerate(jobs):
        for col, name in enumerate(names):
            factors[row, col] = learned.get(job.name, {}).get(name, 1.0)
    out: FloatArray = work / factors[:, configs.accelerator]
    return out


def _catalog_work(
    jobs: Sequence[Job], configs: Configs, throughput: dict[str, float], variant: Variant
) -> FloatArray:
    """Reference hours of each job on each placement by the catalog's speeds."""
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


def _front(
    snapshot: Snapshot,
    jobs: Sequence[Job],
    configs: Configs,
    throughput: dict[str, float],
    policy: Policy,
    variant: Variant,
    due: Mapping[str, datetime],
    wait: FloatArray | None,
    timeless: bool = False,
) -> tuple[list[Front], FloatArray, IntArray, FloatArray, FloatArray]:
    """Each job's front; also its fastest finish, the placement giving it, its cheapest
    deadline-meeting cost (to explain infeasibility) and its slowest reliable finish (a
    deadline at least that far away rules nothing out). ``wait``: each placement's wait for
    its offering's room (:func:`waits`; ``None`` for none, and always for a timeless front,
    which has no clock at all)."""
    now = snapshot.now
    deadlines = [None if timeless else due.get(j.id, j.deadline) for j in jobs]
    horizon = np.array(
        [[(d - now).total_seconds() / 3600.0 if d is not None else math.inf] for d in deadlines]
    )
    cap = np.array([[j.budget_usd if j.budget_usd is not None else math.inf] for j in jobs])
    egress, download = data_moves(snapshot, jobs, configs, policy)
    moments = [
        preemption_moments(j.checkpoint_interval_seconds, j.restart_overhead_seconds) for j in jobs
    ]
    ev = evaluate(
        work_ref_hours=_work_matrix(jobs, configs, throughput, variant, snapshot.speeds),
        speed_ref_per_hour=configs.speed[None, :],
        usd_per_hour=configs.usd_per_hour[None, :],
        startup_hours=configs.startup_hours[None, :] + download,
        interruptions_per_hour=configs.interruptions_per_hour[None, :],
        loss_mean_hours=np.array([[m[0]] for m in moments]),
        loss_second_moment=np.array([[m[1]] for m in moments]),
        egress_usd=egress,
        sigmas=policy.spot_deadline_sigmas,
    )
    shape = (len(jobs), len(configs))
    cost = _to(ev.cost_usd, shape)
    finish_hours = ev.finish_hours if wait is None else ev.finish_hours + wait[None, :]
    finish = _to(finish_hours, shape)
    reliable = _to(ev.inflation <= policy.max_spot_inflation, shape)
    on_time = reliable & (finish <= horizon)
    feasible = on_time & (cost <= cap)
    reliable_finish = np.where(reliable, finish, math.inf)
    fastest = reliable_finish.min(axis=1, initial=math.inf)
    fastest_col = reliable_finish.argmin(axis=1)
    slowest = np.where(reliable, finish, 0.0).max(axis=1, initial=0.0)
    cheapest_on_time = np.where(on_time, cost, math.inf).min(axis=1, initial=math.inf)

    rows = np.arange(shape[0])[:, None]  # with a column index, picks along each row
    masked = np.where(feasible, cost, math.inf)
    order = np.argsort(masked, axis=1, kind="stable")
    f_sorted = np.where(feasible, finish, math.inf)[rows, order]
    # only a cheaper point on an unlimited offering rules a point out: a limited one may be full
    f_unlimited = np.where(configs.limited[order], math.inf, f_sorted)
    prev_best = np.minimum.accumulate(
        np.concatenate([np.full((shape[0], 1), math.inf), f_unlimited[:, :-1]], axis=1), axis=1
    )
    on_front = np.isfinite(f_sorted) & (f_sorted < prev_best)
    limit = shape[1] if timeless else policy.max_front  # timeless: the whole front, uncut
    keep = on_front & (np.cumsum(on_front, axis=1) <= limit)
    # as wide as the longest front kept (a timeless front keeps every front point, but fronts
    # are short: gathering all placements' columns would cost as much as pricing them)
    width = max(1, min(limit, int(keep.sum(axis=1).max(initial=0))))
    pick = np.argsort(~keep, axis=1, kind="stable")[:, :width]
    cols = order[rows, pick]
    sizes = keep[rows, pick].sum(axis=1)

    def gather(a: FloatArray) -> FloatArray:
        g: FloatArray = _to(a, shape)[rows, cols]
        return g

    arrays = [
        gather(a)
        for a in (
            ev.cost_usd,
            ev.cost_std_usd,
            finish_hours,
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
    return fronts, fastest, fastest_col, cheapest_on_time, slowest


def _to(a: npt.NDArray[Any], shape: tuple[int, int]) -> npt.NDArray[Any]:
    """``a`` broadcast to ``shape`` (itself when it has it already: a job priced alone)."""
    return a if a.shape == shape else np.broadcast_to(a, shape)


def waits(
    snapshot: Snapshot, configs: Configs, cache: FrontCache | None = None
) -> FloatArray | None:
    """Hours each placement waits for its offering's room to come back (``None``: none do);
    the waits by offering kept in ``cache`` for the snapshot's instant when one is given."""
    if not snapshot.capacity_back:
        return None
    table = configs.table
    key = (snapshot.now, snapshot.capacity_back)
    kept = None if cache is None else cache.offering_waits
    if kept is not None and kept[1] is table and kept[0] == key:
        by_offering = kept[2]
    else:
        by_offering = np.zeros(len(table.offerings))
        for offering_id, back in snapshot.capacity_back:
            i = table.index.get(offering_id)
            if i is not None:
                by_offering[i] = max(0.0, (back - snapshot.now).total_seconds() / 3600.0)
        if cache is not None:
            cache.offering_waits = (key, table, by_offering)
    wait: FloatArray = by_offering[configs.offering]
    return wait if wait.any() else None


def empty_front(configs: Configs, variant: Variant) -> Front:
    z = np.zeros(0)
    return Front(configs, variant, np.zeros(0, dtype=np.int64), z, z, z, z, z, z, 0)


@dataclass(frozen=True, slots=True)
class Priced:
    """One job's front for one variant with the numbers that explain an empty one."""

    front: Front
    fastest: float
    fastest_col: int
    cheapest: float
    # a timeless front's cuts so far, by how many of its points a deadline keeps (see _cut)
    cuts: dict[int, Priced | None] = field(default_factory=dict, compare=False, repr=False)
    finishes: list[float] = field(default_factory=list, compare=False, repr=False)  # sorted


class FrontCache:
    """Memos of pure functions, owned by the caller and passed to :func:`nominate` (the
    scheduler keeps one for its loop; a one-off plan makes a fresh one). The first two are
    valid for one world — offerings, throughput and egress — and the cache empties itself when
    a snapshot brings another (compared by value; an unchanged tuple is recognised at once by
    identity), so no key is an object's ``id``.

    - **placements**: the pruned placements per (resource shape, policy);
    - **timeless fronts**: each job's whole front with no deadline, per (shape, variant,
      policy, the job's work and limits): a deadline ``h`` hours away only drops the points
      finishing later than ``h`` — a point's standing depends only on cheaper points that
      finish sooner, which a deadline it meets keeps too — so the front at ``h`` is the
      timeless front's points with finish ≤ ``h``, cut to ``Policy.max_front``, exactly.
      A timeless front is made on a job's *second* sighting: on the first it is priced for its
      deadline directly (cheaper, and most jobs are admitted then and never planned again);
    - **outage waits**: the hours each offering waits for its room (:func:`waits`), for the
      last instant and ``capacity_back`` priced, with the offering table they index — one
      entry, replaced whole (a reader sees the old one or the new one, never half of either).

    Bounded (least recently used entries go first) and safe to share between threads (one
    lock)."""

    def __init__(self, max_configs: int = 1024, max_fronts: int = 8192) -> None:
        self.max_configs = max_configs
        self.max_fronts = max_fronts
        self.lock = threading.Lock()
        self._world: tuple[object, ...] | None = None
        self.configs: OrderedDict[tuple[object, ...], Configs] = OrderedDict()
        self.fronts: OrderedDict[tuple[object, ...], Priced] = OrderedDict()
        self.seen: OrderedDict[tuple[object, ...], None] = OrderedDict()  # priced once
        self.table: OfferingTable | None = None  # the offerings as arrays, for this world
        # the outage waits by offering of the last instant priced (see :func:`waits`)
        self.offering_waits: tuple[tuple[object, ...], OfferingTable, FloatArray] | None = None

    def enter(self, snapshot: Snapshot) -> None:
        """Forget everything when ``snapshot`` is of another world than the cached one (call
        with the lock held)."""
        world = (snapshot.offerings, snapshot.throughput, snapshot.egress, snapshot.speeds)
        old = self._world
        if old is not None and all(a is b for a, b in zip(old, world, strict=True)):
            return
        if old != world:
            self.configs.clear()
            self.fronts.clear()
            self.seen.clear()
            self.table = None
        self._world = world

    def trim(self) -> None:
        """Drop the least recently used entries beyond the bounds (lock held)."""
        while len(self.configs) > self.max_configs:
            self.configs.popitem(last=False)
        while len(self.fronts) > self.max_fronts:
            self.fronts.popitem(last=False)
        while len(self.seen) > 4 * self.max_fronts:
            self.seen.popitem(last=False)


def _cut(timeless: Priced, horizon: float, max_front: int) -> Priced | None:
    """The front at ``horizon`` hours from a timeless one (``None`` when nothing meets it:
    the caller prices the job directly to explain why). Which points a deadline keeps depends
    only on how many of the sorted finishes it reaches, so each such count is cut once (and
    a job cut every cycle as its deadline nears is looked up, not cut again)."""
    count = bisect.bisect_right(timeless.finishes, horizon)
    if count in timeless.cuts:
        return timeless.cuts[count]
    cut = timeless.cuts[count] = _cut_front(timeless, horizon, max_front)
    return cut


def _cut_front(timeless: Priced, horizon: float, max_front: int) -> Priced | None:
    full = timeless.front
    keep = np.flatnonzero(full.finish_hours[: full.size] <= horizon)[:max_front]
    if keep.size == 0:
        return None
    front = Front(
        full.configs,
        full.variant,
        full.config[keep],
        full.cost_usd[keep],
        full.cost_std_usd[keep],
        full.finish_hours[keep],
        full.runtime_hours[keep],
        full.runtime_std_hours[keep],
        full.egress_usd[keep],
        int(keep.size),
    )
    return Priced(front, timeless.fastest, timeless.fastest_col, float(front.cost_usd[0]))


def priced_fronts(
    snapshot: Snapshot,
    jobs: Sequence[Job],
    shape: tuple[object, ...],
    configs: Configs,
    throughput: dict[str, float],
    policy: Policy,
    variant: Variant,
    due: Mapping[str, datetime],
    cache: FrontCache,
) -> list[Priced]:
    """Each job's :class:`Priced` for ``variant``: cut from its memoised timeless front where
    that leaves a point, else priced in one vectorised pass (see :func:`_front`).

    Offerings whose room comes back later (``Snapshot.capacity_back``) add a clock-dependent
    wait to their placements' finishes. That changes nothing for a job whose timeless front and
    fastest placement avoid them: a waiting placement only finishes later, so what ruled it out
    still does, and a front point's standing depends on the cheapest-finishing cheaper point,
    itself a front point. Only jobs whose front or fastest placement is on such an offering are
    priced afresh."""
    now = snapshot.now
    wait = waits(snapshot, configs, cache)
    waiting = None if wait is None else wait > 0
    found: list[Priced | None] = [None] * len(jobs)
    horizons: list[float] = []
    missing: dict[tuple[object, ...], list[int]] = {}
    learned: dict[str, tuple[tuple[str, float], ...]] = {}
    for family, accelerator, factor in snapshot.speeds:
        learned[family] = (*learned.get(family, ()), (accelerator, factor))
    with cache.lock:
        for row, job in enumerate(jobs):
            deadline = due.get(job.id, job.deadline)
            horizons.append((deadline - now).total_seconds() / 3600.0 if deadline else math.inf)
            key: tuple[object, ...] = (
                shape,
                variant,
                policy,
                job.work,
                job.incremental_reference_hours,
                job.budget_usd,
                job.checkpoint_interval_seconds,
                job.restart_overhead_seconds,
                job.data,
                learned.get(job.name),  # the family's learned speeds
            )
            hit = cache.fronts.get(key)
            if hit is not None:
                cache.fronts.move_to_end(key)
                if waiting is None or not _waits_for(hit, waiting):
                    found[row] = _cut(hit, horizons[row], policy.max_front)
            elif key in cache.seen:  # seen before and planned again: worth a timeless front
                missing.setdefault(key, []).append(row)
            else:  # first sight: most jobs are admitted at once and never planned again
                cache.seen[key] = None
    if missing:
        firsts = [rows[0] for rows in missing.values()]
        fronts, fastest, col, _, _ = _front(
            snapshot,
            [jobs[r] for r in firsts],
            configs,
            throughput,
            policy,
            variant,
            due,
            None,
            timeless=True,
        )
        with cache.lock:
            for i, (missed, rows) in enumerate(missing.items()):
                front = fronts[i]
                timeless = Priced(
                    front,
                    float(fastest[i]),
                    int(col[i]),
                    math.inf,
                    finishes=sorted(front.finish_hours[: front.size].tolist()),
                )
                cache.fronts[missed] = timeless
                if waiting is not None and _waits_for(timeless, waiting):
                    continue
                for row in rows:
                    found[row] = _cut(timeless, horizons[row], policy.max_front)
            cache.trim()
    empty = [row for row, p in enumerate(found) if p is None]
    if empty:  # first sight, nothing meets the deadline, or waits matter: price directly
        direct = direct_fronts(
            snapshot, [jobs[r] for r in empty], configs, throughput, policy, variant, due, wait
        )
        for row, p in zip(empty, direct, strict=True):
            found[row] = p
    return [p for p in found if p is not None]


def _waits_for(timeless: Priced, waiting: npt.NDArray[np.bool_]) -> bool:
    """Whether a waiting offering (``waiting``, per placement) is on the timeless front or
    gives the fastest placement: then the wait may change the job's front."""
    front = timeless.front
    return bool(waiting[timeless.fastest_col]) or bool(waiting[front.config[: front.size]].any())


def direct_fronts(
    snapshot: Snapshot,
    jobs: Sequence[Job],
    configs: Configs,
    throughput: dict[str, float],
    policy: Policy,
    variant: Variant,
    due: Mapping[str, datetime],
    wait: FloatArray | None,
) -> list[Priced]:
    """Each job's :class:`Priced` for ``variant``, priced afresh (no memo); ``wait``: as
    :func:`waits` gives it for the snapshot."""
    fronts, fastest, col, cheapest, _ = _front(
        snapshot, jobs, configs, throughput, policy, variant, due, wait
    )
    return [
        Priced(f, float(h), int(c), float(u))
        for f, h, c, u in zip(fronts, fastest, col, cheapest, strict=True)
    ]


def placements(
    snapshot: Snapshot, key: tuple[object, ...], job: Job, policy: Policy, cache: FrontCache
) -> Configs:
    """The pruned placements of a resource shape (memoised in ``cache``)."""
    memo_key = (key, policy)
    with cache.lock:
        cache.enter(snapshot)
        hit = cache.configs.get(memo_key)
        if hit is not None:
            cache.configs.move_to_end(memo_key)
            return hit
        table = cache.table
        if table is None:  # one table of the offerings per world, shared by every shape
            table = cache.table = OfferingTable.build(snapshot.offerings, dict(snapshot.throughput))
    closed = boots_of(snapshot.pools, cast("tuple[str, ...]", key[9]))  # closed to its team
    configs = with_boots(build_configs(job, table, policy), closed)
    held = {oid for oid, _ in cast("tuple[tuple[str, int], ...]", key[8])}
    holding = [i for i, o in enumerate(table.offerings) if o.id in held]
    configs = prune(
        configs,
        group_by_venue=key[6] is not None,
        group_by_accelerator=bool(key[7]),
        apart=np.isin(configs.offering, holding) if holding else None,
    )
    with cache.lock:
        cache.configs[memo_key] = configs
        cache.trim()
    return configs
