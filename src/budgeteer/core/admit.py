"""Step 4 — admit: money. A job is admitted only if, for every budget covering it, accrued +
committed + already-admitted + its own expected cost stays within what its tier may use.

Jobs are considered in queue order; a job that does not fit does not block later, smaller jobs
(backfill). Before holding a job, cheaper plans are tried: its front already starts with the
cheapest placement that meets the deadline (spot, cheaper GPUs, fewer workers), and if that does
not fit either, the incremental variant when the job offers one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType

from budgeteer.core.candidates import Candidates, Front
from budgeteer.core.outcomes import BudgetBlock, Hold, HoldReason, WakeOn
from budgeteer.core.policy import Policy
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.budget import Budget
from budgeteer.domain.job import Job
from budgeteer.domain.tier import Tier


@dataclass(slots=True)
class BudgetTally:
    """A budget's running totals during one admission pass (local to the pass)."""

    budget: Budget
    start: datetime
    end: datetime
    accrued_usd: Decimal
    committed_usd: float
    planned_usd: float = 0.0
    held: int = 0
    tiers: set[Tier] = field(default_factory=set)
    allowance: Mapping[Tier, float] = field(default_factory=dict)
    base_usd: float = 0.0  # accrued plus committed: spend the plan cannot change
    _texts: dict[Tier, tuple[str, str]] = field(default_factory=dict)  # see may_bring

    def __post_init__(self) -> None:
        self.allowance = _allowances(self.budget)
        self.base_usd = float(self.accrued_usd) + self.committed_usd

    def may_bring(self, tier: Tier) -> tuple[str, str]:
        """What a budget hold says of ``tier`` ("P3 may bring budget B to $A (S% of $L)") and
        the allowance as text, from the exact decimals (made once, on the first hold)."""
        text = self._texts.get(tier)
        if text is None:
            b = self.budget
            a = b.allowance_usd(tier)
            text = self._texts[tier] = (
                f"{tier.name} may bring budget {b.id} to ${a:,.2f} "
                f"({b.threshold(tier):.0%} of ${b.limit_usd:,.2f})",
                f"{a:.2f}",
            )
        return text

    def room_usd(self, tier: Tier) -> float:
        """What admissions of ``tier`` may still add."""
        return self.allowance[tier] - self.base_usd - self.planned_usd


def budget_tallies(snapshot: Snapshot) -> dict[str, BudgetTally]:
    """Each budget's current period, accrued spend and committed cost, before planning."""
    running: list[tuple[str, str | None, float]] = []  # (team, project, committed)
    if snapshot.running:
        jobs = {j.id: j for j in snapshot.jobs}
        for a in snapshot.running:
            j = jobs.get(a.job_id)
            if j is not None:
                running.append((j.team, j.project, a.committed_usd))
    # spend per (team, project) in each distinct period window, summed once for all budgets
    # sharing the window (Decimal sums: regrouped, they agree to Decimal's 28 digits)
    by_window: dict[tuple[datetime, datetime], dict[tuple[str, str | None], Decimal]] = {}
    tallies: dict[str, BudgetTally] = {}
    for budget in snapshot.budgets:
        start, end = budget.period.window(snapshot.now)
        spend = by_window.get((start, end))
        if spend is None:
            spend = by_window[(start, end)] = {}
            for r in snapshot.spend:
                if start <= r.at < end:
                    key = (r.team, r.project)
                    spend[key] = spend.get(key, Decimal(0)) + r.amount_usd
        covers = budget.scope.covers
        accrued = sum(
            (a for (team, project), a in spend.items() if covers(team, project)), Decimal(0)
        )
        committed = sum(c for team, project, c in running if covers(team, project))
        tallies[budget.id] = BudgetTally(budget, start, end, accrued, committed)
    return tallies


@functools.lru_cache(maxsize=4096)
def _allowances(budget: Budget) -> Mapping[Tier, float]:
    """What each tier may bring ``budget`` up to, as floats for the admission arithmetic (a
    budget is immutable, so this is worked out once per budget, not per cycle)."""
    return MappingProxyType({t: float(budget.allowance_usd(t)) for t in Tier})


@dataclass(frozen=True, slots=True)
class Admitted:
    """A job admitted with the variant (front) it will run and the cost it reserved."""

    job: Job
    front: Front
    reserved_usd: float
    budget_ids: tuple[str, ...]
    late: bool = False  # planned late (its deadline can no longer be met)


@dataclass(frozen=True, slots=True)
class AdmissionPass:
    """The outcome of the admission pass."""

    admitted: tuple[Admitted, ...]
    holds: tuple[Hold, ...]


