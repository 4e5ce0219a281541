"""The demo: ``budgeteer serve`` on a free local port with a fresh SQLite file and a sandbox
market replaying a real spot trace at 120× (a 4-hour SLA passes in two minutes), and a scripted
morning submitted through the Python client:

- a **P0** drift-triggered retrain of the churn model with a 4 h SLA;
- two **P1** scheduled nightly retrains (search ranker, ads CTR) with 8 h SLAs;
- a **P2** pipeline ``features → train → validate → package``;
- a **P3** research sweep that the research budget must hold.

Every job runs the real example training script (``budgeteer.examples.train_linear``), which
checkpoints and resumes; spot capacity in the trace disappears about 45 s into the run, so jobs
on spot are preempted, checkpoint on the notice and resume (on on-demand after one preemption).
Live progress is printed while it runs, then a report: per job its placement, market history,
cost, on-demand equivalent, savings and whether it met its deadline; per budget accrued,
committed and remaining money; and the checks (P0 on time, P3 held by its budget, no budget
exceeded, the ledger equal to a recompute from the attempts and the catalog prices).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from budgeteer.backends.jobuser import SDK_PACKAGES, python_for, resolve_job_user
from budgeteer.catalog import load_catalog
from budgeteer.client import Client
from budgeteer.display import usd, when
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.store import SqlStore

TIME_SCALE = 120
TRACE = Path(__file__).parent / "data" / "us-east-1f_v100_1.window.json"
BUDGETS = [
    {"id": "acme-monthly", "scope": {"organisation": "acme"}, "limit_usd": 2000},
    {
        "id": "growth-monthly",
        "scope": {"team": "growth"},
        "limit_usd": 400,
        "emergency_reserve_usd": 50,
    },
    {"id": "search-monthly", "scope": {"team": "search"}, "limit_usd": 300},
    {"id": "research-monthly", "scope": {"team": "research"}, "limit_usd": 40},
]


def _train(python: str, epochs: int, step_seconds: float) -> list[str]:
    return [
        python,
        "-m",
        "budgeteer.examples.train_linear",
        "--epochs",
        str(epochs),
        "--step-seconds",
        str(step_seconds),
        "--out",
        "model.npy",
    ]


def _job(
    python: str,
    name: str,
    team: str,
    priority: str,
    ref_hours: float,
    sla: str,
    epochs: int,
    step: float,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "team": team,
        "priority": priority,
        "resources": {"accelerators": ["V100"]},
        "work": {"reference_hours": ref_hours},
        "sla": sla,
        "spot": {"allowed": True, "max_preemptions": 1},
        "checkpoint": {"interval_minutes": 2, "restart_overhead_minutes": 2},
        "command": _train(python, epochs, step),
        **extra,
    }


def morning(python: str) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """The scripted submissions: (team, job spec) pairs and the pipeline."""
    jobs = [
        ("growth", _job(python, "churn-drift-retrain", "growth", "P0", 0.4, "4h", 40, 0.01)),
        ("search", _job(python, "search-ranker-nightly", "search", "P1", 0.8, "8h", 70, 0.015)),
        ("growth", _job(python, "ads-ctr-nightly", "growth", "P1", 0.8, "8h", 70, 0.015)),
        (
            "research",
            {
                "name": "research-sweep",
                "team": "research",
                "priority": "P3",
                "work": {"reference_hours": 60},
                "sla": "7d",
                "command": _train(python, 5, 0.0),
            },
        ),
    ]
    steps = [("features", 8), ("train", 30), ("validate", 4), ("package", 2)]
    pipeline = {
        "name": "fraud",
        "jobs": [
            _job(
                python,
                name,
                "growth",
                "P2",
                0.1 + epochs / 100,
                "12h",
                epochs,
                0.01,
                depends_on=[{"job": steps[i - 1][0]}] if i else [],
            )
            for i, (name, epochs) in enumerate(steps)
        ],
    }
    return jobs, pipeline


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DemoRun:
    """A running demo server and what was submitted to it."""

    workdir: Path
    url: str
    admin: str
    process: subprocess.Popen[bytes]
    python: str  # the interpreter the jobs run (one the jobs' user can reach)
    tokens: dict[str, str] = field(default_factory=dict)
    job_ids: dict[str, str] = field(default_factory=dict)  # name → id

    def client(self, team: str | None = None) -> Client:
        """A client with the team's token (the admin's when ``team`` is None)."""
        return Client(self.url, self.tokens[team] if team else self.admin)


def start(port: int | None, workdir: Path | None = None) -> DemoRun:
    """Write the config and start ``budgeteer serve``; wait until it answers."""
    work = workdir or Path(tempfile.mkdtemp(prefix="budgeteer-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:  # jobs run as an unprivileged user: let it pass to its folder
        work.chmod(0o711)
    python = python_for(resolve_job_user(None), work / "job-python", (*SDK_PACKAGES, "numpy"))
    (work / "budgets.yaml").write_text(yaml.safe_dump({"budgets": BUDGETS}))
    port = port or _free_port()
    config = {
        "store": "sqlite:///demo.db",
        "budgets": "budgets.yaml",
        "interval_seconds": 60,
        "backend": {
            "kind": "sandbox",
            "workdir": ".budgeteer",
            "grace_seconds": 60,
            "time_scale": TIME_SCALE,
            "market": {"trace": str(TRACE)},
        },
        "api": {
            "host": "127.0.0.1",
            "port": port,
            # the demo's jobs run the bundled example trainer, and nothing else
            "allowed_commands": [[python, "-m", "budgeteer.examples.train_linear"]],
        },
    }
    (work / "budgeteer.yaml").write_text(yaml.safe_dump(config))
    admin = "demo-admin-" + secrets.token_hex(12)
    log = open(work / "serve.log", "wb")  # noqa: SIM115 - the server writes it until it exits
    process = subprocess.Popen(
        [sys.executable, "-m", "budgeteer", "serve", "--config", str(work / "budgeteer.yaml")],
        cwd=work,
        env={**os.environ, "BUDGETEER_ADMIN_TOKEN": admin},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if process.poll() is not None:
            raise RuntimeError(f"the server exited; see {work / 'serve.log'}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return DemoRun(work, url, admin, process, python)
        except httpx.TransportError:
            time.sleep(0.1)  # not listening yet
            continue
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"the server did not answer on {url}; see {work / 'serve.log'}")


def submit(run: DemoRun) -> None:
    """Team tokens, then the morning's jobs through the client (with idempotency keys)."""
    with run.client() as admin:
        for team in ("growth", "search", "research"):
            run.tokens[team] = admin.create_token(f"{team} orchestrator", [team])
    jobs, pipeline = morning(run.python)
    for team, spec in jobs:
        with run.client(team) as c:
            run.job_ids[spec["name"]] = c.submit(spec, idempotency_key=f"demo:{spec['name']}").id
    with run.client("growth") as c:
        for name, handle in c.submit_pipeline(pipeline, idempotency_key="demo:fraud").items():
            run.job_ids[f"fraud/{name}"] = handle.id


