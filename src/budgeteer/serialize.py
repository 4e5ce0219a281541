"""Plain-data (JSON-ready) views of core results, shared by the CLI and, later, the API."""

from __future__ import annotations

from typing import Any

from budgeteer.core.outcomes import Admission, BudgetProjection, Hold, Plan


def _admission(a: Admission) -> dict[str, Any]:
    p = a.placement
    return {
        "job": a.job_id,
        "tier": a.tier.name,
        "offering": p.offering_id,
        "provider": p.provider,
        "region": p.region,
        "instance_type": p.instance_type,
        "accelerator": p.accelerator,
        "accelerators_per_instance": p.accelerators_per_instance,
        "market": p.market.value,
        "instances": p.instances,
        "workers": p.workers,
        "variant": p.variant.value,
        "usd_per_hour": round(p.usd_per_hour, 6),
        "price_source": p.price_source,
        "runtime_hours": round(p.runtime_hours, 4),
        "runtime_std_hours": round(p.runtime_std_hours, 4),
        "expected_cost_usd": round(p.expected_cost_usd, 2),
        "cost_std_usd": round(p.cost_std_usd, 2),
        "egress_usd": round(p.egress_usd, 2),
        "expected_finish": p.finish.isoformat(timespec="seconds"),
        "budgets": list(a.budget_ids),
        "uses_reserve": a.uses_reserve,
        "pipeline_reserve_hours": round(a.reserve_hours, 4),
        "pipeline_reserve_why": a.reserve_why,
    }


def _hold(h: Hold) -> dict[str, Any]:
    return {
        "job": h.job_id,
        "tier": h.tier.name,
        "reason": h.reason.value,
        "message": h.message,
        "wake_on": [w.value for w in h.wake_on],
        "wake_at": h.wake_at.isoformat(timespec="seconds") if h.wake_at else None,
        "details": dict(h.details),
    }


def _budget(b: BudgetProjection) -> dict[str, Any]:
    return {
        "budget": b.budget_id,
        "period_start": b.period_start.isoformat(),
        "period_end": b.period_end.isoformat(),
        "limit_usd": str(b.limit_usd),
        "emergency_reserve_usd": str(b.emergency_reserve_usd),
        "accrued_usd": str(b.accrued_usd),
        "committed_usd": str(b.committed_usd),
        "planned_usd": str(b.planned_usd),
        "projected_usd": str(b.projected_usd),
        "projected_fraction": round(b.projected_fraction, 4),
        "held_jobs": b.held_jobs,
    }


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The whole plan as JSON-ready data (money as strings where it is exact)."""
    return {
        "now": plan.now.isoformat(),
        "admissions": [_admission(a) for a in plan.admissions],
        "holds": [_hold(h) for h in plan.holds],
        "dependency_failures": [
            {"job": f.job_id, "upstream": f.upstream_id, "message": f.message}
            for f in plan.dependency_failures
        ],
        "budgets": [_budget(b) for b in plan.budgets],
        "solver": {
            "method": plan.solver.method,
            "jobs": plan.solver.jobs,
            "variables": plan.solver.variables,
            "objective": round(plan.solver.objective, 2),
            "greedy_objective": round(plan.solver.greedy_objective, 2),
            "optimal": plan.solver.optimal,
        },
        "order": list(plan.order),
    }
