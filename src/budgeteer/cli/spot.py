"""``budgeteer bench deadline-spot`` and ``deadline-spot-suite``: replay spot policies on traces."""

from __future__ import annotations

import json
import math
import statistics
import zlib
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from budgeteer.cli import bench_app, comma_names, fail
from budgeteer.core.spot import POLICY_NAMES, Market, RunResult, SpotJob, run_policy
from budgeteer.domain.trace import SpotTrace
from budgeteer.errors import BudgeteerError, SpecError
from budgeteer.traces import load_price_series, load_trace

FRACTIONS = (0.9, 0.8, 0.67, 0.5)
SUITE_WORK_HOURS = 48.0
SUITE_STARTS = 20
#: Spot price used by the suite where a trace has no price series: 30% of on-demand, about the
#: p3.2xlarge spot/on-demand ratio of the bundled V100 series (0.92-1.85 vs 3.06).
SUITE_SPOT_SHARE = 0.3


def market_for(
    trace: SpotTrace, prices: tuple[float, ...] | None, spot_price: float | None
) -> Market:
    """The replay market: the trace's availability with a price series or a constant price."""
    if prices is not None:
        if len(prices) < len(trace):
            raise SpecError(
                "--prices", f"series has {len(prices)} ticks but the trace has {len(trace)}"
            )
        series = np.array(prices[: len(trace)])
    elif trace.prices is not None:
        series = np.array(trace.prices)
    elif spot_price is not None:
        series = np.full(len(trace), spot_price)
    else:
        raise SpecError("--spot-price", "the trace has no prices: give --prices or --spot-price")
    return Market(np.array(trace.available) >= 1, series, trace.gap_hours)


def whole_ticks(hours: float, gap_hours: float) -> float:
    """``hours`` rounded to a whole number (≥ 1) of ticks: changeovers are modelled in ticks."""
    return max(1, round(hours / gap_hours)) * gap_hours


def run_json(r: RunResult) -> dict[str, Any]:
    """One run as the contract's JSON object."""
    return {
        "start_tick": r.start_tick,
        "cost": round(r.cost_usd, 6),
        "finished_hours": None if r.finished_hours is None else round(r.finished_hours, 6),
        "met_deadline": r.met_deadline,
        "decisions": [[t, m.value] for t, m in r.decisions],
        "preemptions": r.preemptions,
        "spot_hours": round(r.spot_hours, 6),
        "on_demand_hours": round(r.on_demand_hours, 6),
    }


