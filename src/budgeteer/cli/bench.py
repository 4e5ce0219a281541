"""``budgeteer bench cycle``: time ``plan_cycle`` on a generated queue."""

from __future__ import annotations

import json
import statistics
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from budgeteer.bench.cycle import generate_snapshot
from budgeteer.cli import bench_app
from budgeteer.core import Policy, SolverChoice, plan_cycle


@bench_app.command("cycle")
def bench_cycle(
    jobs: Annotated[int, typer.Option("--jobs", min=1, max=1_000_000)] = 10_000,
    offerings: Annotated[int, typer.Option("--offerings", min=1, max=100_000)] = 500,
    teams: Annotated[int, typer.Option("--teams", min=1, max=1000)] = 8,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the generated queue.")] = 0,
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=100)] = 5,
    solver: Annotated[
        SolverChoice, typer.Option("--solver", help="Joint placement: auto, milp or greedy.")
    ] = SolverChoice.AUTO,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Generate a realistic queue and report the median planning time over several runs."""
    snapshot = generate_snapshot(jobs, offerings, teams, seed)
    policy = Policy(solver=solver)
    times = []
    plan = None
    for _ in range(repeats):
        start = time.perf_counter()
        plan = plan_cycle(snapshot, policy)
        times.append(time.perf_counter() - start)
    assert plan is not None
    result = {
        "jobs": jobs,
        "offerings": offerings,
        "teams": teams,
        "seed": seed,
        "repeats": repeats,
        "median_seconds": round(statistics.median(times), 4),
        "min_seconds": round(min(times), 4),
        "pending": sum(j.state.is_pending for j in snapshot.jobs),
        "admitted": len(plan.admissions),
        "held": len(plan.holds),
        "dependency_failed": len(plan.dependency_failures),
        "solver": plan.solver.method,
        "milp_variables": plan.solver.variables,
        "objective": round(plan.solver.objective, 2),
        "greedy_objective": round(plan.solver.greedy_objective, 2),
        "planned_cost_usd": round(sum(a.placement.expected_cost_usd for a in plan.admissions), 2),
    }
    if as_json:
        typer.echo(json.dumps(result))
        return
    table = Table(title="plan_cycle benchmark")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, str(value))
    Console().print(table)
