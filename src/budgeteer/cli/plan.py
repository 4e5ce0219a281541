"""``budgeteer plan``: plan a queue from files and print the plan and budget projections."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from budgeteer.catalog import load_catalog
from budgeteer.cli import app, fail
from budgeteer.core import Plan, Snapshot, plan_cycle
from budgeteer.errors import BudgeteerError, SpecError
from budgeteer.serialize import plan_to_dict
from budgeteer.spec import load_budgets_file, load_jobs_file


def _parse_at(at: str | None) -> datetime:
    if at is None:
        return datetime.now(UTC)  # the shell reads the clock; the core never does
    try:
        value = datetime.fromisoformat(at)
    except ValueError:
        raise SpecError(
            "--at", f"expected an ISO-8601 time like 2026-12-02T09:00:00Z, got {at!r}"
        ) from None
    if value.tzinfo is None:
        raise SpecError("--at", "must include a time zone (e.g. Z or +01:00)")
    if not AT_RANGE[0] <= value < AT_RANGE[1]:  # deadlines and periods must fit in a datetime
        raise SpecError(
            "--at", f"must be in the years {AT_RANGE[0].year}–{AT_RANGE[1].year - 1}, got {at!r}"
        )
    return value


#: The times a plan may be made at.
AT_RANGE = (datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))


def build_snapshot(
    jobs: Path, budgets: Path | None, catalog: Path | None, now: datetime
) -> Snapshot:
    """A snapshot from a jobs file, an optional budgets file and a catalog."""
    cat = load_catalog(catalog)
    job_list = load_jobs_file(jobs, now=now, known_accelerators=list(cat.throughput))
    budget_list, spend = load_budgets_file(budgets) if budgets else ([], [])
    return Snapshot(
        now=now,
        jobs=tuple(job_list),
        offerings=cat.offerings,
        throughput=tuple(cat.throughput.items()),
        egress=cat.egress,
        budgets=tuple(budget_list),
        spend=tuple(spend),
    )


@app.command("plan")
def plan_command(
    jobs: Annotated[Path, typer.Option("--jobs", help="Job specs (YAML or JSON).")],
    budgets: Annotated[Path | None, typer.Option("--budgets", help="Budgets file.")] = None,
    catalog: Annotated[
        Path | None, typer.Option("--catalog", help="Catalog folder or vms.csv.")
    ] = None,
    at: Annotated[str | None, typer.Option("--at", help="Plan as of this ISO time.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Plan a queue: placement, market, expected cost and finish per job, or why it is held."""
    try:
        snapshot = build_snapshot(jobs, budgets, catalog, _parse_at(at))
    except BudgeteerError as exc:
        fail(exc)
        return
    plan = plan_cycle(snapshot)
    if as_json:
        typer.echo(json.dumps(plan_to_dict(plan), indent=2))
    else:
        render_plan(plan, wide_console())


def wide_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is not a terminal."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


def render_plan(plan: Plan, console: Console) -> None:
    """Rich tables: admissions, holds, budget projections."""
    table = Table(title=f"Plan as of {plan.now.isoformat(timespec='minutes')}", show_lines=False)
    for col in ("job", "tier", "placement", "market", "variant", "cost $", "±", "finish"):
        table.add_column(col, justify="right" if col in {"cost $", "±"} else "left")
    for a in plan.admissions:
        p = a.placement
        table.add_row(
            a.job_id,
            a.tier.name + (" (reserve)" if a.uses_reserve else ""),
            f"{p.instances}×{p.instance_type} ({p.accelerators_per_instance}×{p.accelerator}) "
            f"{p.provider}/{p.region}",
            p.market.value,
            p.variant.value,
            f"{p.expected_cost_usd:,.2f}",
            f"{p.cost_std_usd:,.2f}",
            p.finish.strftime("%Y-%m-%d %H:%M %Z"),
        )
    console.print(table)
    if plan.holds or plan.dependency_failures:
        held = Table(title="Held")
        for col in ("job", "tier", "reason", "why", "wakes on"):
            held.add_column(col)
        for h in plan.holds:
            wake = ", ".join(w.value for w in h.wake_on)
            if h.wake_at:
                wake += f" (by {h.wake_at.strftime('%Y-%m-%d %H:%M %Z')})"
            held.add_row(h.job_id, h.tier.name, h.reason.value, h.message, wake)
        for f in plan.dependency_failures:
            held.add_row(f.job_id, "", "dependency_failed", f.message, "never")
        console.print(held)
    if plan.budgets:
        bt = Table(title="Budgets after this plan")
        for col in (
            "budget",
            "limit $",
            "accrued $",
            "committed $",
            "planned $",
            "projected $",
            "of limit",
            "held",
        ):
            bt.add_column(col, justify="left" if col == "budget" else "right")
        for b in plan.budgets:
            bt.add_row(
                b.budget_id,
                f"{b.limit_usd:,.2f}",
                f"{b.accrued_usd:,.2f}",
                f"{b.committed_usd:,.2f}",
                f"{b.planned_usd:,.2f}",
                f"{b.projected_usd:,.2f}",
                f"{b.projected_fraction:.1%}",
                str(b.held_jobs),
            )
        console.print(bt)
    s = plan.solver
    console.print(
        f"solver: {s.method}, {s.jobs} admitted jobs, {s.variables} MILP variables, "
        f"objective {s.objective:,.2f} (greedy {s.greedy_objective:,.2f})"
    )
