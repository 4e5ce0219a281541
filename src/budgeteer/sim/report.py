"""``budgeteer simulate --report DIR``: an HTML page with plots (matplotlib, rendered to PNG files
beside it) that a newcomer can read: spend against each team's monthly limit over time, queue
depth by tier, the spot/on-demand mix, SLA attainment by tier and cost per policy."""

from __future__ import annotations

import html
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from numpy.typing import NDArray

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

TIERS = ("P0", "P1", "P2", "P3")


def write_report(
    out: Path, scenario: str, results: dict[str, dict[str, Any]], series: dict[str, dict[str, Any]]
) -> Path:
    """Write ``out/index.html`` and its PNGs; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, str]] = []
    names = list(results)
    figures.append(("Cost per policy", _bar(out / "cost.png", names, results)))
    figures.append(("SLA met by tier", _sla(out / "sla.png", names, results)))
    for name in names:
        s = series[name]
        times = np.array(
            [datetime.fromisoformat(t).replace(tzinfo=None) for t in s["times"]],
            dtype="datetime64[s]",
        )
        figures.append((f"{name}: spend by team", _spend(out / f"spend-{name}.png", times, s)))
        figures.append(
            (f"{name}: queue depth by tier", _queue(out / f"queue-{name}.png", times, s))
        )
        figures.append((f"{name}: spot / on-demand", _mix(out / f"mix-{name}.png", times, s)))
    rows = "".join(
        f"<tr><td>{html.escape(n)}</td><td>${r['cost_usd']:,.0f}</td>"
        f"<td>${r['on_demand_equivalent_usd']:,.0f}</td><td>${r['budget_overrun_usd']:,.0f}</td>"
        + "".join(_pct(r["sla_met_fraction"][t]) for t in TIERS)
        + f"<td>{r['jobs_completed']}</td><td>{r['jobs_held_at_end']}</td>"
        f"<td>{r['preemptions']}</td><td>${r['waste_usd']:,.0f}</td></tr>"
        for n, r in results.items()
    )
    body = "".join(
        f'<h2>{html.escape(title)}</h2><img src="{html.escape(src)}" alt="{html.escape(title)}">'
        for title, src in figures
    )
    page = out / "index.html"
    page.write_text(
        f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>budgeteer simulate — {html.escape(scenario)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:1.5rem;max-width:1100px}}
table{{border-collapse:collapse}}td,th{{padding:.3rem .6rem;border-bottom:1px solid #ddd}}
img{{max-width:100%}}</style></head><body>
<h1>Scenario {html.escape(scenario)}</h1>
<table><tr><th>policy</th><th>cost</th><th>on-demand equivalent</th><th>budget overrun</th>
<th>P0 SLA</th><th>P1 SLA</th><th>P2 SLA</th><th>P3 SLA</th><th>completed</th>
<th>held at end</th><th>preemptions</th><th>waste</th></tr>{rows}</table>{body}</body></html>"""
    )
    return page


def _pct(value: float | None) -> str:
    return "<td>—</td>" if value is None else f"<td>{value:.1%}</td>"


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def _bar(path: Path, names: list[str], results: dict[str, dict[str, Any]]) -> str:
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(names, [results[n]["cost_usd"] for n in names], color="#3b6fd1")
    ax.set_ylabel("USD")
    ax.set_title("Total cost")
    return _save(fig, path)


def _sla(path: Path, names: list[str], results: dict[str, dict[str, Any]]) -> str:
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        values = [results[n]["sla_met_fraction"][t] or 0.0 for t in TIERS]
        ax.bar([k + i * width for k in range(len(TIERS))], values, width, label=n)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(TIERS))], TIERS)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("deadlines met")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _spend(path: Path, times: NDArray[np.datetime64], s: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for team, points in s["spend_by_team"].items():
        line = ax.plot(times, points, label=team)[0]
        limit = s["team_limits"].get(team)
        if limit:
            ax.axhline(limit, color=line.get_color(), linestyle="--", linewidth=0.8)
    ax.set_ylabel("USD this period (dashed: limit)")
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return _save(fig, path)


def _queue(path: Path, times: NDArray[np.datetime64], s: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(9, 3))
    ax.stackplot(times, *[s["queue_by_tier"][t] for t in TIERS], labels=TIERS)
    ax.set_ylabel("jobs waiting")
    ax.legend(fontsize=8, loc="upper left")
    fig.autofmt_xdate()
    return _save(fig, path)


def _mix(path: Path, times: NDArray[np.datetime64], s: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(9, 3))
    m = s["instances_by_market"]
    ax.stackplot(
        times,
        m["spot"],
        m["on_prem"],
        m["on_demand"],
        labels=["spot", "on-prem", "on-demand"],
        colors=["#4caf50", "#2196f3", "#ff9800"],
    )
    ax.set_ylabel("instances running")
    ax.legend(fontsize=8, loc="upper left")
    fig.autofmt_xdate()
    return _save(fig, path)
