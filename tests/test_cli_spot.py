"""The deadline-spot benchmark CLI: its JSON contract and its errors."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from test_cli import budgeteer

DATA = Path(__file__).parent / "data"
TRACE = DATA / "spot-traces/availability/1-node/aws-02-15-2023/us-east-1f_v100_1.json"
PRICES = DATA / "spot-prices/v100_spot_prices.json"
BASE = (
    "bench",
    "deadline-spot",
    "--trace",
    str(TRACE),
    "--prices",
    str(PRICES),
    "--price-key",
    "us-east-1f_v100_1",
    "--on-demand-price",
    "3.06",
    "--job-hours",
    "48",
    "--deadline-hours",
    "60",
    "--overhead-hours",
    "0.2",
)


def test_deadline_spot_json_contract() -> None:
    out = budgeteer(*BASE, "--starts", "120,4500", "--policy", "default", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["policy"] == "default"
    assert [r["start_tick"] for r in doc["runs"]] == [120, 4500]
    for run in doc["runs"]:
        assert set(run) >= {"start_tick", "cost", "finished_hours", "met_deadline", "decisions"}
        assert run["met_deadline"] is True
        assert run["decisions"][0][0] == run["start_tick"]
        modes = [m for _, m in run["decisions"]]
        assert all(a != b for a, b in itertools.pairwise(modes))
        assert 0 < run["cost"] < 48 * 3.06 * 1.1


def test_optimal_costs_no_more_than_on_demand_and_samples_are_seeded() -> None:
    runs = {}
    for policy in ("optimal", "on-demand"):
        out = budgeteer(*BASE, "--samples", "2", "--seed", "7", "--policy", policy, "--json")
        assert out.returncode == 0, out.stderr
        runs[policy] = json.loads(out.stdout)["runs"]
    assert [r["start_tick"] for r in runs["optimal"]] == [
        r["start_tick"] for r in runs["on-demand"]
    ]
    for opt, od in zip(runs["optimal"], runs["on-demand"], strict=True):
        assert opt["cost"] <= od["cost"]
        assert od["cost"] > 48 * 3.06  # the changeover is paid too


def test_bad_arguments_are_named() -> None:
    out = budgeteer(*BASE, "--starts", "999999", "--policy", "greedy")
    assert out.returncode == 2
    assert "--starts" in out.stderr
    out = budgeteer(*BASE, "--starts", "120", "--policy", "clairvoyant")
    assert out.returncode == 2
    assert "unknown policy 'clairvoyant'" in out.stderr
    out = budgeteer("bench", "deadline-spot", "--trace", str(TRACE), "--starts", "120")
    assert out.returncode == 2
    assert "--spot-price" in out.stderr
