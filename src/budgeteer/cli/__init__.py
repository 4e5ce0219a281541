"""The ``budgeteer`` command line."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from budgeteer.errors import BudgeteerError, SpecErrors

app = typer.Typer(
    name="budgeteer",
    help="Compute budget scheduler for ML retraining: the cheapest plan that still lands on time.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks that print measured tables or JSON.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

err_console = Console(stderr=True)


def fail(exc: BudgeteerError) -> None:
    """Print every problem in ``exc`` on its own line and exit with status 2."""
    problems = exc.errors if isinstance(exc, SpecErrors) else (exc,)
    for problem in problems:
        err_console.print(f"[bold red]error:[/] {problem}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def main() -> None:
    """Entry point of the ``budgeteer`` script."""
    from budgeteer.cli import bench, demo, plan, service, simulate, spot  # noqa: F401, PLC0415

    try:
        app()
    except BudgeteerError as exc:  # errors raised outside a command's own handling
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