def admit(
    ordered: Sequence[Job],
    candidates: Mapping[str, Candidates],
    tallies: Mapping[str, BudgetTally],
) -> AdmissionPass:
    """Walk the queue in order and admit what the budgets allow (``tallies`` are updated)."""
    admitted: list[Admitted] = []
    holds: list[Hold] = []
    covering_of: dict[tuple[str, str | None], list[BudgetTally]] = {}
    for job in ordered:
        cands = candidates[job.id]
        if cands.infeasible is not None:
            holds.append(
                Hold(
                    job.id,
                    job.tier,
                    HoldReason.INFEASIBLE,
                    cands.infeasible,
                    (WakeOn.OFFERINGS_CHANGED, WakeOn.PRICE_DROP),
                    None,
                    cands.details,
                )
            )
            continue
        key = (job.team, job.project)
        if key not in covering_of:
            covering_of[key] = [t for t in tallies.values() if t.budget.covers(job)]
        covering = covering_of[key]
        tier = job.tier
        rooms = [t.room_usd(tier) + 1e-9 for t in covering]
        options = [f for f in (cands.full, cands.incremental) if f is not None and f.size]
        chosen = next(
            (f for f in options if all(float(f.cost_usd[0]) <= r for r in rooms)),
            None,
        )
        if chosen is None:
            hold, blocking = _budget_hold(job, options, covering, rooms)
            holds.append(hold)
            for t in blocking:
                t.held += 1
            continue
        cost = float(chosen.cost_usd[0])
        for t in covering:
            t.planned_usd += cost
            t.tiers.add(tier)
        budget_ids = tuple(t.budget.id for t in covering)
        admitted.append(Admitted(job, chosen, cost, budget_ids, cands.late is not None))
    return AdmissionPass(tuple(admitted), tuple(holds))


def apply_quotas(passed: AdmissionPass, snapshot: Snapshot, policy: Policy) -> AdmissionPass:
    """GPU quotas per team (Kueue-like, no money): an admitted job whose cheapest placement
    would take its team past its quota of GPUs held at once waits (``quota``)."""
    if not policy.team_gpu_quotas and policy.default_team_gpu_quota is None:
        return passed
    gpus_of = {o.id: o.accelerators_per_instance for o in snapshot.offerings}
    team_of = {j.id: j.team for j in snapshot.jobs}
    held: dict[str, int] = {}
    for alloc in snapshot.running:
        team = team_of.get(alloc.job_id, "")
        held[team] = held.get(team, 0) + alloc.instances * gpus_of.get(alloc.offering_id, 0)
    admitted: list[Admitted] = []
    holds = list(passed.holds)
    for a in passed.admitted:
        front = a.front
        cfg = int(front.config[0])
        gpus = int(front.configs.instances[cfg]) * int(
            front.configs.table.gpus[int(front.configs.offering[cfg])]
        )
        quota = policy.gpu_quota(a.job.team)
        have = held.get(a.job.team, 0)
        if quota is not None and have + gpus > quota:
            holds.append(
                Hold(
                    a.job.id,
                    a.job.tier,
                    HoldReason.QUOTA,
                    f"team {a.job.team} holds {have} of its {quota} GPUs; this job needs {gpus}",
                    (WakeOn.CAPACITY_FREED,),
                    None,
                    (("team", a.job.team), ("quota_gpus", str(quota)), ("held_gpus", str(have))),
                )
            )
            continue
        held[a.job.team] = have + gpus
        admitted.append(a)
    return AdmissionPass(tuple(admitted), tuple(holds))


def _budget_hold(
    job: Job, options: Sequence[Front], covering: Sequence[BudgetTally], rooms: Sequence[float]
) -> tuple[Hold, list[BudgetTally]]:
    """The hold of a job no budget room fits (``rooms``: each covering budget's room for its
    tier, with the tolerance), and the budgets that block it."""
    cheapest = min(options, key=lambda f: float(f.cost_usd[0]))
    cost = float(cheapest.cost_usd[0])
    blocking = [t for t, room in zip(covering, rooms, strict=True) if cost > room]
    tier = job.tier
    tight = min(blocking, key=lambda t: t.room_usd(tier) - cost)
    may_bring, allowance = tight.may_bring(tier)
    projected = tight.base_usd + tight.planned_usd
    message = (
        f"{may_bring}; projected ${projected:,.2f} + "
        f"cheapest plan ${cost:,.2f} ({cheapest.variant.value}) = ${projected + cost:,.2f}"
    )
    hold = Hold(
        job.id,
        tier,
        HoldReason.BUDGET,
        message,
        (WakeOn.BUDGET_PERIOD_RESET, WakeOn.PRICE_DROP, WakeOn.BUDGET_CHANGED),
        min(t.end for t in blocking),
        (
            ("budget_id", tight.budget.id),
            *(("blocking_budget", t.budget.id) for t in blocking),
            ("allowance_usd", allowance),
            ("projected_usd", f"{projected:.2f}"),
            ("cheapest_plan_usd", f"{cost:.2f}"),
            ("cheapest_variant", cheapest.variant.value),
        ),
        BudgetBlock(
            tuple(t.budget.id for t in blocking),
            Decimal(repr(cost)),
            Decimal(repr(tight.allowance[tier])) - Decimal(repr(projected)),
        ),
    )
    return hold, blocking
