"""``budgeteer demo``: the first impression (see :mod:`budgeteer.demo.run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from budgeteer.cli import app


@app.command("demo")
def demo(
    exit_after: Annotated[bool, typer.Option("--exit", help="Exit after the report.")] = False,
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535)] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write the report as JSON.")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Real seconds to wait.")] = 420.0,
) -> None:
    """Serve, submit a scripted morning of retraining on a real spot trace, report."""
    from budgeteer.demo.run import main  # noqa: PLC0415 - keeps the other commands light

    raise typer.Exit(code=main(port, exit_after, report, timeout))
