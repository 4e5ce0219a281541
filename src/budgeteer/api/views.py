"""What the API shows of a job and a budget, computed from the store (and, for ``explain`` and
budget status, from a pure plan of the current snapshot)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from budgeteer.api.context import ApiContext
from budgeteer.core.progress import eta, samples_of
from budgeteer.core.speed import SNAPSHOT_TOLERANCE
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.progress import parse_progress
from budgeteer.ledger.accounting import job_cost
from budgeteer.ledger.waste import wasted_jobs
from budgeteer.scheduler.spot_live import PREFIX as SPOT_DECIDER
from budgeteer.store import (
    Attempt,
    LedgerEntry,
    PoolCharge,
    ProgressReport,
    SignalRecord,
    SpotDecisionRecord,
)
from budgeteer.triggers.view import finite

PARKED = {JobState.HELD, JobState.WAITING}


def links(job_id: str) -> dict[str, str]:
    """Where to follow a job."""
    base = f"/v1/jobs/{job_id}"
    return {
        "self": base,
        "events": f"{base}/events",
        "explain": f"{base}/explain",
        "cancel": f"{base}/cancel",
    }


def _usd(amount: Decimal) -> str:
    return str(amount.quantize(Decimal("0.000001")))


def _progress(reports: Sequence[ProgressReport]) -> dict[str, Any] | None:
    for r in reversed(reports):
        fraction = parse_progress(r.record).fraction
        if fraction is not None:
            out = {k: v for k, v in r.record.items() if k not in {"at"}}
            out["fraction"] = fraction
            out["reported_at"] = r.at.isoformat()
            return out
    return None


def job_view(ctx: ApiContext, job: Job) -> dict[str, Any]:
    """Everything ``GET /v1/jobs/{id}`` shows."""
    store = ctx.store
    attempts = store.attempts(job.id)
    cost = job_cost(attempts, store.ledger(job.id), ctx.prices)
    reports = store.progress(job.id)
    current = attempts[-1] if attempts else None
    live = current if current is not None and current.ended_at is None else None
    finish = eta(samples_of(reports, live.started_at)) if live else None
    risk = False
    if finish is not None and job.deadline is not None:
        margin = (job.deadline - job.submitted_at) * ctx.policy.deadline_margin_fraction
        risk = finish > job.deadline - margin
    hold_reason = end_reason = None
    if job.state in PARKED or job.state.is_terminal:
        events = store.events(job.id)
        cause = events[-1].cause if events else None
        hold_reason, end_reason = (cause, None) if job.state in PARKED else (None, cause)
    return {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "project": job.project,
        "priority": job.tier.name,
        "state": job.state.value,
        "submitted_at": job.submitted_at.isoformat(),
        "deadline": job.deadline.isoformat() if job.deadline else None,
        "depends_on": [{"job": d.job, "on": d.on.value} for d in job.depends_on],
        "placement": _placement(ctx, current) if current else None,
        "market_history": [a.market for a in attempts],
        "attempts": len(attempts),
        "progress": _progress(reports),
        "eta": finish.isoformat() if finish else None,
        "deadline_risk": risk,
        "cost": {
            "accrued_usd": _usd(cost.accrued_usd),
            "committed_usd": _usd(cost.committed_usd),
            "on_demand_equivalent_usd": _usd(cost.on_demand_equivalent_usd),
            "savings_usd": _usd(cost.savings_usd),
            # a gate that stopped the run: what the run spent up to it (this job and its
            # upstream steps in the project)
            "waste_usd": _usd(_run_waste(ctx, job)) if job.state is JobState.GATE_FAILED else None,
        },
        "hold_reason": hold_reason,
        "end_reason": end_reason,  # why a terminal job ended (the cause of its last event)
        "links": links(job.id),
    }


def _run_waste(ctx: ApiContext, job: Job) -> Decimal:
    """What ``job``'s pipeline run spent up to its failed gate."""
    jobs = {j.id: j for j in ctx.store.jobs()}
    ids = wasted_jobs(jobs).get(job.id, {job.id})
    return sum((e.amount_usd for j in ids for e in ctx.store.ledger(j)), Decimal(0))


