"""``budgeteer markets export``: a spot offering's market history, as the service learned it, in
the trace format ``market_seeds:`` reads — so another deployment can start from its weeks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from budgeteer.cli import app, fail
from budgeteer.cli.service import ConfigOption, _service
from budgeteer.clock import SystemClock
from budgeteer.errors import BudgeteerError, SpecError
from budgeteer.sdk import atomic_write

markets_app = typer.Typer(help="The spot markets the service has learned.", no_args_is_help=True)
app.add_typer(markets_app, name="markets")


@markets_app.command("export")
def export(
    offering: Annotated[str, typer.Argument(help="The spot offering's id.")],
    out: Annotated[Path, typer.Option("--out", help="The trace file to write.")],
    gap_seconds: Annotated[
        int, typer.Option("--gap-seconds", min=1, max=3600, help="The trace's tick.")
    ] = 60,
    config: ConfigOption = None,
) -> None:
    """Write OFFERING's market history (its periods, then the present one up to now, each
    rounded to whole ticks) as an availability trace."""
    try:
        svc = _service(config)
        known = {h.offering_id: h for h in svc.store.markets()}
        history = known.get(offering)
        if history is None:
            raise SpecError(
                "OFFERING",
                f"no market history for {offering!r} in this store "
                f"({len(known)} spot offerings have one)",
            )
        now = SystemClock().now()  # wall clock: the present period's end
        series = history.sampled(gap_seconds / 3600.0, now)
        doc = {
            "metadata": {
                "gap_seconds": gap_seconds,
                "offering": offering,
                "exported_at": now.isoformat(),
            },
            "data": [int(up) for up in series],
        }
        try:
            atomic_write(out, json.dumps(doc).encode())  # whole or not at all
        except OSError as exc:
            raise SpecError("--out", f"cannot write {out}: {exc.strerror}") from None
    except BudgeteerError as exc:
        fail(exc)
        return
    typer.echo(f"{offering}: {len(history.periods)} periods, {len(series)} ticks → {out}")
