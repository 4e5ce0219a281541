"""The demo's ``--exit`` run end to end: a real server process, the client, real training
processes on a replayed spot trace; the report's facts must hold."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path


def test_the_demo_tells_the_truth(tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "budgeteer", "demo", "--exit", "--report", str(report_file)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_file.read_text())
    jobs = report["jobs"]
    assert report["checks"] == {
        "p0_met_sla": True,
        "p3_held_by_budget": True,
        "no_budget_exceeded": True,
        "ledger_balances": True,
        "all_others_succeeded": True,
    }
    # the P0 finished inside its 4 h SLA; the P3 sweep waits on the research budget
    assert jobs["churn-drift-retrain"]["state"] == "succeeded"
    assert jobs["research-sweep"]["state"] == "held"
    assert "research-monthly" in jobs["research-sweep"]["hold_reason"]
    # the trace takes spot away mid-run: someone was preempted, resumed and still succeeded
    resumed = [j for j in jobs.values() if j["preemptions"] >= 1 and j["state"] == "succeeded"]
    assert resumed
    assert all(j["market_history"][-1] == "on_demand" for j in resumed)  # after 1 preemption
    for budget in report["budgets"].values():
        assert Decimal(budget["accrued_usd"]) <= Decimal(budget["limit_usd"])
    # the ledger equals the recompute but for each entry's rounding to 1e-8 USD
    gap = abs(Decimal(report["ledger_total_usd"]) - Decimal(report["ledger_recomputed_usd"]))
    assert gap <= report["ledger_entries"] * Decimal("0.5e-8")
    assert Decimal(report["ledger_total_usd"]) > 0
    # the pipeline ran in order
    assert all(
        jobs[f"fraud/{s}"]["state"] == "succeeded"
        for s in ("features", "train", "validate", "package")
    )
    # with --exit the server has stopped: no dashboard address to visit, no token printed
    assert "dashboard:" not in done.stdout
    assert "demo-admin-" not in done.stdout
    assert "held: " in done.stdout  # the hold reason, whole (the table wraps it)
    assert "research-monthly" in done.stdout
