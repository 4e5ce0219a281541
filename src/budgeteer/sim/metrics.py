"""What a simulated run measured: the comparison ``budgeteer simulate`` prints, and the time
series its report plots. Everything is computed from the run's store (jobs, events, attempts,
ledger) after the fact, so the numbers are the ledger's, not a model's.

- ``cost_usd`` — the ledger's total and the pools' charges to teams;
  ``on_demand_equivalent_usd`` — the jobs' instance-hours at on-demand prices
  (:mod:`budgeteer.ledger.accounting`);
- ``budget_overrun_usd`` — Σ over budgets and their periods of accrued above the limit;
- ``sla_met_fraction`` per tier — among jobs whose deadline fell inside the horizon, the share
  that succeeded by it (``None`` when a tier had none);
- ``jobs_completed``, ``jobs_held_at_end``, ``preemptions``;
- ``changeovers`` — attempts ended to change market: ``to_spot`` and ``bridge_on_demand`` (the
  live spot decider), ``to_on_demand`` (switch rules, the late check);
- ``on_demand_hours`` — instance-hours billed on on-demand (from the ledger);
- ``waste_usd`` — the spend of pipeline runs whose validation gate failed (features, train,
  validate), plus the spend of attempts whose work was lost (failed runs);
- ``startups`` — attempts that booted instances (not those started on a pool's warm ones);
  ``startup_hours`` — the instance-hours of boot the ledger billed (billing starts at launch:
  Σ instances × min(the offering's start-up, the attempt's length)); ``idle_hours`` — instance-
  hours billed with no job on them (a pool's warm instances between jobs, and those it booted
  for its floor from their boot; ``idle_usd`` their cost, part of ``cost_usd``);
  ``warm_starts`` — attempts started on warm instances; ``pool_boots`` — instances pools booted
  with no job (their start-ups are in ``idle_hours``, not ``startup_hours``).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from budgeteer.domain.budget import Budget
from budgeteer.domain.job import JobState
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.domain.tier import Tier
from budgeteer.ledger.accounting import OnDemandPrices, job_cost
from budgeteer.ledger.billing import is_idle
from budgeteer.sim.run import SimRun
from budgeteer.sim.scenario import Built
from budgeteer.store.records import PoolCharge

ZERO = Decimal(0)


def summary(run: SimRun, built: Built) -> dict[str, Any]:
    """The per-policy numbers (see the module docstring)."""
    store = run.store
    jobs = {j.id: j for j in store.jobs()}
    attempts = store.attempts()
    ledger = store.ledger()
    prices = OnDemandPrices(built.catalog)
    markets = {a.id: a.market for a in attempts}
    by_job_att: dict[str, list[Any]] = defaultdict(list)
    for a in attempts:
        by_job_att[a.job_id].append(a)
    by_job_led: dict[str, list[Any]] = defaultdict(list)
    for e in ledger:
        if not is_idle(e):  # a job's own time (its pool's idle after it counts in the cost)
            by_job_led[e.job_id].append(e)
    # the ledger: the attempts' time and the pools' idle instances (billed while they idle),
    # and what pools booted with no job (charged to their teams)
    charges = store.pool_charges()
    cost = sum((e.amount_usd for e in ledger), ZERO) + sum((c.amount_usd for c in charges), ZERO)
    equivalent = sum(
        (
            job_cost(by_job_att[j], es, prices).on_demand_equivalent_usd
            for j, es in by_job_led.items()
        ),
        ZERO,
    )
    spent = {j: sum((e.amount_usd for e in es), ZERO) for j, es in by_job_led.items()}
    waste = ZERO
    for gate, run_ids in built.pipeline_runs.items():
        if gate in jobs and jobs[gate].state is JobState.FAILED:
            waste += sum((spent.get(j, ZERO) for j in run_ids), ZERO)
    return {
        "cost_usd": float(cost),
        "on_demand_equivalent_usd": float(equivalent),
        "savings_vs_on_demand_fraction": float(1 - cost / equivalent) if equivalent else 0.0,
        "budget_overrun_usd": float(_overrun(built.budgets, _spend(jobs, ledger, charges))),
        "sla_met_fraction": _sla(run, built.end),
        "jobs_submitted": len(jobs),
        "jobs_completed": sum(j.state is JobState.SUCCEEDED for j in jobs.values()),
        "jobs_held_at_end": sum(j.state is JobState.HELD for j in jobs.values()),
        "preemptions": sum(a.outcome is AttemptOutcome.PREEMPTED for a in attempts),
        "changeovers": {
            o.value: sum(a.outcome is o for a in attempts)
            for o in (
                AttemptOutcome.TO_SPOT,
                AttemptOutcome.BRIDGE_ON_DEMAND,
                AttemptOutcome.TO_ON_DEMAND,
            )
        },
        "on_demand_hours": round(
            float(
                sum(
                    (
                        e.amount_usd / e.usd_per_hour
                        for e in ledger
                        if e.usd_per_hour
                        and markets.get(e.attempt_id) == "on_demand"
                        and not is_idle(e)  # idle hours are counted apart
                    ),
                    ZERO,
                )
            ),
            3,
        ),
        "waste_usd": float(waste),
        **_startups(attempts, built, run),
        "cycles": run.cycles,
    }


def _startups(attempts: list[Any], built: Built, run: SimRun | None = None) -> dict[str, Any]:
    """``startups``, ``startup_hours``, ``warm_starts``, ``idle_hours`` and ``idle_usd`` (see
    the module docstring)."""
    boot = {o.id: o.startup_seconds for o in built.catalog.offerings}
    warm = run.backend.warm_starts if run is not None else set()
    idle = run.backend.idle if run is not None else []
    ledger = run.store.ledger() if run is not None else []
    charges = run.store.pool_charges() if run is not None else []
    startups, seconds = 0, 0.0
    for a in attempts:
        if f"{a.job_id}.{a.number}" in warm:
            continue  # started on a pool's warm instances: no boot
        ran = max(((a.ended_at or built.end) - a.started_at).total_seconds(), 0.0)
        paid = min(boot.get(a.offering_id, 0.0), ran)
        if paid > 0:
            startups += 1
            seconds += a.instances * paid
    return {
        "startups": startups,
        "startup_hours": round(seconds / 3600, 3),
        "warm_starts": len(warm),
        "idle_hours": round(sum(i.hours for i in idle), 3),
        "idle_usd": float(
            sum((e.amount_usd for e in ledger if is_idle(e)), ZERO)
            + sum((c.amount_usd for c in charges), ZERO)
        ),
        "pool_boots": len(run.backend.boots) if run is not None else 0,
    }


def _spend(
    jobs: dict[str, Any], ledger: list[Any], charges: list[PoolCharge]
) -> list[tuple[str, str | None, Decimal, datetime]]:
    """Every dollar as ``(team, project, amount, at)``: the jobs' entries and the pools'
    charges (their team's, no project), in time order."""
    out = [
        (jobs[e.job_id].team, jobs[e.job_id].project, e.amount_usd, e.end)
        for e in ledger
        if e.job_id in jobs
    ]
    out += [(c.team, None, c.amount_usd, c.end) for c in charges]
    return sorted(out, key=lambda x: x[3])


def _overrun(
    budgets: tuple[Budget, ...], spend: list[tuple[str, str | None, Decimal, datetime]]
) -> Decimal:
    total = ZERO
    for b in budgets:
        per_period: dict[datetime, Decimal] = defaultdict(Decimal)
        for team, project, amount, at in spend:
            if b.scope.covers(team, project):
                per_period[b.period.window(at)[0]] += amount
        total += sum((max(ZERO, v - b.limit_usd) for v in per_period.values()), ZERO)
    return total


def _sla(run: SimRun, end: datetime) -> dict[str, float | None]:
    met: dict[Tier, int] = defaultdict(int)
    due: dict[Tier, int] = defaultdict(int)
    for job in run.store.jobs():
        if job.deadline is None or job.deadline > end:
            continue
        due[job.tier] += 1
        if job.state is JobState.SUCCEEDED:
            finished = run.store.events(job.id)[-1].at
            met[job.tier] += finished <= job.deadline
    return {t.name: (met[t] / due[t] if due[t] else None) for t in Tier}


def series(run: SimRun, built: Built, step: timedelta = timedelta(hours=6)) -> dict[str, Any]:
    """Time series for the report: per team spend in its budget's current period, queue depth
    by tier, running instances by market — sampled every ``step``."""
    store = run.store
    jobs = {j.id: j for j in store.jobs()}
    times: list[datetime] = []
    t = built.start
    while t <= built.end:
        times.append(t)
        t += step
    spend: dict[str, list[float]] = {}
    dollars = _spend(jobs, store.ledger(), store.pool_charges())
    teams = sorted({j.team for j in jobs.values()} | {d[0] for d in dollars})
    team_budget = {b.scope.name: b for b in built.budgets if b.scope.kind.value == "team"}
    for team in teams:
        # spend in the current period of the team's budget (reset at each period start), so
        # it reads against the limit; cumulative over the horizon when the team has none
        budget = team_budget.get(team)
        total, i, points, window = 0.0, 0, [], None
        mine = [(amount, end) for who, _, amount, end in dollars if who == team]
        for at in times:
            if budget is not None and budget.period.window(at) != window:
                window = budget.period.window(at)
                total = 0.0
                while i < len(mine) and mine[i][1] < window[0]:
                    i += 1
            while i < len(mine) and mine[i][1] <= at:
                total += float(mine[i][0])
                i += 1
            points.append(total)
        spend[team] = points
    pending = {
        JobState.SUBMITTED,
        JobState.WAITING,
        JobState.QUEUED,
        JobState.HELD,
        JobState.PREEMPTED,
    }
    queue = {t.name: [0] * len(times) for t in Tier}
    for job in jobs.values():
        events = store.events(job.id)
        for k, e in enumerate(events):
            if e.to_state not in pending:
                continue
            until = events[k + 1].at if k + 1 < len(events) else built.end
            for n, at in enumerate(times):
                if e.at <= at < until:
                    queue[job.tier.name][n] += 1
    market = {"spot": [0] * len(times), "on_prem": [0] * len(times), "on_demand": [0] * len(times)}
    for a in store.attempts():
        end = a.ended_at or built.end
        key = a.market if a.market in ("spot", "on_prem") else "on_demand"
        for n, at in enumerate(times):
            if a.started_at <= at < end:
                market[key][n] += a.instances
    limits = {b.id: float(b.limit_usd) for b in built.budgets if b.scope.kind.value == "team"}
    return {
        "times": [t.isoformat() for t in times],
        "spend_by_team": spend,
        "queue_by_tier": queue,
        "instances_by_market": market,
        "team_limits": {
            b.scope.name: float(b.limit_usd) for b in built.budgets if b.scope.kind.value == "team"
        },
        "budget_limits": limits,
    }
