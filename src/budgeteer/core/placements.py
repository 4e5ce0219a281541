"""The placements of one resource shape: offering × worker count, packed onto whole instances.

The cycle's offerings become an :class:`OfferingTable` of parallel arrays once per cycle; each
resource shape (what a group of jobs asks for) gets its :class:`Configs`, pruned to placements
that no other placement beats for *any* job of the shape (:func:`prune`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from budgeteer.core.policy import Policy
from budgeteer.core.runtime import FloatArray, scaling_efficiency
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
    revocable: BoolArray  # capacity the market can take back: spot, calendar-lent on-prem
    usd_per_hour: FloatArray
    startup_hours: FloatArray
    interruptions_per_hour: FloatArray
    max_instances: FloatArray  # inf when unlimited
    rel: FloatArray
    venue: IntArray
    venues: tuple[str, ...]
    accelerator: IntArray
    accelerators: tuple[str, ...]
    index: dict[str, int]  # row of each offering id

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
            revocable=np.array([o.interruption_per_hour > 0 for o in offerings], dtype=bool),
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
            index={o.id: i for i, o in enumerate(offerings)},
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
        & ((job.spot.allowed & policy.allow_spot) | ~table.spot)
        & (policy.allow_revocable | ~table.revocable)
        & table.family_mask(res.accelerators)
    )
    if job.spot.avoid:
        ok &= ~(table.spot & np.array([o.id in job.spot.avoid for o in table.offerings]))
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


def prune(
    configs: Configs,
    group_by_venue: bool,
    group_by_accelerator: bool,
    apart: BoolArray | None = None,
) -> Configs:
    """Drop placements dominated for every job: no cheaper, no faster, no steadier for any work,
    checkpoint interval or restart overhead. Only placements with equal egress (same venue) and,
    for jobs with measured per-accelerator rates, equal accelerator are compared; a placement on
    a capacity-limited offering never dominates (it may be full). Placements marked ``apart``
    (on a warm pool instance holding the job's data: no egress there) are compared only among
    themselves.

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
    if apart is not None:
        label = label * 2 + apart
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


def with_boots(configs: Configs, boots: Mapping[str, float]) -> Configs:
    """``configs`` with the start-up ``boots`` (seconds, by offering id) put back: a pooled
    offering whose warm instances the shape's team may not take is priced, for it, with its
    boot (the snapshot prices it without)."""
    if not boots:
        return configs
    ids = [o.id for o in configs.table.offerings]
    startup = configs.startup_hours.copy()
    for j, i in enumerate(configs.offering.tolist()):
        if ids[i] in boots:
            startup[j] = boots[ids[i]] / 3600.0
    return replace(configs, startup_hours=startup)
