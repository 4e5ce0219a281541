"""Batching (pure): which jobs placed on a pool wait to run back to back on one of its instances
instead of booting their own.

A pool with ``batch_wait_seconds`` > 0 (:class:`~budgeteer.core.pools.PoolSettings`; or a wait
for some tiers, ``batch_wait_by_tier``: its tier's wait is the job's) trades a little latency
for fewer start-ups: a job admitted there this cycle

1. starts at once on a warm instance when the pool has one idle (no boot);
2. else waits for the pool's instance that frees first — a running attempt's expected end, or
   the end of a job already batched behind it — when that is no later than the job's
   submission + ``batch_wait`` and the job still finishes by its deadline from there (its
   plan's duration with the planner's margin, without the boot);
3. else, when the pool holds no instance at all and nothing else is placed there, waits for a
   companion — until its submission + ``batch_wait``, if it can still boot then and meet its
   deadline: the next job that arrives on the pool runs back to back with it;
4. else boots an instance of its own (now, as planned); a companion waiting under rule 3 boots
   first, and the job goes behind it where rule 2 allows.

A waiting job is held (:attr:`~budgeteer.core.outcomes.HoldReason.BATCHED`) and planned again
each cycle: when the instance it waits for frees, the pool keeps it warm, the planner prices the
offering without a boot and rule 1 starts the job there. P0 jobs, jobs planned late, and jobs on
more than one instance never wait. The instances are the pool's offering's; a job placed on
another offering (another zone) is not moved here — the planner already chose it.
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
        if alloc.offering_id in busy and alloc.expected_end is not None:
            busy[alloc.offering_id] += [max(alloc.expected_end, now)] * alloc.instances
    lone: dict[str, Admission] = {}  # a job waiting for a companion, by offering
    held: dict[str, Hold] = {}
    for a in admissions:
        oid = a.placement.offering_id
        view = pools.get(oid)
        job = jobs[a.job_id]
        if view is None or a.placement.instances != 1 or a.late or job.tier is Tier.P0:
            continue
        if idle[oid] > 0:  # rule 1
            idle[oid] -= 1
            busy[oid].append(a.placement.finish)
            continue
        wait = timedelta(seconds=view.settings.batch_wait_for(job.tier))
        limit = job.submitted_at + wait
        # the plan's duration with its margin, without the boot (which a warm instance skips)
        run = a.placement.finish - now - timedelta(seconds=startup.get(oid, 0.0))
        if oid in lone:  # rule 4: the companion that waited boots; this job may follow it
            companion = lone.pop(oid)
            del held[companion.job_id]
            busy[oid].append(companion.placement.finish)
        slots = busy[oid]
        if not wait:  # its tier never waits here: an instance of its own (rule 4)
            slots.append(a.placement.finish)
            continue
        first = min(slots, default=None)
        if first is not None and first <= limit and _meets(job, first + run):  # rule 2
            slots.remove(first)
            slots.append(first + run)
            held[a.job_id] = _hold(
                a,
                f"batched: runs on {oid} when the job there ends (expected {first:%H:%M:%S}), "
                f"no boot of its own",
                first,
                (("offering", oid), ("instance_free_at", first.isoformat())),
            )
            continue
        boot = timedelta(seconds=view.settings.startup_seconds)
        if not slots and now < limit and _meets(job, limit + boot + run):  # rule 3
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
