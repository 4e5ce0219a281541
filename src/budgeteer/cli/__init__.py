"""The ``budgeteer`` command line."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from rich.console import Console
from typer.core import TyperOption

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


def _flags_without_a_type() -> None:
    """Typer 0.29's help shows ``<bool>`` after every flag (``--json <bool>``), which reads as
    if the flag took a value; a flag's row shows no type, as in click's own help."""
    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_without_a_type()


def comma_names(text: str) -> list[str]:
    """The names of a comma-separated option (``--policies a, b``), blanks dropped."""
    return [n.strip() for n in text.split(",") if n.strip()]


def fail(exc: BudgeteerError) -> None:
    """Print every problem in ``exc`` on its own line and exit with status 2."""
    problems = exc.errors if isinstance(exc, SpecErrors) else (exc,)
    for problem in problems:
        err_console.print(f"[bold red]error:[/] {problem}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def native_writes_to_stderr() -> None:
    """Keep what native code writes to descriptor 1 off standard output. HiGHS (through
    ``scipy.optimize.milp``) prints debugging lines such as ``HighsMipSolverData::…
    tmpSolver.run();`` from C++ even with ``disp=False`` — about a hundred on a large plan —
    which would break anyone piping ``--json``. Descriptor 1 is pointed at standard error and
    Python's ``sys.stdout`` writes to a copy of the real standard output. Done once, at the
    edge (the entry point): the core stays free of I/O. Jobs' output goes to their log files."""
    try:
        sys.stdout.flush()
        real = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError):  # no descriptors to juggle (closed, or captured)
        return
    sys.stdout = open(  # noqa: SIM115 - the process's standard output from now on
        real, "w", buffering=1, encoding=sys.stdout.encoding, errors=sys.stdout.errors
    )


def main() -> None:
    """Entry point of the ``budgeteer`` script."""
    from budgeteer.cli import (  # noqa: F401, PLC0415
        bench,
        catalog,
        demo,
        k8s,
        markets,
        plan,
        service,
        simulate,
        spot,
        trigger,
    )

    native_writes_to_stderr()
    try:
        app()
    except BudgeteerError as exc:  # errors raised outside a command's own handling
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