@bench_app.command("deadline-spot")
def deadline_spot(
    trace: Annotated[Path, typer.Option("--trace", help="Availability trace (JSON).")],
    on_demand_price: Annotated[float, typer.Option("--on-demand-price", min=0.0)] = 3.06,
    job_hours: Annotated[float, typer.Option("--job-hours", min=0.0)] = 48.0,
    deadline_hours: Annotated[float, typer.Option("--deadline-hours", min=0.0)] = 60.0,
    overhead_hours: Annotated[float, typer.Option("--overhead-hours", min=0.0)] = 0.2,
    policy: Annotated[str, typer.Option("--policy", help="|".join(POLICY_NAMES))] = "default",
    prices: Annotated[Path | None, typer.Option("--prices", help="Spot price series.")] = None,
    price_key: Annotated[
        str | None, typer.Option("--price-key", help="Which series of the --prices file.")
    ] = None,
    spot_price: Annotated[float | None, typer.Option("--spot-price", min=0.0)] = None,
    starts: Annotated[str | None, typer.Option("--starts", help="Start ticks: 120,4500")] = None,
    samples: Annotated[int | None, typer.Option("--samples", min=1, max=10_000)] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the sampled starts.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Replay one job under one policy from several start ticks of a trace."""
    try:
        if policy not in POLICY_NAMES:
            raise SpecError(
                "--policy", f"unknown policy {policy!r}; one of " + ", ".join(POLICY_NAMES)
            )
        if job_hours <= 0 or deadline_hours < job_hours:
            raise SpecError("--deadline-hours", "must be at least --job-hours (> 0)")
        tr = load_trace(trace)
        series = load_price_series(prices, price_key)[0] if prices else None
        market = market_for(tr, series, spot_price)
        job = SpotJob(
            job_hours, deadline_hours, whole_ticks(overhead_hours, tr.gap_hours), on_demand_price
        )
        ticks = _starts(starts, samples, seed, tr, deadline_hours)
        runs = [run_policy(market, t, job, policy) for t in ticks]
    except BudgeteerError as exc:
        fail(exc)
        return
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "policy": policy,
                    "overhead_hours": job.changeover_hours,
                    "runs": [run_json(r) for r in runs],
                }
            )
        )
        return
    table = Table(
        title=f"{policy} on {tr.name} (C={job_hours} h, R={deadline_hours} h, "
        f"d={job.changeover_hours:.3f} h)"
    )
    for col in ("start", "cost $", "finished h", "met", "spot h", "on-demand h", "preempted"):
        table.add_column(col, justify="right")
    for r in runs:
        table.add_row(
            str(r.start_tick),
            f"{r.cost_usd:.2f}",
            "-" if r.finished_hours is None else f"{r.finished_hours:.2f}",
            "yes" if r.met_deadline else "NO",
            f"{r.spot_hours:.1f}",
            f"{r.on_demand_hours:.1f}",
            str(r.preemptions),
        )
    Console().print(table)


def _starts(
    starts: str | None, samples: int | None, seed: int, tr: SpotTrace, deadline_hours: float
) -> list[int]:
    need = math.ceil(deadline_hours / tr.gap_hours)
    last = len(tr) - need
    if last < 1:
        raise SpecError(
            "--deadline-hours",
            f"the trace covers {len(tr) * tr.gap_hours:.1f} h, shorter than the deadline",
        )
    if starts is not None:
        try:
            ticks = [int(x) for x in starts.split(",") if x.strip()]
        except ValueError:
            raise SpecError(
                "--starts", f"expected comma-separated tick numbers, got {starts!r}"
            ) from None
        bad = [t for t in ticks if not 0 <= t <= last]
        if bad or not ticks:
            raise SpecError(
                "--starts",
                f"start ticks must be in 0..{last} so the deadline fits "
                f"in the trace; got {bad or ticks}",
            )
        return ticks
    rng = np.random.default_rng(seed)
    return sorted(int(t) for t in rng.integers(1, last + 1, samples or 30))


def suite_traces(folder: Path) -> list[Path]:
    """The single-node traces under ``folder`` (every value 0 or 1)."""
    out = []
    for path in sorted(folder.rglob("*.json")):
        tr = load_trace(path)
        if max(tr.available) <= 1:
            out.append(path)
    return out


def _zone_prices(prices_file: Path | None, trace: SpotTrace, zone: str) -> tuple[float, ...] | None:
    if prices_file is None or not prices_file.exists():
        return None
    doc = json.loads(prices_file.read_text())
    if zone not in doc or len(doc[zone]) != len(trace):
        return None
    return load_price_series(prices_file, zone)[0]


@bench_app.command("deadline-spot-suite")
def deadline_spot_suite(
    traces: Annotated[Path, typer.Option("--traces", help="Folder of traces.")] = Path(
        "tests/data/spot-traces"
    ),
    prices: Annotated[Path | None, typer.Option("--prices", help="Zone-keyed V100 series.")] = (
        Path("tests/data/spot-prices/v100_spot_prices.json")
    ),
    on_demand_price: Annotated[float, typer.Option("--on-demand-price", min=0.0)] = 3.06,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the sampled starts.")] = 0,
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated policy names.")
    ] = ",".join(POLICY_NAMES),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """All single-node traces × C/R ∈ {0.9, 0.8, 0.67, 0.5}, C = 48 h, 20 seeded starts each."""
    names = comma_names(policies)
    try:
        bad = [n for n in names if n not in POLICY_NAMES]
        if bad:
            raise SpecError("--policies", f"unknown policy {bad[0]!r}")
        if "optimal" not in names:
            names.append("optimal")
        if "on-demand" not in names:
            names.append("on-demand")
        files = suite_traces(traces)
        if not files:
            raise SpecError("--traces", f"no single-node traces under {traces}")
        plan, skipped = _suite_plan(files, prices, on_demand_price, seed)
    except BudgeteerError as exc:
        fail(exc)
        return
    rows: list[dict[str, Any]] = []
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("replaying", total=len(plan))
        for trace_name, market, job, frac, start in plan:
            results = {n: run_policy(market, start, job, n) for n in names}
            rows.append(
                {
                    "trace": trace_name,
                    "fraction": frac,
                    "start": start,
                    **{n: (r.cost_usd, r.met_deadline) for n, r in results.items()},
                }
            )
            progress.advance(task)
    summary = _summarise(rows, names)
    if as_json:
        typer.echo(json.dumps({"runs": len(rows), "skipped": skipped, "policies": summary}))
        return
    _print_suite(summary, names, len(rows), skipped)


def _suite_plan(
    files: list[Path], prices: Path | None, od: float, seed: int
) -> tuple[list[tuple[str, Market, SpotJob, float, int]], list[str]]:
    plan = []
    skipped = []
    for path in files:
        tr = load_trace(path)
        zone = path.stem
        market = market_for(tr, _zone_prices(prices, tr, zone), od * SUITE_SPOT_SHARE)
        d = whole_ticks(0.2, tr.gap_hours)
        rng = np.random.default_rng(
            seed + zlib.crc32(str(path.relative_to(path.parents[2])).encode())
        )
        for frac in FRACTIONS:
            deadline = SUITE_WORK_HOURS / frac
            last = len(tr) - math.ceil(deadline / tr.gap_hours)
            if last < 1:
                skipped.append(
                    f"{zone} at C/R={frac}: trace is {len(tr) * tr.gap_hours:.1f} h, "
                    f"deadline {deadline:.1f} h"
                )
                continue
            job = SpotJob(SUITE_WORK_HOURS, deadline, d, od)
            for start in rng.integers(1, last + 1, SUITE_STARTS):
                plan.append((zone, market, job, frac, int(start)))
    return plan, skipped


def _summarise(rows: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    def stats(subset: list[dict[str, Any]], name: str) -> dict[str, float | int]:
        return {
            "mean_cost_over_optimal": round(
                statistics.fmean(r[name][0] / r["optimal"][0] for r in subset), 4
            ),
            "mean_cost_over_on_demand": round(
                statistics.fmean(r[name][0] / r["on-demand"][0] for r in subset), 4
            ),
            "missed_deadlines": sum(not r[name][1] for r in subset),
            "runs": len(subset),
        }

    out: dict[str, Any] = {}
    for name in names:
        out[name] = {
            "overall": stats(rows, name),
            "by_fraction": {
                str(f): stats([r for r in rows if r["fraction"] == f], name)
                for f in FRACTIONS
                if any(r["fraction"] == f for r in rows)
            },
        }
    return out


def _print_suite(summary: dict[str, Any], names: list[str], runs: int, skipped: list[str]) -> None:
    console = Console()
    table = Table(title=f"deadline-spot suite: {runs} runs (C = 48 h, d ≈ 0.2 h)")
    table.add_column("policy")
    table.add_column("C/R")
    table.add_column("cost ÷ optimal", justify="right")
    table.add_column("cost ÷ on-demand", justify="right")
    table.add_column("missed", justify="right")
    for name in names:
        entry = summary[name]
        for label, s in [("all", entry["overall"]), *entry["by_fraction"].items()]:
            table.add_row(
                name if label == "all" else "",
                label,
                f"{s['mean_cost_over_optimal']:.4f}",
                f"{s['mean_cost_over_on_demand']:.4f}",
                str(s["missed_deadlines"]),
            )
        table.add_section()
    console.print(table)
    for line in skipped:
        console.print(f"skipped: {line}")