def _placement(ctx: ApiContext, attempt: Attempt) -> dict[str, Any]:
    offering = ctx.prices.offering(attempt.offering_id)
    out: dict[str, Any] = {
        "offering_id": attempt.offering_id,
        "market": attempt.market,
        "instances": attempt.instances,
        # the backend's instances (an attempt started on a pool's warm instance has its id)
        "instance_ids": list(attempt.instance_ids),
        "workers": attempt.workers,
        "backend": attempt.backend,
        "attempt": attempt.number,
        "started_at": attempt.started_at.isoformat(),
        "ended_at": attempt.ended_at.isoformat() if attempt.ended_at else None,
        "exit_reason": attempt.exit_reason,
    }
    if offering is not None:
        out |= {
            "provider": offering.provider,
            "region": offering.region,
            "instance_type": offering.instance_type,
            "accelerator": offering.accelerator,
            "accelerators_per_instance": offering.accelerators_per_instance,
        }
    return out


def signal_view(r: SignalRecord) -> dict[str, Any]:
    """One kept signal as the API shows it."""
    return {
        "id": r.id,
        "at": r.at.isoformat(),
        "model": r.model,
        "team": r.team,
        "kind": r.kind,
        "severity": r.severity,
        "action": r.action,
        "job_id": r.job_id,
        "reason": r.reason,
        "signals": [
            {"feature": f, "psi": finite(p), "ks": finite(k), "js": finite(j)}
            for f, p, k, j in r.statistics
        ],
    }


def explain(ctx: ApiContext, job: Job) -> dict[str, Any]:
    """Why this placement, or why held: the numbers of a pure plan of the current snapshot;
    ``spot_decision``: the spot decider's latest word on the job (or ``None``); ``speeds``:
    what the job's family (its name) has shown of its speed per accelerator, beside the
    catalog's (the planner uses the learned factor where it differs)."""
    return _explain(ctx, job) | {
        "spot_decision": _spot_decision(ctx, job.id),
        "speeds": _speeds(ctx, job),
        "triggered_by": [
            signal_view(r) for r in ctx.store.signals(limit=None) if r.job_id == job.id
        ],
    }


def _speeds(ctx: ApiContext, job: Job) -> list[dict[str, Any]]:
    """The family's learned speeds: catalog relative throughput, measured factor, runs."""
    return [
        {
            "accelerator": s.accelerator,
            "catalog_relative_throughput": ctx.catalog.throughput.get(s.accelerator),
            "measured_factor": round(s.factor, 4),
            "measured_relative_throughput": (
                None
                if s.accelerator not in ctx.catalog.throughput
                else round(ctx.catalog.throughput[s.accelerator] * s.factor, 4)
            ),
            "runs": s.runs,
            "planned_with": abs(s.factor - 1.0) > SNAPSHOT_TOLERANCE,
        }
        for s in ctx.store.speeds()
        if s.family == job.name
    ]


def _spot_decision(ctx: ApiContext, job_id: str) -> dict[str, Any] | None:
    """The spot decider's latest move on the job, with every number it read."""
    kept = ctx.store.spot_decisions(job_id, limit=1)
    return spot_decision_view(kept[0]) if kept else None


def spot_decision_view(r: SpotDecisionRecord) -> dict[str, Any]:
    """A kept spot decision as the API shows it."""
    s = r.situation
    return {
        "at": r.at.isoformat(),
        "action": r.action,
        "attempt_id": r.attempt_id,
        "spot_offering_id": r.offering_id,
        "held": s.mode.value,
        "decided": r.decided.value,
        "reason": f"{SPOT_DECIDER}: {r.decision.reason}",
        "safety_net": r.safety_net.removeprefix("; safety net: ") or None,
        "numbers": {
            "work_hours": s.work_hours,
            "deadline_hours": s.deadline_hours,
            "elapsed_hours": s.elapsed_hours,
            "done_hours": s.done_hours,
            "slack_hours": s.slack_hours,
            "changeover_hours": s.changeover_hours,
            "changeover_left_hours": s.changeover_left_hours,
            "spot_up": s.spot_up,
            "spot_age_hours": s.spot_age_hours,
            "spot_usd_per_hour": s.spot_usd_per_hour,
            "on_demand_usd_per_hour": s.on_demand_usd_per_hour,
            "tick_hours": s.tick_hours,
            "last_uptime_hours": s.last_uptime_hours,
        },
    }