def _table(views: dict[str, dict[str, Any]]) -> Table:
    table = Table(
        title=f"budgeteer demo — market at {TIME_SCALE}× (a 4 h SLA passes in 2 min); "
        "ETA and deadline on the sandbox's simulated clock"
    )
    for col in ("job", "tier", "state", "market", "progress", "ETA", "deadline", "cost $"):
        table.add_column(col)
    for name, v in views.items():
        p = v.get("progress") or {}
        pct = f"{100 * p.get('fraction', 0):.0f}%" if p else ""
        table.add_row(
            name,
            v["priority"],
            v["state"],
            " → ".join(v["market_history"]),
            pct,
            when(v.get("eta")),
            when(v.get("deadline")),
            usd(v["cost"]["accrued_usd"]),
        )
    return table


def follow(run: DemoRun, console: Console, timeout_seconds: float) -> dict[str, dict[str, Any]]:
    """Print live progress until every job but the held one is finished (or time runs out)."""
    clients = {t: run.client(t) for t in run.tokens}
    teams = {"research-sweep": "research", "search-ranker-nightly": "search"}
    views: dict[str, dict[str, Any]] = {}
    end = time.monotonic() + timeout_seconds
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        while True:
            for name, job_id in run.job_ids.items():
                views[name] = dict(clients[teams.get(name, "growth")].get(job_id).raw)
            live.update(_table(views))
            waiting = [
                n
                for n, v in views.items()
                if v["state"]
                not in {"succeeded", "failed", "cancelled", "dependency_failed", "stopped_early"}
                and n != "research-sweep"
            ]
            if not waiting or time.monotonic() > end:
                break
            time.sleep(0.5)
    for c in clients.values():
        c.close()
    return views


