"""Step 3 — order: tier first; inside a tier, fair share on money, then slack, age, sequence.

Fair share follows Slurm's classic factor F = 2^(-(U/U_total)/S): ``U`` is a team's spend with
exponential decay (``Policy.fair_share_half_life_seconds``) plus what its running jobs are still
committed to, ``S`` its weight share. Like Kueue's admission fair sharing, each job taken from a
team's queue adds its expected cost to the team's usage at once (an entry penalty), so one team
cannot flood a tier. Since U_total is common, ordering teams by ``U / weight`` is the same as
ordering by F. Jobs that waited longer than ``Policy.starvation_seconds`` go first in their tier,
oldest first: ageing bounds starvation. Jobs planned late (their deadline can no longer be met)
go last in their tier, oldest first, so a missed deadline does not cause another.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from budgeteer.core.candidates import Candidates
from budgeteer.core.policy import Policy, QueueOrder
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.job import Job
from budgeteer.domain.tier import Tier


def decayed_usage(snapshot: Snapshot, policy: Policy) -> dict[str, float]:
    """Each team's fair-share usage in USD: decayed spend plus running jobs' committed cost."""
    usage: dict[str, float] = defaultdict(float)
    half_life = policy.fair_share_half_life_seconds
    for rec in snapshot.spend:
        age = (snapshot.now - rec.at).total_seconds()
        if age >= 0:
            usage[rec.team] += float(rec.amount_usd) * 2.0 ** (-age / half_life)
    teams = {j.id: j.team for j in snapshot.jobs}
    for alloc in snapshot.running:
        team = teams.get(alloc.job_id)
        if team is not None:
            usage[team] += alloc.committed_usd
    return dict(usage)


def slack_seconds(job: Job, candidates: Candidates, now: datetime) -> float:
    """Time to spare if the job's cheapest plan started now (``inf`` without a deadline),
    less the time the jobs waiting on it keep (its reserve)."""
    if job.deadline is None:
        return math.inf
    runtime_h = float(candidates.full.finish_hours[0]) if candidates.full.size else 0.0
    return (job.deadline - now).total_seconds() - (runtime_h + candidates.reserve_hours) * 3600.0


@dataclass(frozen=True, slots=True)
class Ordered:
    """The queue in order, with the fair-share factor each job was ordered by."""

    jobs: tuple[Job, ...]
    fair_share: Mapping[str, float]


def order_queue(
    snapshot: Snapshot,
    ready: Sequence[Job],
    candidates: Mapping[str, Candidates],
    policy: Policy,
) -> Ordered:
    """The order in which admission considers ``ready`` jobs."""
    if policy.queue_order is QueueOrder.FIFO:
        fifo = sorted(ready, key=lambda j: (j.submitted_at, j.seq, j.id))
        return Ordered(tuple(fifo), dict.fromkeys((j.id for j in fifo), 1.0))
    usage = decayed_usage(snapshot, policy)
    by_tier: dict[Tier, list[Job]] = defaultdict(list)
    for job in ready:
        by_tier[job.tier].append(job)
    ordered: list[Job] = []
    factors: dict[str, float] = {}
    for tier in sorted(by_tier):
        ordered.extend(_order_tier(snapshot, by_tier[tier], candidates, usage, policy, factors))
    return Ordered(tuple(ordered), factors)


def _order_tier(
    snapshot: Snapshot,
    jobs: list[Job],
    candidates: Mapping[str, Candidates],
    usage: dict[str, float],
    policy: Policy,
    factors: dict[str, float],
) -> list[Job]:
    now = snapshot.now
    # late jobs (no longer able to meet their deadline) go after the on-time ones, oldest
    # first: a missed deadline must not cause another
    late = sorted((j for j in jobs if candidates[j.id].late), key=lambda j: (j.submitted_at, j.seq))
    if late:
        late_ids = {j.id for j in late}
        jobs = [j for j in jobs if j.id not in late_ids]
    aged = sorted(
        (j for j in jobs if (now - j.submitted_at).total_seconds() >= policy.starvation_seconds),
        key=lambda j: (j.submitted_at, j.seq),
    )
    aged_ids = {j.id for j in aged}
    queues: dict[str, list[tuple[float, datetime, int, Job]]] = defaultdict(list)
    for job in jobs:
        if job.id not in aged_ids:
            queues[job.team].append(
                (slack_seconds(job, candidates[job.id], now), job.submitted_at, job.seq, job)
            )
    for q in queues.values():
        q.sort(key=lambda e: e[:3])
        q.reverse()  # pop() from the end takes the head
    total_weight = sum(policy.team_weight(t) for t in set(usage) | set(queues)) or 1.0
    total_usage = sum(usage.values())

    def ratio(team: str) -> float:
        return usage.get(team, 0.0) / policy.team_weight(team)

    out: list[Job] = list(aged)
    heap = [(ratio(t), q[-1][:3], t) for t, q in queues.items()]
    heapq.heapify(heap)
    while heap:
        _, _, team = heapq.heappop(heap)
        job = queues[team].pop()[3]
        share = policy.team_weight(team) / total_weight
        norm = usage.get(team, 0.0) / total_usage if total_usage > 0 else 0.0
        factors[job.id] = 2.0 ** (-norm / share)
        out.append(job)
        cost = candidates[job.id].cheapest_usd
        if math.isfinite(cost):
            usage[team] = usage.get(team, 0.0) + cost  # entry penalty
        if queues[team]:
            heapq.heappush(heap, (ratio(team), queues[team][-1][:3], team))
    for job in (*aged, *late):
        factors.setdefault(job.id, 1.0)
    return out + late
