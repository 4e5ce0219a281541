"""``budgeteer simulate SCENARIO``: replay a scenario under several policies (see
:mod:`budgeteer.sim`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from budgeteer.cli import app, comma_names, fail
from budgeteer.errors import BudgeteerError, SpecError


@app.command("simulate")
def simulate_command(
    scenario: Path,
    policies: Annotated[
        str,
        typer.Option(
            "--policies",
            help="Comma-separated, or all: default, on-demand-fifo, spot-greedy-fifo, "
            "priority-quota; by name also default-planner-spot.",
        ),
    ] = "all",
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Overrides the scenario's.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write an HTML report here.")
    ] = None,
) -> None:
    """Replay a scenario's quarter of retraining with the service's own loop, per policy."""
    from budgeteer.sim import metrics  # noqa: PLC0415 - keeps the other commands light
    from budgeteer.sim.policies import POLICY_NAMES, SELECTABLE  # noqa: PLC0415
    from budgeteer.sim.scenario import build, load_scenario  # noqa: PLC0415

    names = list(POLICY_NAMES) if policies.strip() == "all" else comma_names(policies)
    unknown = [n for n in names if n not in SELECTABLE]
    try:
        if unknown or not names:
            raise SpecError(
                "--policies",
                f"unknown policy {unknown[0]!r}; available: {', '.join(SELECTABLE)}"
                if unknown
                else "give at least one policy",
            )
        built = build(load_scenario(scenario), seed)
    except BudgeteerError as exc:
        fail(exc)
        return
    results: dict[str, dict[str, Any]] = {}
    series: dict[str, dict[str, Any]] = {}
    days = built.scenario.days
    with Progress(
        TextColumn("{task.description:<18}"),
        BarColumn(),
        TextColumn("day {task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=as_json,
    ) as progress:
        for name in names:
            task = progress.add_task(name, total=days)

            def on_day(at: Any, task: Any = task) -> None:
                progress.update(task, completed=(at - built.start).total_seconds() / 86400)

            run = built.run(name, on_day)
            progress.update(task, completed=days)
            results[name] = metrics.summary(run, built)
            if report is not None:
                series[name] = metrics.series(run, built)
    if report is not None:
        from budgeteer.sim.report import write_report  # noqa: PLC0415

        page = write_report(report, built.scenario.name, results, series)
        if not as_json:
            typer.echo(f"report: {page}")
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "scenario": built.scenario.name,
                    "seed": built.scenario.seed if seed is None else seed,
                    "jobs": len(built.arrivals),
                    "policies": results,
                },
                indent=2,
            )
        )
        return
    _table(built.scenario.name, results)


def _table(scenario: str, results: dict[str, dict[str, Any]]) -> None:
    table = Table(title=f"scenario {scenario}")
    table.add_column("")
    for name in results:
        table.add_column(name, justify="right")

    def row(label: str, fmt: Any) -> None:
        table.add_row(label, *(fmt(r) for r in results.values()))

    row("cost $", lambda r: f"{r['cost_usd']:,.0f}")
    row("on-demand equivalent $", lambda r: f"{r['on_demand_equivalent_usd']:,.0f}")
    row("budget overrun $", lambda r: f"{r['budget_overrun_usd']:,.0f}")
    for tier in ("P0", "P1", "P2", "P3"):
        row(
            f"{tier} SLA met",
            lambda r, t=tier: (
                "—" if r["sla_met_fraction"][t] is None else f"{r['sla_met_fraction'][t]:.1%}"
            ),
        )
    row("jobs completed", lambda r: str(r["jobs_completed"]))
    row("held at end", lambda r: str(r["jobs_held_at_end"]))
    row("preemptions", lambda r: str(r["preemptions"]))
    row("on-demand instance-h", lambda r: f"{r['on_demand_hours']:,.0f}")
    row("waste $", lambda r: f"{r['waste_usd']:,.0f}")
    Console().print(table)
