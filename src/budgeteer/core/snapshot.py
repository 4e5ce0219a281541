"""The frozen input of one scheduling cycle."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from budgeteer.core.pools import PoolView
from budgeteer.domain.budget import Budget, SpendRecord
from budgeteer.domain.egress import EgressTable
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Offering


@dataclass(frozen=True, slots=True)
class Allocation:
    """Compute a running job holds now, and what it is still expected to cost."""

    job_id: str
    offering_id: str
    instances: int
    committed_usd: float
    #: when its plan expected it to end (None when not known: an attempt re-attached after a
    #: restart); a job batched on a pool waits for the instances this frees
    expected_end: datetime | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one planning cycle reads, frozen: the clock reading included.

    ``jobs`` holds every job the cycle may need: pending ones to plan, running ones (for
    budgets and fair share) and finished ones that others depend on. ``spend`` is the accrued
    ledger (at least the current periods and the fair-share half-life window). ``parked``
    names pending jobs the supervisor leaves out of this cycle's planning (held for budget or
    quota a moment ago, nothing has happened since that could admit them: see
    :mod:`budgeteer.scheduler`); they still count as known jobs for their dependents.
    """

    now: datetime
    jobs: tuple[Job, ...]
    offerings: tuple[Offering, ...]
    throughput: tuple[tuple[str, float], ...]
    egress: EgressTable
    budgets: tuple[Budget, ...] = ()
    spend: tuple[SpendRecord, ...] = ()
    running: tuple[Allocation, ...] = ()
    parked: frozenset[str] = frozenset()
    capacity_back: tuple[tuple[str, datetime], ...] = ()
    #: (family, accelerator, factor): a job family's learned speed on an accelerator ÷ the
    #: catalog's, where it differs (:mod:`budgeteer.core.speed`); a job's work there is divided
    #: by it
    speeds: tuple[tuple[str, str, float], ...] = ()
    #: the pooled offerings (:mod:`budgeteer.core.pools`): settings and warm instances now; the
    #: batching step reads those with a ``batch_wait``. ``offerings`` are already seen through
    #: them (:func:`~budgeteer.core.pools.pooled_offerings`: no boot where one is warm, capacity
    #: capped at the pool's ``max``)
    pools: tuple[PoolView, ...] = ()
