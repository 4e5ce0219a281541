"""Batching (pure): which jobs placed on a pool wait to run back to back on one of its instances
instead of booting their own.

A pool with ``batch_wait_seconds`` > 0 (:class:`~budgeteer.core.pools.PoolSettings`; or a wait
for some tiers, ``batch_wait_by_tier``: its tier's wait is the job's) trades a little latency
for fewer start-ups: a job admitted there this cycle

1. starts at once on a warm instance when the pool has one idle (no boot);
2. else waits for the pool's instance that frees first — a running attempt's expected end, or
   the end of a job already batched behind it — when that is no later than the job's
   submission + ``batch_wait`` and the job still finishes by its deadline from there (its
   plan's duration with the planner's margin, without the boot); failing that (or placed on
   an offering that is not pooled), for the instance that frees first in a *sibling* pool —
   the same instance type and market in another zone of the region, at no higher price, under
   that pool's wait: once it frees, the planner sees it warm and no dearer, and sends the job
   there;
3. else, when the pool holds no instance at all and nothing else is placed there, waits for a
   companion — until its submission + ``batch_wait``, if it can still boot then and meet its
   deadline: the next job that arrives on the pool runs back to back with it;
4. else boots an instance of its own (now, as planned); a companion waiting under rule 3 boots
   first, and the job goes behind it where rule 2 allows.

A waiting job is held (:attr:`~budgeteer.core.outcomes.HoldReason.BATCHED`) and planned again
each cycle: when the instance it waits for frees, the pool keeps it warm, the planner prices the
offering without a boot and rule 1 starts the job there. P0 jobs, jobs planned late, and jobs on
more than one instance never wait. A pool whose ``teams`` leave a job's team out is, for that
job, no pool at all (it boots its own instance, which is given back when it ends), and other
teams' running jobs there free no instance for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from budgeteer.core.outcomes import Admission, Hold, HoldReason, WakeOn
from budgeteer.core.pools import PoolView
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.job import Job
from budgeteer.domain.tier import Tier


def batch(
    snapshot: Snapshot, admissions: Sequence[Admission]
) -> tuple[list[Admission], list[Hold]]:
    """Split this cycle's ``admissions`` (in planning order) into those that launch now and
    those held to run back to back on a pool instance (see the module docstring)."""
    pools = {v.settings.name: v for v in snapshot.pools if v.settings.batches}
    if not pools or not admissions:
        return list(admissions), []
    now = snapshot.now
    jobs = {j.id: j for j in snapshot.jobs}
    startup = {o.id: o.startup_seconds for o in snapshot.offerings}
    idle = {oid: v.idle for oid, v in pools.items()}
    busy: dict[str, list[datetime]] = {oid: [] for oid in pools}
    for alloc in snapshot.running:
        owner = jobs.get(alloc.job_id)
        if alloc.offering_id in busy and alloc.expected_end is not None:
            if owner is not None and not pools[alloc.offering_id].settings.serves(owner.team):
                continue  # another team's instances: given back when it ends, not kept
            busy[alloc.offering_id] += [max(alloc.expected_end, now)] * alloc.instances
    lone: dict[str, Admission] = {}  # a job waiting for a companion, by offering
    held: dict[str, Hold] = {}
    siblings = _siblings(snapshot, pools)
    for a in admissions:
        oid = a.placement.offering_id
        job = jobs[a.job_id]
        view = pools.get(oid)
        if view is not None and not view.settings.serves(job.team):
            view = None  # the pool is other teams': this job boots its own, as unpooled
        near = [p for p in siblings.get(oid, []) if pools[p].settings.serves(job.team)]
        if a.placement.instances != 1 or a.late or job.tier is Tier.P0:
            continue
        if view is None and not near:
            continue
        if view is not None and idle[oid] > 0:  # rule 1
            idle[oid] -= 1
            busy[oid].append(a.placement.finish)
            continue
        # the plan's duration with its margin, without the boot (which a warm instance skips)
        run = a.placement.finish - now - timedelta(seconds=startup.get(oid, 0.0))
        if oid in lone:  # rule 4: the companion that waited boots; this job may follow it
            companion = lone.pop(oid)
            del held[companion.job_id]
            busy[oid].append(companion.placement.finish)
        # rule 2: its own pool's instance that frees first, else a sibling pool's (the same
        # instance type and market in another zone, at no higher price)
        for pool in ([oid] if view is not None else []) + near:
            wait = timedelta(seconds=pools[pool].settings.batch_wait_for(job.tier))
            first = min(busy[pool], default=None)
            if not wait or first is None or first > job.submitted_at + wait:
                continue
            if not _meets(job, first + run):
                continue
            busy[pool].remove(first)
            busy[pool].append(first + run)
            where = pool if pool == oid else f"{pool} (the same instance type, another zone)"
            held[a.job_id] = _hold(
                a,
                f"batched: runs on {where} when the job there ends (expected "
                f"{first:%H:%M:%S}), no boot of its own",
                first,
                (("offering", pool), ("instance_free_at", first.isoformat())),
            )
            break
        if a.job_id in held or view is None:
            continue
        slots = busy[oid]
        wait = timedelta(seconds=view.settings.batch_wait_for(job.tier))
        limit = job.submitted_at + wait
        boot = timedelta(seconds=view.settings.startup_seconds)
        if wait and not slots and now < limit and _meets(job, limit + boot + run):  # rule 3
            lone[oid] = a
            held[a.job_id] = _hold(
                a,
                f"batched: waits until {limit:%H:%M:%S} for another job on {oid} to share its "
                f"start-up",
                limit,
                (("offering", oid), ("wait_until", limit.isoformat())),
            )
            continue
        slots.append(a.placement.finish)  # rule 4: an instance of its own
    return [a for a in admissions if a.job_id not in held], list(held.values())


def _siblings(snapshot: Snapshot, pools: dict[str, PoolView]) -> dict[str, list[str]]:
    """For each offering, the batching pools of the same instance type and market in the same
    provider and region (other zones) whose price is no higher, cheapest first — a job placed
    there may wait for their instances (rule 2): once one frees, the planner sees it warm and
    no dearer, so the job goes there."""
    by_id = {o.id: o for o in snapshot.offerings}
    pooled = [by_id[oid] for oid in sorted(pools) if oid in by_id]
    out: dict[str, list[str]] = {}
    for o in snapshot.offerings:
        same = [
            p
            for p in pooled
            if p.id != o.id
            and (p.provider, p.region, p.instance_type, p.market)
            == (o.provider, o.region, o.instance_type, o.market)
            and p.usd_per_hour <= o.usd_per_hour
        ]
        if same:
            out[o.id] = [p.id for p in sorted(same, key=lambda p: (p.usd_per_hour, p.id))]
    return out


def _meets(job: Job, finish: datetime) -> bool:
    return job.deadline is None or finish <= job.deadline


def _hold(
    a: Admission, message: str, wake_at: datetime, details: tuple[tuple[str, str], ...]
) -> Hold:
    return Hold(
        a.job_id,
        a.tier,
        HoldReason.BATCHED,
        message,
        (WakeOn.CAPACITY_FREED,),
        wake_at,
        details,
    )


__all__ = ["PoolView", "batch"]