def report(run: DemoRun, views: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The final report and its checks (see the module docstring)."""
    store = SqlStore(f"sqlite:///{run.workdir / 'demo.db'}")
    try:
        jobs = {}
        for name, v in views.items():
            events = store.events(v["id"])
            finished = events[-1].at if store.job(v["id"]).state.is_terminal else None
            deadline = datetime.fromisoformat(v["deadline"]) if v.get("deadline") else None
            jobs[name] = {
                "id": v["id"],
                "priority": v["priority"],
                "state": v["state"],
                "placement": (v.get("placement") or {}).get("instance_type"),
                "market_history": v["market_history"],
                "preemptions": sum(
                    a.outcome is AttemptOutcome.PREEMPTED for a in store.attempts(v["id"])
                ),
                "cost_usd": v["cost"]["accrued_usd"],
                "on_demand_equivalent_usd": v["cost"]["on_demand_equivalent_usd"],
                "savings_usd": v["cost"]["savings_usd"],
                "hold_reason": v.get("hold_reason"),
                "deadline_met": bool(
                    finished and deadline and v["state"] == "succeeded" and finished <= deadline
                ),
            }
        with run.client() as admin:
            budgets = {b["id"]: admin.budget_status(b["id"]) for b in admin.budgets()}
        ledger = store.ledger()
        ledger_total = sum((e.amount_usd for e in ledger), Decimal(0))
        jobs_total = sum((Decimal(j["cost_usd"]) for j in jobs.values()), Decimal(0))
        recompute = _recompute(store)
    finally:
        store.close()
    p3 = jobs["research-sweep"]
    checks = {
        "p0_met_sla": jobs["churn-drift-retrain"]["deadline_met"],
        "p3_held_by_budget": p3["state"] == "held" and "budget" in (p3["hold_reason"] or ""),
        "no_budget_exceeded": all(
            Decimal(b["accrued_usd"]) <= Decimal(b["limit_usd"]) for b in budgets.values()
        ),
        # each entry is rounded half-even to the ledger's 1e-8 USD, and nothing else differs
        "ledger_balances": abs(ledger_total - recompute) <= len(ledger) * Decimal("0.5e-8")
        and abs(ledger_total - jobs_total) < Decimal("0.00001"),
        "all_others_succeeded": all(
            j["state"] == "succeeded" for n, j in jobs.items() if n != "research-sweep"
        ),
    }
    return {
        "jobs": jobs,
        "budgets": {
            k: {f: b[f] for f in ("limit_usd", "accrued_usd", "committed_usd", "remaining_usd")}
            for k, b in budgets.items()
        },
        "ledger_total_usd": str(ledger_total),
        "ledger_recomputed_usd": str(recompute),
        "ledger_entries": len(ledger),
        "checks": checks,
        "ok": all(checks.values()),
    }


def _recompute(store: SqlStore) -> Decimal:
    """Σ over ended attempts of catalog price × instances × duration (independent of the
    ledger: the demo's market bills at catalog prices)."""
    prices = {o.id: Decimal(repr(o.usd_per_hour)) for o in load_catalog().offerings}
    total = Decimal(0)
    for a in store.attempts():
        if a.ended_at is None:
            continue
        seconds = Decimal(str((a.ended_at - a.started_at).total_seconds()))
        total += prices[a.offering_id] * a.instances * seconds / Decimal(3600)
    return total


def print_report(console: Console, result: dict[str, Any], run: DemoRun) -> None:
    """The report as tables."""
    jobs = Table(title="jobs")
    for col in (
        "job",
        "tier",
        "state",
        "placement",
        "markets",
        "preempted",
        "cost $",
        "on-demand $",
        "saved $",
        "deadline met",
    ):
        jobs.add_column(col)
    for name, j in result["jobs"].items():
        jobs.add_row(
            name,
            j["priority"],
            j["state"],
            j["placement"] or "—",
            " → ".join(j["market_history"]) or "—",
            str(j["preemptions"]),
            usd(j["cost_usd"]),
            usd(j["on_demand_equivalent_usd"]),
            usd(j["savings_usd"]),
            "yes"
            if j["deadline_met"]
            else "held: " + (j["hold_reason"] or "")  # whole: the table wraps it
            if j["state"] == "held"
            else "no",
        )
    console.print(jobs)
    budgets = Table(title="budgets")
    for col in ("budget", "limit $", "accrued $", "committed $", "remaining $"):
        budgets.add_column(col)
    for name, b in result["budgets"].items():
        budgets.add_row(
            name,
            usd(b["limit_usd"]),
            usd(b["accrued_usd"]),
            usd(b["committed_usd"]),
            usd(b["remaining_usd"]),
        )
    console.print(budgets)
    for check, passed in result["checks"].items():
        console.print(f"{'[green]✓' if passed else '[red]✗'}[/] {check.replace('_', ' ')}")
    console.print(
        f"ledger {result['ledger_total_usd']} USD = recomputed "
        f"{result['ledger_recomputed_usd']} USD"
    )


def stop(run: DemoRun) -> None:
    """SIGTERM the server and wait for its graceful exit."""
    if run.process.poll() is None:
        run.process.send_signal(signal.SIGTERM)
        try:
            run.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            run.process.kill()


def main(
    port: int | None, exit_after: bool, report_file: Path | None, timeout_seconds: float
) -> int:
    """Run the demo; the exit status is 0 when every check passed."""
    console = Console(width=None if sys.stdout.isatty() else 150)
    run = start(port)
    console.print(f"budgeteer serve on {run.url} (work folder {run.workdir})")
    result: dict[str, Any] = {"ok": False}
    try:
        submit(run)
        views = follow(run, console, timeout_seconds)
        result = report(run, views)
        print_report(console, result, run)
        if report_file is not None:
            report_file.write_text(json.dumps(result, indent=2))
        if not exit_after:
            console.print(f"dashboard: {run.url}/login — log in with the admin token {run.admin}")
            console.print("serving until Ctrl-C")
            run.process.wait()
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        stop(run)
    return 0 if result["ok"] else 1
