"""Waste: what a pipeline run spent before a validation gate stopped it (pure).

A job that ended ``gate_failed`` wastes its own spend and that of every job upstream of it in
the same project (its pipeline run: the features, the training the gate judged) — each job
counted once however many gates of its run failed. Example: features $4 → train $30 → validate
$1 (gate fails) → package (never starts): waste $35.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from budgeteer.domain.job import Job, JobState


def wasted_jobs(jobs: Mapping[str, Job]) -> dict[str, set[str]]:
    """For each ``gate_failed`` job: the jobs whose spend it wastes (itself included)."""
    out: dict[str, set[str]] = {}
    for job in jobs.values():
        if job.state is not JobState.GATE_FAILED:
            continue
        seen = {job.id}
        todo = [job]
        while todo:
            current = todo.pop()
            for dep in current.depends_on:
                up = jobs.get(dep.job)
                if up is not None and up.id not in seen and up.project == job.project:
                    seen.add(up.id)
                    todo.append(up)
        out[job.id] = seen
    return out


def waste_usd(jobs: Mapping[str, Job], spend: Mapping[str, Decimal]) -> Decimal:
    """All waste: the spend (``spend``: job id → accrued) of every job some failed gate wasted."""
    wasted: set[str] = set()
    for ids in wasted_jobs(jobs).values():
        wasted |= ids
    return sum((spend.get(j, Decimal(0)) for j in wasted), Decimal(0))


def spend_by_job(entries: Iterable[tuple[str, Decimal]]) -> dict[str, Decimal]:
    """Job id → the sum of its ledger amounts."""
    out: dict[str, Decimal] = {}
    for job_id, amount in entries:
        out[job_id] = out.get(job_id, Decimal(0)) + amount
    return out
