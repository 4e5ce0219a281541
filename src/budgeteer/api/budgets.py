"""``/v1/budgets``: admins create and change budgets; teams read their own and their status."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from budgeteer.api.auth import Principal
from budgeteer.api.deps import Admin, Ctx, Person
from budgeteer.api.problems import Problem
from budgeteer.api.views import budget_status
from budgeteer.spec.budget import BudgetSpec

router = APIRouter(prefix="/v1/budgets", tags=["budgets"])


def _sees(who: Principal, spec: dict[str, Any]) -> bool:
    """Admins see every budget; a team token its teams' budgets."""
    team = spec.get("scope", {}).get("team")
    return who.admin or (team is not None and team in who.teams)


def _find(ctx: Ctx, who: Principal, budget_id: str) -> dict[str, Any]:
    spec = next((s for s in ctx.store.budget_specs() if s.get("id") == budget_id), None)
    if spec is None or not _sees(who, spec):
        raise Problem(404, f"no budget {budget_id!r}")
    return spec


@router.post("", status_code=201)
def create_budget(spec: Annotated[BudgetSpec, Body()], ctx: Ctx, who: Admin) -> dict[str, Any]:
    """Create a budget (admin); 409 if the id exists."""
    doc = spec.model_dump(mode="json")
    ctx.store.put_budget(doc, create=True)
    return doc


@router.get("")
def list_budgets(ctx: Ctx, who: Person) -> dict[str, Any]:
    """The budgets the caller may see."""
    return {"budgets": [s for s in ctx.store.budget_specs() if _sees(who, s)]}


@router.get("/{budget_id}")
def get_budget(budget_id: str, ctx: Ctx, who: Person) -> dict[str, Any]:
    """One budget's spec."""
    return _find(ctx, who, budget_id)


@router.patch("/{budget_id}")
def patch_budget(
    budget_id: str,
    changes: Annotated[dict[str, Any], Body(max_length=32)],
    ctx: Ctx,
    who: Admin,
) -> dict[str, Any]:
    """Change fields of a budget (admin), e.g. ``{"limit_usd": 8000}``; the result is validated
    whole, and the id cannot change."""
    current = _find(ctx, who, budget_id)
    if "id" in changes and changes["id"] != budget_id:
        raise Problem(
            422, "id: cannot be changed", [{"field": "id", "problem": "cannot be changed"}]
        )
    merged = {**current, **changes}
    doc = BudgetSpec.parse(merged).model_dump(mode="json")
    ctx.store.put_budget(doc, create=False)
    return doc


@router.get("/{budget_id}/status")
def get_budget_status(budget_id: str, ctx: Ctx, who: Person) -> dict[str, Any]:
    """Accrued, committed, forecast and remaining money, tier thresholds, the burn-down series
    and the jobs this budget holds."""
    spec = _find(ctx, who, budget_id)
    return budget_status(ctx, budget_id, spec)
