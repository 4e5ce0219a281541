"""``budgeteer trigger``: compare a current sample of a model's features with a reference, map
the drift to a retrain by the trigger policy, and submit it (or raise the waiting one) through
the configured store (:mod:`budgeteer.triggers`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from budgeteer.cli import app, fail
from budgeteer.cli.service import ConfigOption, _service
from budgeteer.errors import BudgeteerError
from budgeteer.triggers.apply import carry_out, model_job, open_retrain, record
from budgeteer.triggers.drift import DEFAULT_BINS, compare
from budgeteer.triggers.policy import decide, load_policy
from budgeteer.triggers.tables import read_table
from budgeteer.triggers.view import outcome_view


@app.command("trigger")
def trigger_command(
    policy: Annotated[Path, typer.Option("--policy", help="The trigger policy (YAML).")],
    reference: Annotated[
        Path, typer.Option("--reference", help="Reference sample: CSV or Parquet.")
    ],
    current: Annotated[Path, typer.Option("--current", help="Current sample: same columns.")],
    model: Annotated[str, typer.Option("--model", help="A model the policy names.")],
    config: ConfigOption = None,
    bins: Annotated[int, typer.Option("--bins", min=2, max=100, help="PSI/JS bins.")] = (
        DEFAULT_BINS
    ),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Drift statistics per feature, the severity, and the retrain submitted (or none)."""
    try:
        rules = load_policy(policy)
        job = model_job(rules, policy.parent, model)
        drift = compare(
            read_table(reference, "--reference"), read_table(current, "--current"), bins
        )
        level = rules.severity(drift)
        svc = _service(config)  # everything is checked before the store is touched
        now = svc.clock.now()
        decision = decide(level, open_retrain(svc.store, job), now)
        job_id = carry_out(svc.store, job, decision, now, list(svc.catalog.throughput))
        severity = level.name if level is not None else "none"
        record(svc.store, model, job, "drift", severity, decision, job_id, drift, now)
    except BudgeteerError as exc:
        fail(exc)
        return
    out = outcome_view(model, drift, severity, decision, job_id)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    table = Table(title=f"{model}: drift against the reference")
    for column in ("feature", "kind", "PSI", "KS", "JS"):
        table.add_column(column)
    for s in out["signals"]:
        ks = "—" if s["ks"] is None else f"{s['ks']:.3f}"
        table.add_row(s["feature"], s["kind"], f"{s['psi']:.3f}", ks, f"{s['js']:.3f}")
    console = Console()
    console.print(table)
    d = out["decision"]
    what = f"{d['action']}" + (
        f" {d['job_id']} at {d['priority']} ({d['variant']})" if d["job_id"] else ""
    )
    console.print(f"severity {out['severity']}: {what} — {d['reason']}")
