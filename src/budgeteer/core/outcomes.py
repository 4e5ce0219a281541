"""What a planning cycle returns: admissions with placements, holds with reasons, projections."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier


class Variant(StrEnum):
    """Which version of the work a placement runs."""

    FULL = "full"
    INCREMENTAL = "incremental"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where and how a job runs, with the expected runtime, cost and finish under this plan."""

    offering_id: str
    provider: str
    region: str
    instance_type: str
    accelerator: str
    accelerators_per_instance: int
    market: Market
    instances: int
    workers: int
    variant: Variant
    usd_per_hour: float
    price_source: str
    runtime_hours: float
    runtime_std_hours: float
    expected_cost_usd: float
    cost_std_usd: float
    egress_usd: float
    finish: datetime

    def describe(self) -> str:
        """Short human text: ``2×p4d.24xlarge (8×A100) spot aws/us-east-1``."""
        gpus = f"{self.accelerators_per_instance}×{self.accelerator}"
        return (
            f"{self.instances}×{self.instance_type} ({gpus}) {self.market.value} "
            f"{self.provider}/{self.region}"
        )


@dataclass(frozen=True, slots=True)
class Admission:
    """A job admitted and placed this cycle; ``uses_reserve`` flags a P0 in the reserve."""

    job_id: str
    tier: Tier
    placement: Placement
    budget_ids: tuple[str, ...]
    uses_reserve: bool = False
    late: str | None = None  # planned late (its deadline can no longer be met): why, until when
    due: datetime | None = None  # the fresh deadline a late job is planned for
    reserve_hours: float = 0.0  # planned to finish this long before its deadline (dependents)
    reserve_why: str | None = None  # the reserve priced: why it was waived or lengthened


class HoldReason(StrEnum):
    """Why a job does not start this cycle."""

    DEPENDENCIES = "dependencies"
    BUDGET = "budget"
    CAPACITY = "capacity"
    INFEASIBLE = "infeasible"
    QUOTA = "quota"
    INVALID = "invalid"  # planning this job raised: quarantined, the others planned without it
    BATCHED = "batched"  # waits to run back to back on a pool's instance (core.batching)


class WakeOn(StrEnum):
    """Events after which a parked job is worth planning again."""

    DEPENDENCY_DONE = "dependency_done"
    BUDGET_PERIOD_RESET = "budget_period_reset"
    BUDGET_CHANGED = "budget_changed"
    PRICE_DROP = "price_drop"
    CAPACITY_FREED = "capacity_freed"
    OFFERINGS_CHANGED = "offerings_changed"


@dataclass(frozen=True, slots=True)
class BudgetBlock:
    """The exact figures of a budget hold, for the scheduler's wake rules: the budgets that
    block the job, its cheapest plan, and the room the tightest of them leaves its tier (the
    plan's float estimates, carried as ``Decimal`` of their exact binary values)."""

    blocking: tuple[str, ...]
    cheapest_usd: Decimal
    room_usd: Decimal


@dataclass(frozen=True, slots=True)
class Hold:
    """A job parked with a reason, the numbers behind it, and what would wake it.

    ``wake_at`` is the earliest time a wake condition fires by itself (a budget period reset),
    if any. ``details`` carries the figures the message was built from (for ``explain``).
    """

    job_id: str
    tier: Tier
    reason: HoldReason
    message: str
    wake_on: tuple[WakeOn, ...]
    wake_at: datetime | None = None
    details: tuple[tuple[str, str], ...] = ()
    budget: BudgetBlock | None = None  # set on budget holds


@dataclass(frozen=True, slots=True)
class Expiry:
    """A job whose deadline passed before it could run, and which asked to be cancelled then
    (``on_deadline_miss: cancel``)."""

    job_id: str
    message: str


@dataclass(frozen=True, slots=True)
class DependencyFailure:
    """A job that can never run because an upstream ended the wrong way."""

    job_id: str
    upstream_id: str
    message: str


@dataclass(frozen=True, slots=True)
class BudgetProjection:
    """A budget's money after the plan: accrued (exact), committed, planned, projected.

    ``committed_usd`` is what running jobs are still expected to cost; ``planned_usd`` what the
    plan's admissions are expected to cost; ``projected_usd`` = accrued + committed + planned.
    """

    budget_id: str
    period_start: datetime
    period_end: datetime
    limit_usd: Decimal
    emergency_reserve_usd: Decimal
    accrued_usd: Decimal
    committed_usd: Decimal
    planned_usd: Decimal
    projected_usd: Decimal
    held_jobs: int

    @property
    def projected_fraction(self) -> float:
        """Projected spend as a fraction of the limit."""
        return float(self.projected_usd / self.limit_usd)


@dataclass(frozen=True, slots=True)
class SolverReport:
    """How the joint placement was solved: method, size, objective and the greedy comparison."""

    method: str
    jobs: int
    variables: int
    objective: float
    greedy_objective: float
    optimal: bool


@dataclass(frozen=True, slots=True)
class Plan:
    """The result of one cycle: pure data, applied by the supervisor."""

    now: datetime
    admissions: tuple[Admission, ...]
    holds: tuple[Hold, ...]
    dependency_failures: tuple[DependencyFailure, ...]
    budgets: tuple[BudgetProjection, ...]
    solver: SolverReport
    order: tuple[str, ...] = field(default=())
    expired: tuple[Expiry, ...] = field(default=())

    def admission(self, job_id: str) -> Admission | None:
        """The admission of ``job_id`` in this plan, if any."""
        return next((a for a in self.admissions if a.job_id == job_id), None)

    def hold(self, job_id: str) -> Hold | None:
        """The hold of ``job_id`` in this plan, if any."""
        return next((h for h in self.holds if h.job_id == job_id), None)
