"""``plan_cycle``: the scheduling cycle as one short, numbered pipeline of pure steps.

1. ready     — dependencies (``ready.py``): waiting jobs park, impossible ones fail;
2. nominate  — each ready job's cost/time Pareto front (``candidates.py``); a job that can no
   longer meet its deadline is planned late against a fresh one, or expires
   (``on_deadline_miss: cancel``);
3. order     — tier, fair share on money, slack, age, sequence (``order.py``);
4. admit     — budgets per tier, cheaper plans before holds (``admit.py``);
5. place     — joint choice under capacity and budgets, MILP or greedy (``place.py``);
6. batch     — jobs placed on a pool wait to run back to back on its instances where that
   saves a boot and keeps their deadline (``batching.py``);
7. report    — admissions, holds with reasons and wake conditions, budget projections.

Nothing here reads a clock, touches I/O or mutates the snapshot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal

from budgeteer.core.admit import Admitted, BudgetTally, admit, apply_quotas, budget_tallies
from budgeteer.core.batching import batch
from budgeteer.core.candidates import Candidates, FrontCache, nominate
from budgeteer.core.order import order_queue
from budgeteer.core.outcomes import (
    Admission,
    BudgetProjection,
    Expiry,
    Hold,
    HoldReason,
    Placement,
    Plan,
    WakeOn,
)
from budgeteer.core.place import Choice, place
from budgeteer.core.policy import Policy
from budgeteer.core.ready import readiness
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.tier import Tier


def plan_cycle(
    snapshot: Snapshot, policy: Policy | None = None, cache: FrontCache | None = None
) -> Plan:
    """Plan one cycle: a pure, deterministic function of ``snapshot`` and ``policy``.
    ``cache`` (owned by the caller) keeps the memos of pure steps between calls; the plan is
    the same with or without it."""
    policy = policy or Policy()
    parked = snapshot.parked
    pending = [j for j in snapshot.jobs if j.state.is_pending and j.id not in parked]
    states = {j.id: j.state for j in snapshot.jobs}
    # 1. ready
    ready = readiness(pending, states)
    # 2. nominate
    candidates = nominate(snapshot, ready.ready, policy, cache)
    expired = tuple(
        Expiry(c.job.id, c.infeasible or "deadline passed")
        for c in candidates.values()
        if c.expired
    )
    plannable = [j for j in ready.ready if not candidates[j.id].expired]
    # 3. order
    ordered = order_queue(snapshot, plannable, candidates, policy)
    # 4. admit (money, then GPU quotas)
    tallies = budget_tallies(snapshot)
    enforced = tallies if policy.enforce_budgets else {}
    admission = admit(ordered.jobs, candidates, enforced)
    admission = apply_quotas(admission, snapshot, policy)
    # 5. place
    in_use: dict[str, int] = defaultdict(int)
    for alloc in snapshot.running:
        in_use[alloc.offering_id] += alloc.instances
    choices, solver = place(admission.admitted, snapshot.offerings, in_use, enforced, policy)
    admissions, capacity_holds = _admissions(
        snapshot, admission.admitted, choices, tallies, candidates
    )
    # 6. batch
    admissions, batched = batch(snapshot, admissions)
    # 7. report
    waiting = tuple(
        Hold(
            job.id,
            job.tier,
            HoldReason.DEPENDENCIES,
            "waiting for " + ", ".join(upstream),
            (WakeOn.DEPENDENCY_DONE,),
        )
        for job, upstream in ready.waiting
    )
    holds = (*waiting, *admission.holds, *capacity_holds, *batched)
    return Plan(
        now=snapshot.now,
        admissions=tuple(admissions),
        holds=holds,
        dependency_failures=ready.failed,
        budgets=_projections(tallies, admissions),
        solver=solver,
        order=tuple(j.id for j in ordered.jobs),
        expired=expired,
    )


def _admissions(
    snapshot: Snapshot,
    admitted: list[Admitted] | tuple[Admitted, ...],
    choices: list[Choice],
    tallies: dict[str, BudgetTally],
    candidates: Mapping[str, Candidates],
) -> tuple[list[Admission], list[Hold]]:
    admissions: list[Admission] = []
    holds: list[Hold] = []
    planned: dict[str, float] = defaultdict(float)
    for a, pos in zip(admitted, choices, strict=True):
        if pos is None:
            holds.append(
                Hold(
                    a.job.id,
                    a.job.tier,
                    HoldReason.CAPACITY,
                    "every placement that meets the deadline is at capacity",
                    (WakeOn.CAPACITY_FREED,),
                )
            )
            continue
        placement = _placement(snapshot, a, pos)
        for b in a.budget_ids:
            planned[b] += placement.expected_cost_usd
        uses_reserve = a.job.tier is Tier.P0 and any(
            tallies[b].base_usd + planned[b] > float(tallies[b].budget.limit_usd)
            for b in a.budget_ids
        )
        admissions.append(
            Admission(
                a.job.id,
                a.job.tier,
                placement,
                a.budget_ids,
                uses_reserve,
                candidates[a.job.id].late,
                candidates[a.job.id].due,
                candidates[a.job.id].reserve_hours,
                candidates[a.job.id].reserve_why,
            )
        )
    return admissions, holds


def _placement(snapshot: Snapshot, a: Admitted, pos: int) -> Placement:
    front = a.front
    cfg = int(front.config[pos])
    offering = snapshot.offerings[int(front.configs.offering[cfg])]
    instances = int(front.configs.instances[cfg])
    return Placement(
        offering_id=offering.id,
        provider=offering.provider,
        region=offering.region,
        instance_type=offering.instance_type,
        accelerator=offering.accelerator,
        accelerators_per_instance=offering.accelerators_per_instance,
        market=offering.market,
        instances=instances,
        workers=int(front.configs.workers[cfg]),
        variant=front.variant,
        usd_per_hour=offering.usd_per_hour * instances,
        price_source=offering.price.source,
        runtime_hours=float(front.runtime_hours[pos]),
        runtime_std_hours=float(front.runtime_std_hours[pos]),
        expected_cost_usd=float(front.cost_usd[pos]),
        cost_std_usd=float(front.cost_std_usd[pos]),
        egress_usd=float(front.egress_usd[pos]),
        finish=snapshot.now + timedelta(hours=float(front.finish_hours[pos])),
    )


def _projections(
    tallies: dict[str, BudgetTally], admissions: list[Admission]
) -> tuple[BudgetProjection, ...]:
    out = []
    for tally in tallies.values():
        planned = sum(
            a.placement.expected_cost_usd for a in admissions if tally.budget.id in a.budget_ids
        )
        committed = _usd(tally.committed_usd)
        planned_usd = _usd(planned)
        out.append(
            BudgetProjection(
                budget_id=tally.budget.id,
                period_start=tally.start,
                period_end=tally.end,
                limit_usd=tally.budget.limit_usd,
                emergency_reserve_usd=tally.budget.emergency_reserve_usd,
                accrued_usd=tally.accrued_usd,
                committed_usd=committed,
                planned_usd=planned_usd,
                projected_usd=tally.accrued_usd + committed + planned_usd,
                held_jobs=tally.held,
            )
        )
    return tuple(out)


def _usd(amount: float) -> Decimal:
    """An estimate rounded to the cent, for reporting next to exact accrued amounts."""
    return Decimal(repr(amount)).quantize(Decimal("0.01"))
