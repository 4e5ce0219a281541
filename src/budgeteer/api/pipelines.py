"""``GET /v1/pipelines/{project}``: a pipeline's budget view — each step's state, gate and cost,
the run's total, and its waste (what it spent up to a validation gate that stopped it)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from fastapi import APIRouter

from budgeteer.api.deps import Ctx, Person
from budgeteer.api.problems import Problem
from budgeteer.domain.job import JobState
from budgeteer.ledger.waste import spend_by_job, waste_usd

router = APIRouter(prefix="/v1", tags=["pipelines"])


@router.get("/pipelines/{project}")
def pipeline_budget(project: str, ctx: Ctx, who: Person) -> dict[str, Any]:
    """A pipeline's budget view: each step's state and cost, the run's total, and its waste
    (what the run spent up to a validation gate that stopped it)."""
    jobs = [j for j in ctx.store.jobs() if j.project == project and who.sees_team(j.team)]
    if not jobs:
        raise Problem(404, f"no pipeline {project!r}")
    spent = spend_by_job((e.job_id, e.amount_usd) for j in jobs for e in ctx.store.ledger(j.id))
    everyone = {j.id: j for j in jobs}
    return {
        "project": project,
        "steps": [
            {
                "id": j.id,
                "name": j.name,
                "state": j.state.value,
                "gate": None if j.gate is None else j.gate.describe(),
                "promote": j.promote,
                "cost_usd": str(spent.get(j.id, Decimal(0))),
            }
            for j in jobs
        ],
        "cost_usd": str(sum(spent.values(), Decimal(0))),
        "waste_usd": str(waste_usd(everyone, spent)),
        # a promotion step ran after every gate passed
        "promoted": any(j.promote and j.state is JobState.SUCCEEDED for j in jobs),
    }
