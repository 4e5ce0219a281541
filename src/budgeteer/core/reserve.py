"""Pipeline reserves: how long the jobs waiting on a job need after it.

A pipeline's steps share its deadline (``features → train → validate → package``, all due when
the pipeline is). Planned to that deadline alone, an upstream step may take the slowest, cheapest
plan that still finishes in time — and leave its dependents no time but for the fastest, dearest
plans, or none at all. So the planner (:func:`~budgeteer.core.candidates.nominate`) plans a job
with dependents to its deadline less its *reserve* — the longest chain of work after it — when a
plan can meet that. It is the latest-finish time of a backward pass over the DAG (critical-path
scheduling), with each dependent at its minimum workers on reference-speed GPUs plus a
start-up: the time it needs on an ordinary plan, not on the fastest one. The planner then
prices it: longer when the dependents' cheapest plans need more time and giving it pays, waived
(the job's own deadline) when it costs the job more than it saves them. The attempt records the
reserve its plan kept, and the spot decider plans the attempt to it
(:mod:`budgeteer.scheduler.spot_live`; this module's reserve for an attempt without one).

Only dependents that run when the job succeeds count (``success`` and ``any``): a job waiting on
a failure (``failure``) runs instead of the success path, not after it.
"""

from __future__ import annotations

from collections.abc import Iterable

from budgeteer.domain.job import DependencyCondition, Job

__all__ = ["DEPENDENT_STARTUP_HOURS", "downstream_hours", "successors"]

#: What a dependent is assumed to need to start, hours (the catalog's typical start-up).
DEPENDENT_STARTUP_HOURS = 0.1

_AFTER_SUCCESS = frozenset({DependencyCondition.SUCCESS, DependencyCondition.ANY})


def successors(jobs: Iterable[Job]) -> dict[str, list[Job]]:
    """For each job that unfinished jobs wait on (on its success): those jobs."""
    after: dict[str, list[Job]] = {}
    for job in jobs:
        if job.state.is_terminal:
            continue
        for dep in job.depends_on:
            if dep.on in _AFTER_SUCCESS:
                after.setdefault(dep.job, []).append(job)
    return after


def _own_hours(job: Job) -> float:
    """A dependent's own share of a reserve: its work at its minimum workers on
    reference-speed GPUs, plus a start-up."""
    gpus = max(1, job.resources.min_workers * job.resources.gpus_per_worker)
    return (job.work.reference_hours or 0.0) / gpus + DEPENDENT_STARTUP_HOURS


def downstream_hours(jobs: Iterable[Job]) -> dict[str, float]:
    """For each job that unfinished jobs wait on (on its success): the longest chain of work
    after it, in hours (each dependent at its minimum workers on reference-speed GPUs, plus a
    start-up). Example: train → validate (0.5 ref-h) → package (0.2 ref-h): train reserves
    0.5 + 0.1 + 0.2 + 0.1 = 0.9 h."""
    after = successors(jobs)
    memo: dict[str, float] = {}

    def chain(job_id: str, depth: int) -> float:
        if job_id in memo or depth > 100:  # the DAG is checked at submission; a guard anyway
            return memo.get(job_id, 0.0)
        best = 0.0
        for d in after.get(job_id, ()):
            best = max(best, _own_hours(d) + chain(d.id, depth + 1))
        memo[job_id] = best
        return best

    return {job_id: chain(job_id, 0) for job_id in after}