def _explain(ctx: ApiContext, job: Job) -> dict[str, Any]:
    if not job.state.is_pending:
        attempts = ctx.store.attempts(job.id)
        return {
            "id": job.id,
            "state": job.state.value,
            "decision": "running" if job.state.is_active else "finished",
            "placement": _placement(ctx, attempts[-1]) if attempts else None,
            "events": [e.cause for e in ctx.store.events(job.id)][-5:],
        }
    plan = ctx.plan()
    admission = plan.admission(job.id)
    if admission is not None:
        p = admission.placement
        return {
            "id": job.id,
            "state": job.state.value,
            "decision": "admit",
            "placement": p.describe(),
            "numbers": {
                "offering_id": p.offering_id,
                "market": p.market.value,
                "instances": p.instances,
                "workers": p.workers,
                "variant": p.variant.value,
                "usd_per_hour": p.usd_per_hour,
                "price_source": p.price_source,
                "runtime_hours": round(p.runtime_hours, 4),
                "runtime_std_hours": round(p.runtime_std_hours, 4),
                "expected_cost_usd": round(p.expected_cost_usd, 4),
                "egress_usd": round(p.egress_usd, 4),
                "finish": p.finish.isoformat(),
            },
            "budgets": list(admission.budget_ids),
            "uses_reserve": admission.uses_reserve,
            "pipeline_reserve_hours": round(admission.reserve_hours, 4),
            "pipeline_reserve_why": admission.reserve_why,
        }
    hold = plan.hold(job.id)
    if hold is not None:
        return {
            "id": job.id,
            "state": job.state.value,
            "decision": "hold",
            "reason": hold.reason.value,
            "message": hold.message,
            "numbers": dict(hold.details),
            "wake_on": [w.value for w in hold.wake_on],
            "wake_at": hold.wake_at.isoformat() if hold.wake_at else None,
        }
    return {"id": job.id, "state": job.state.value, "decision": "none", "message": "not planned"}


def budget_status(ctx: ApiContext, budget_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Accrued, committed, forecast, remaining, thresholds, burn-down, held jobs of a budget."""
    snapshot = ctx.snapshot()
    plan = ctx.plan()
    budget = next(b for b in snapshot.budgets if b.id == budget_id)
    proj = next(p for p in plan.budgets if p.budget_id == budget_id)
    start, end = proj.period_start, proj.period_end
    teams = {j.id: j for j in ctx.store.jobs()}  # finished jobs' spend counts too
    covered: list[LedgerEntry | PoolCharge] = [
        e
        for e in ctx.store.ledger()
        if e.job_id in teams and budget.covers(teams[e.job_id]) and start <= e.end < end
    ]
    covered += [  # what pools booted with no job, charged to their teams
        c
        for c in ctx.store.pool_charges()
        if budget.scope.covers(c.team, None) and start <= c.end < end
    ]
    series = _burn_down(covered, start, min(snapshot.now, end))
    elapsed = max((snapshot.now - start).total_seconds(), 1.0)
    period = (end - start).total_seconds()
    run_rate = proj.accrued_usd / Decimal(str(elapsed))
    forecast = (
        proj.accrued_usd + proj.committed_usd + run_rate * Decimal(str(max(0.0, period - elapsed)))
    )
    held = [
        h.job_id
        for h in plan.holds
        if h.budget is not None
        and budget_id in h.budget.blocking
        and teams[h.job_id].state.is_pending
    ]
    return {
        "id": budget_id,
        "spec": spec,
        "period_start": start.isoformat(),
        "period_end": end.isoformat(),
        "limit_usd": _usd(proj.limit_usd),
        "emergency_reserve_usd": _usd(proj.emergency_reserve_usd),
        "accrued_usd": _usd(proj.accrued_usd),
        "committed_usd": _usd(proj.committed_usd),
        "planned_usd": _usd(proj.planned_usd),
        "projected_usd": _usd(proj.projected_usd),
        "forecast_usd": _usd(forecast),
        "remaining_usd": _usd(proj.limit_usd - proj.accrued_usd - proj.committed_usd),
        "thresholds": {t.name: str(v) for t, v in budget.thresholds},
        "burn_down": series,
        "held_jobs": held,
    }


def _burn_down(entries: Sequence[Any], start: datetime, now: datetime) -> list[dict[str, str]]:
    """Cumulative accrued spend at the end of each day of the period so far (and now)."""
    points: list[dict[str, str]] = []
    total = Decimal(0)
    ordered = sorted(entries, key=lambda e: e.end)
    i = 0
    day = start
    while day < now:
        day = min(day + timedelta(days=1), now)
        while i < len(ordered) and ordered[i].end <= day:
            total += ordered[i].amount_usd
            i += 1
        points.append({"at": day.isoformat(), "accrued_usd": _usd(total)})
    return points
