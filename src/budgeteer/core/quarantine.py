"""Fault isolation: one job whose planning raises must not stop the plan of everyone else.

:func:`plan_isolated` is :func:`~budgeteer.core.cycle.plan_cycle` with a net. When the plan
raises, the pending jobs are split in halves and each half planned on its own (with every
other job of the snapshot, so dependencies and budgets read the same), recursing into the
halves that still raise, down to single jobs: ``k`` bad jobs among ``n`` cost about
``2·k·log₂ n`` extra plans of shrinking size, on this failure path only. The jobs found are
*quarantined*: left out of the plan (like parked jobs) and reported as holds with reason
``invalid`` and the error's text. The plan of the others is then exactly the plan they get
without those jobs. A failure no single job explains (two jobs that only break together) is
re-raised as it was: the caller's supervisor logs it and retries.

Pure: no clock, no I/O; the same snapshot gives the same plan and the same quarantine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from budgeteer.core.candidates import FrontCache
from budgeteer.core.cycle import plan_cycle
from budgeteer.core.outcomes import Hold, HoldReason, Plan
from budgeteer.core.policy import Policy
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.job import Job

#: What an ``invalid`` hold says before the error itself.
INVALID_PREFIX = "planning this job failed"


def plan_isolated(
    snapshot: Snapshot,
    policy: Policy | None = None,
    cache: FrontCache | None = None,
    known_bad: Mapping[str, str] | None = None,
) -> Plan:
    """The plan of ``snapshot``, with the jobs whose planning raises quarantined (see the
    module docstring). ``known_bad`` (job id → error) are jobs already found to raise, by an
    earlier plan of the same jobs: left out and reported at once, without trying them again
    (the API's plans, for ``explain`` and the metrics, take them from the scheduler's last
    cycle)."""
    every = [j for j in snapshot.jobs if j.state.is_pending and j.id not in snapshot.parked]
    bad = {j.id: known_bad[j.id] for j in every if known_bad and j.id in known_bad}
    if bad:
        snapshot = dataclasses.replace(snapshot, parked=snapshot.parked | frozenset(bad))
    try:
        return _with_quarantine(plan_cycle(snapshot, policy, cache), every, bad)
    except Exception:  # isolating the failure is the point: find the jobs behind it
        found = _culprits(snapshot, [j for j in every if j.id not in bad], policy, cache)
        if not found:  # no single job explains it: the supervisor sees the original error
            raise
    rest = dataclasses.replace(snapshot, parked=snapshot.parked | frozenset(found))
    return _with_quarantine(plan_cycle(rest, policy, cache), every, bad | found)


def _with_quarantine(plan: Plan, pending: Sequence[Job], bad: Mapping[str, str]) -> Plan:
    """``plan`` with an ``invalid`` hold for each job of ``bad``."""
    if not bad:
        return plan
    tiers = {j.id: j.tier for j in pending}
    quarantined = tuple(
        Hold(
            job_id,
            tiers[job_id],
            HoldReason.INVALID,
            f"{INVALID_PREFIX}: {error}",
            (),
            None,
            (("error", error),),
        )
        for job_id, error in sorted(bad.items())
    )
    return dataclasses.replace(plan, holds=(*plan.holds, *quarantined))


def quarantined(plan: Plan) -> dict[str, str]:
    """The jobs ``plan`` quarantined, with their errors."""
    return {
        h.job_id: dict(h.details).get("error", h.message)
        for h in plan.holds
        if h.reason is HoldReason.INVALID
    }


def _culprits(
    snapshot: Snapshot, jobs: Sequence[Job], policy: Policy | None, cache: FrontCache | None
) -> dict[str, str]:
    """The jobs of ``jobs`` whose planning raises on its own (job id → error text)."""
    error = _error(snapshot, jobs, policy, cache)
    if error is None:
        return {}
    if len(jobs) == 1:
        return {jobs[0].id: error}
    half = len(jobs) // 2
    return _culprits(snapshot, jobs[:half], policy, cache) | _culprits(
        snapshot, jobs[half:], policy, cache
    )


def _error(
    snapshot: Snapshot, jobs: Sequence[Job], policy: Policy | None, cache: FrontCache | None
) -> str | None:
    """The error planning only ``jobs`` of the pending ones raises, or ``None``."""
    keep = {j.id for j in jobs}
    others = frozenset(j.id for j in snapshot.jobs if j.state.is_pending and j.id not in keep)
    try:
        plan_cycle(dataclasses.replace(snapshot, parked=snapshot.parked | others), policy, cache)
    except Exception as exc:  # see plan_isolated
        return f"{type(exc).__name__}: {exc}"[:500]
    return None
