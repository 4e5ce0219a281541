"""The CLI on the bundled example and on bad input (run as a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from budgeteer.bench.cycle import generate_snapshot

EXAMPLES = Path(__file__).parents[1] / "src" / "budgeteer" / "examples"


def budgeteer(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "budgeteer", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def example_plan() -> dict[str, Any]:
    out = budgeteer(
        "plan",
        "--jobs",
        str(EXAMPLES / "jobs.yaml"),
        "--budgets",
        str(EXAMPLES / "budgets.yaml"),
        "--at",
        "2026-12-02T09:00:00Z",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    plan: dict[str, Any] = json.loads(out.stdout)
    return plan


def test_example_queue_has_every_kind_of_outcome(example_plan: dict[str, Any]) -> None:
    admitted = {a["job"]: a for a in example_plan["admissions"]}
    holds = {h["job"]: h for h in example_plan["holds"]}
    assert admitted["churn-retrain"]["tier"] == "P0"
    assert holds["search-train"]["reason"] == "dependencies"
    assert holds["llm-reranker-distill"]["reason"] == "infeasible"
    assert holds["llm-reranker-distill"]["message"].startswith("fastest option")
    budget_holds = [h for h in holds.values() if h["reason"] == "budget"]
    assert budget_holds
    assert all(h["tier"] == "P3" for h in budget_holds)
    assert admitted["research-llm-finetune"]["variant"] == "incremental"
    assert len(admitted) + len(holds) == 20


def test_example_budgets_stay_within_their_thresholds(example_plan: dict[str, Any]) -> None:
    for b in example_plan["budgets"]:
        assert float(b["projected_usd"]) <= float(b["limit_usd"])
    research = next(b for b in example_plan["budgets"] if b["budget"] == "research-monthly")
    assert float(research["projected_usd"]) <= 0.70 * 1500
    assert research["held_jobs"] >= 1


def test_plan_table_output_names_the_hold_reasons() -> None:
    out = budgeteer(
        "plan",
        "--jobs",
        str(EXAMPLES / "jobs.yaml"),
        "--budgets",
        str(EXAMPLES / "budgets.yaml"),
        "--at",
        "2026-12-02T09:00:00Z",
    )
    assert out.returncode == 0, out.stderr
    assert "Budgets after this plan" in out.stdout
    assert "waiting for search-features" in out.stdout


def test_bad_job_file_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "- {name: a, team: t, work: {reference_hours: 1}, budget_usd: -3}\n"
        "- {name: b, team: t, work: {reference_hours: 1},"
        " resources: {accelerators: [Z9]}}\n"
    )
    out = budgeteer("plan", "--jobs", str(jobs))
    assert out.returncode == 2
    assert f"{jobs}: jobs[0].budget_usd" in out.stderr
    assert "jobs[1].resources.accelerators[0]: unknown accelerator 'Z9'" in out.stderr
    assert out.stdout == ""


def test_bad_at_and_missing_file_are_clear_errors(tmp_path: Path) -> None:
    out = budgeteer("plan", "--jobs", str(EXAMPLES / "jobs.yaml"), "--at", "tomorrow")
    assert out.returncode == 2
    assert "--at" in out.stderr
    for at in ("9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"):  # were OverflowErrors
        out = budgeteer("plan", "--jobs", str(EXAMPLES / "jobs.yaml"), "--at", at)
        assert out.returncode == 2
        assert f"--at: must be in the years 1970–8999, got '{at}'" in out.stderr
    out = budgeteer("plan", "--jobs", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2
    assert "cannot read" in out.stderr


def test_bad_catalog_is_named(tmp_path: Path) -> None:
    (tmp_path / "vms.csv").write_text("provider,region\naws,us-east-1\n")
    out = budgeteer("plan", "--jobs", str(EXAMPLES / "jobs.yaml"), "--catalog", str(tmp_path))
    assert out.returncode == 2
    assert "row 1, column 'zones': missing column" in out.stderr


def test_bench_cycle_prints_the_contract_keys() -> None:
    out = budgeteer(
        "bench", "cycle", "--jobs", "300", "--offerings", "60", "--repeats", "1", "--json"
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["jobs"] == 300
    assert result["offerings"] == 60
    assert result["median_seconds"] > 0
    assert result["admitted"] + result["held"] + result["dependency_failed"] == result["pending"]
    assert 0 < result["pending"] <= 300


def test_bench_generator_is_seeded() -> None:
    assert generate_snapshot(50, 20, seed=3) == generate_snapshot(50, 20, seed=3)
    assert generate_snapshot(50, 20, seed=3) != generate_snapshot(50, 20, seed=4)


def test_bench_json_is_json_alone_even_when_the_solver_talks() -> None:
    # HiGHS prints debugging lines to descriptor 1 on this queue (≈100 of them before)
    out = budgeteer(
        "bench", "cycle", "--jobs", "10000", "--offerings", "500", "--repeats", "1", "--json"
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)  # nothing but the JSON document
    assert doc["solver"] == "milp"
    assert doc["admitted"] > 0


def test_the_solver_guard_keeps_native_writes_off_stdout() -> None:
    code = (
        "import os\n"
        "from budgeteer.cli import native_writes_to_stderr\n"
        "native_writes_to_stderr()\n"
        "os.write(1, b'native noise\\n')\n"
        "print('kept')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "kept\n"


@pytest.mark.parametrize(
    "args",
    [
        ("simulate", "scenarios/short-burst.yaml", "--seed", "-1"),
        ("bench", "deadline-spot", "--trace", "x.json", "--seed", "-5"),
        ("bench", "deadline-spot-suite", "--seed", "-5"),
        ("bench", "cycle", "--seed", "-5"),
    ],
)
def test_a_negative_seed_is_refused_by_name(args: tuple[str, ...]) -> None:
    """numpy's generators take no negative seed: the option says so, not a traceback."""
    out = budgeteer(*args)
    assert out.returncode == 2
    assert "Invalid value for '--seed'" in out.stderr
    assert "Traceback" not in out.stderr
