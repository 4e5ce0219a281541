"""Retraining signals (``budgeteer.triggers``): drift statistics against hand-computed values and
scipy; the policy's severity table at its edges; dedupe and upgrade (a property over any
sequence of signals); and ``budgeteer trigger`` end to end on the sandbox, with bad input that
submits nothing."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import jensenshannon
from scipy.stats import ks_2samp

from budgeteer.errors import SpecError, SpecErrors
from budgeteer.triggers.drift import (
    MIN_ROWS,
    FeatureDrift,
    compare,
    psi_from_shares,
    quantile_edges,
    shares,
)
from budgeteer.triggers.policy import (
    Level,
    OpenRetrain,
    Thresholds,
    TriggerPolicy,
    decide,
    load_policy,
)

PY = sys.executable
EXAMPLES = Path(__file__).parents[1] / "examples" / "drift"
NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
sys.path.insert(0, str(EXAMPLES))
from make_samples import sample  # noqa: E402


def _cols(rows: list[dict[str, object]]) -> dict[str, list[object]]:
    return {k: [r[k] for r in rows] for k in rows[0]}


# -- statistics ---------------------------------------------------------------------------------
def test_psi_by_hand() -> None:
    # (0.25 − 0.5)·ln(0.25/0.5) + (0.75 − 0.5)·ln(0.75/0.5)
    expected = -0.25 * math.log(0.5) + 0.25 * math.log(1.5)
    assert psi_from_shares(np.array([0.5, 0.5]), np.array([0.25, 0.75])) == pytest.approx(expected)
    assert psi_from_shares(np.array([0.5, 0.5]), np.array([0.5, 0.5])) == 0.0
    # an empty bin counts at the floor, not as infinity
    assert math.isfinite(psi_from_shares(np.array([1.0, 0.0]), np.array([0.5, 0.5])))


def test_numeric_statistics_match_scipy_and_quantile_bins() -> None:
    rng = np.random.default_rng(7)
    ref, cur = rng.normal(0, 1, 3000), rng.normal(0.5, 1.2, 2000)
    (d,) = compare({"x": list(ref)}, {"x": list(cur)}, bins=10)
    edges = quantile_edges(ref, 10)
    assert len(edges) == 9
    r, c = shares(ref, edges), shares(cur, edges)
    assert r == pytest.approx(np.full(10, 0.1), abs=1e-3)  # quantile bins: a tenth each
    assert d.ks == pytest.approx(ks_2samp(ref, cur).statistic)
    assert d.ks_pvalue == pytest.approx(ks_2samp(ref, cur).pvalue)
    assert d.js == pytest.approx(jensenshannon(r, c, base=2))
    assert d.psi == pytest.approx(psi_from_shares(r, c))
    assert d.psi > 0.25  # a half-sigma shift is a major one
    (same,) = compare({"x": list(ref)}, {"x": list(ref)})
    assert (same.psi, same.ks, same.js) == (0.0, 0.0, 0.0)


def test_categorical_features_compare_category_frequencies() -> None:
    ref = ["a"] * 50 + ["b"] * 50
    cur = ["a"] * 25 + ["b"] * 50 + ["c"] * 25  # a new category
    (d,) = compare({"plan": ref}, {"plan": cur})
    assert d.kind == "categorical"
    assert d.ks is None
    r, c = np.array([0.5, 0.5, 0.0]), np.array([0.25, 0.5, 0.25])
    assert d.psi == pytest.approx(psi_from_shares(r, c))
    assert d.js == pytest.approx(jensenshannon(r, c, base=2))


def test_missing_values_are_dropped_and_bad_tables_named() -> None:
    good = [str(x) for x in range(40)]
    (d,) = compare({"x": [*good, "", "nan", None]}, {"x": good})
    assert (d.n_reference, d.n_current) == (40, 40)
    with pytest.raises(SpecError) as err:
        compare({"x": good, "y": good}, {"x": good})
    assert err.value.field == "columns.y"
    with pytest.raises(SpecError) as err:
        compare({"x": good[:1]}, {"x": good})  # a reference of one row
    assert err.value.field == "reference.x"
    assert f"at least {MIN_ROWS}" in str(err.value)
    with pytest.raises(SpecError) as err:
        compare({"x": good}, {"x": ["nan"] * 40})
    assert err.value.field == "current.x"


# -- the policy -----------------------------------------------------------------------------------
POLICY = TriggerPolicy.model_validate(
    {
        "models": {"churn": {"job": "x.yaml"}},
        "levels": [
            {"name": "critical", "when": {"psi": 0.5, "ks": 0.3}, "priority": "P0", "sla": "6h"},
            {"name": "major", "when": {"psi": 0.25}, "priority": "P1", "sla": "12h"},
            {
                "name": "minor",
                "when": {"psi": 0.1, "js": 0.1},
                "priority": "P2",
                "sla": "24h",
                "variant": "incremental",
            },
        ],
    }
)


def _drift(psi: float, ks: float | None = 0.0, js: float = 0.0) -> FeatureDrift:
    return FeatureDrift("f", "numeric", psi, ks, None, js, 100, 100)


@pytest.mark.parametrize(
    ("drift", "level"),
    [
        (_drift(0.5), "critical"),  # a threshold reached at its edge
        (_drift(0.4999, ks=0.3), "critical"),  # any statistic
        (_drift(0.4999, ks=0.2999), "major"),
        (_drift(0.25), "major"),
        (_drift(0.2499), "minor"),
        (_drift(0.0, js=0.1), "minor"),
        (_drift(0.0999, js=0.0999), None),
    ],
)
def test_severity_is_the_strongest_level_reached(drift: FeatureDrift, level: str | None) -> None:
    found = POLICY.severity([_drift(0.0), drift])
    assert (found.name if found else None) == level


def _open(priority: str, hours: float, variant: str = "full", running: bool = False) -> OpenRetrain:
    return OpenRetrain("churn-1", priority, NOW + timedelta(hours=hours), variant, running)  # type: ignore[arg-type]


def test_decisions_submit_upgrade_or_record() -> None:
    critical, minor = POLICY.levels[0], POLICY.levels[2]
    first = decide(critical, None, NOW)
    assert (first.action, first.priority, first.variant) == ("submit", "P0", "full")
    assert first.deadline == NOW + timedelta(hours=6)
    assert decide(None, None, NOW).action == "none"
    up = decide(critical, _open("P2", 24, "incremental"), NOW)
    assert (up.action, up.priority, up.variant, up.replaces) == ("upgrade", "P0", "full", "churn-1")
    assert up.deadline == NOW + timedelta(hours=6)
    weaker = decide(minor, _open("P0", 6), NOW)
    assert weaker.action == "none"
    running = decide(critical, _open("P2", 24, running=True), NOW)
    assert running.action == "none"
    assert "already running" in running.reason
    # an upgrade never loosens: a minor signal with a tighter SLA keeps P0 and full
    tight = decide(minor, _open("P0", 48), NOW)
    assert (tight.action, tight.priority, tight.variant) == ("upgrade", "P0", "full")
    assert tight.deadline == NOW + timedelta(hours=24)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([None, 0, 1, 2]), st.sampled_from(["wait", "start", "finish"])),
        max_size=30,
    )
)
def test_any_sequence_leaves_at_most_one_open_retrain_at_the_highest_tier_asked(
    steps: list[tuple[int | None, str]],
) -> None:
    """One model's signals and its retrain's life in any order: one open retrain at most, and
    while it waits its tier is the highest any signal asked since it was submitted."""
    open_: OpenRetrain | None = None
    asked: list[str] = []
    now = NOW
    for level_index, event in steps:
        now += timedelta(minutes=10)
        level = None if level_index is None else POLICY.levels[level_index]
        d = decide(level, open_, now)
        if d.action == "submit":
            assert open_ is None
            open_, asked = OpenRetrain("j", d.priority, d.deadline, d.variant, False), [d.priority]  # type: ignore[arg-type]
        elif d.action == "upgrade":
            assert open_ is not None
            assert not open_.running
            open_ = OpenRetrain("j", d.priority, d.deadline, d.variant, False)  # type: ignore[arg-type]
        if level is not None and open_ is not None and not open_.running:
            asked.append(level.priority)
        if open_ is not None and not open_.running:
            assert open_.priority == min(asked)  # "P0" < "P1" < …
        if open_ is not None and event == "start":
            open_ = OpenRetrain(open_.job_id, open_.priority, open_.deadline, open_.variant, True)
        elif open_ is not None and event == "finish" and open_.running:
            open_ = None


def test_a_policy_with_unknown_fields_is_refused_by_field(tmp_path: Path) -> None:
    doc = yaml.safe_load((EXAMPLES / "policy.yaml").read_text())
    doc["levels"][0]["colour"] = "red"
    bad = tmp_path / "policy.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecErrors) as err:
        load_policy(bad)
    assert "levels[0].colour" in {e.field for e in err.value.errors}
    with pytest.raises(ValueError, match="at least one of psi"):
        Thresholds()
    with pytest.raises(ValueError, match=r"duration|sla"):
        Level(name="x", when=Thresholds(psi=0.1), priority="P1", sla="soon")


# -- budgeteer trigger, end to end on the sandbox ---------------------------------------------------
def _trigger(
    cfg: Path,
    current: Path,
    *extra: str,
    reference: Path = EXAMPLES / "reference.csv",
    policy: Path = EXAMPLES / "policy.yaml",
    model: str = "churn",
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            PY,
            "-m",
            "budgeteer",
            "trigger",
            "--policy",
            str(policy),
            "--reference",
            str(reference),
            "--current",
            str(current),
            "--model",
            model,
            "--config",
            str(cfg),
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _sandbox(tmp_path: Path) -> Path:
    cfg = tmp_path / "budgeteer.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "store": "sqlite:///state.db",
                "interval_seconds": 1,
                "backend": {"kind": "sandbox", "time_scale": 600},
            }
        )
    )
    return cfg


def _jobs(cfg: Path) -> list[dict[str, Any]]:
    from budgeteer.config import load_config  # noqa: PLC0415
    from budgeteer.service.wiring import build  # noqa: PLC0415

    svc = build(*load_config(cfg))
    return [
        {"id": j.id, "tier": j.tier.name, "state": j.state.value, "hours": j.work.reference_hours}
        for j in svc.store.jobs()
    ]


def _policy_for(tmp_path: Path, python: str) -> Path:
    """The example policy, its job run by ``python`` (one the sandbox's jobs' user can run)."""
    spec = yaml.safe_load((EXAMPLES / "churn-retrain.yaml").read_text())
    spec["command"] = [python, "-c", "print('retraining churn')"]
    (tmp_path / "churn-retrain.yaml").write_text(yaml.safe_dump(spec))
    policy = tmp_path / "policy.yaml"
    policy.write_text((EXAMPLES / "policy.yaml").read_text())
    return policy


def test_a_strong_drift_submits_a_p0_full_retrain_that_runs_and_succeeds(
    tmp_path: Path, job_python: str
) -> None:
    cfg = _sandbox(tmp_path)
    policy = _policy_for(tmp_path, job_python)
    stable = _trigger(cfg, EXAMPLES / "current-stable.csv", policy=policy)
    assert stable.returncode == 0, stable.stderr
    assert json.loads(stable.stdout)["decision"]["action"] == "none"
    assert _jobs(cfg) == []
    run = _trigger(cfg, EXAMPLES / "current.csv", policy=policy)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["model"] == "churn"
    assert {s["feature"] for s in out["signals"]} == {"tenure_months", "monthly_spend", "plan"}
    assert all({"feature", "psi", "ks", "js"} <= set(s) for s in out["signals"])
    decision = out["decision"]
    assert decision["action"] == "submit"
    assert decision["priority"] in {"P0", "P1"}
    assert decision["variant"] == "full"
    (job,) = _jobs(cfg)
    assert (job["id"], job["tier"], job["hours"]) == (
        decision["job_id"],
        decision["priority"],
        0.02,
    )
    again = json.loads(_trigger(cfg, EXAMPLES / "current.csv", policy=policy).stdout)["decision"]
    assert again["action"] == "none"  # one open retrain per model
    loop = subprocess.run(
        [PY, "-m", "budgeteer", "run", "--config", str(cfg), "--until-idle", "--cycles", "300"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert loop.returncode == 0, loop.stderr
    (job,) = _jobs(cfg)
    assert job["state"] == "succeeded"


def test_a_small_drift_asks_for_an_incremental_p2_and_a_strong_one_raises_it(
    tmp_path: Path,
) -> None:
    cfg = _sandbox(tmp_path)
    mild = tmp_path / "mild.csv"
    rows = sample(5, 1000, 0.15)
    mild.write_text(
        "tenure_months,monthly_spend,plan\n"
        + "".join(f"{r['tenure_months']},{r['monthly_spend']},{r['plan']}\n" for r in rows)
    )
    out = json.loads(_trigger(cfg, mild).stdout)
    assert out["severity"] == "minor"
    assert (out["decision"]["action"], out["decision"]["priority"], out["decision"]["variant"]) == (
        "submit",
        "P2",
        "incremental",
    )
    (job,) = _jobs(cfg)
    assert job["hours"] == 0.005  # the incremental variant's work
    strong = json.loads(_trigger(cfg, EXAMPLES / "current.csv").stdout)["decision"]
    assert (strong["action"], strong["priority"], strong["replaces"]) == (
        "upgrade",
        "P0",
        job["id"],
    )
    states = {j["id"]: (j["state"], j["tier"]) for j in _jobs(cfg)}
    assert states[job["id"]][0] == "cancelled"
    assert states[strong["job_id"]] == ("submitted", "P0")


def test_parquet_samples_are_read(tmp_path: Path) -> None:
    try:
        import pyarrow as pa  # noqa: PLC0415
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ImportError:
        from engines import engine_missing  # noqa: PLC0415

        engine_missing("pyarrow is not installed (pip install 'budgeteer[drift]')")
    rows = sample(3, 1000, 1.0)
    path = tmp_path / "current.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    out = json.loads(_trigger(_sandbox(tmp_path), path).stdout)
    assert out["decision"]["action"] == "submit"
    assert {s["kind"] for s in out["signals"]} == {"numeric", "categorical"}


@pytest.mark.parametrize(
    ("make", "args", "field"),
    [
        (lambda p: None, {"model": "ltv"}, "--model"),
        (lambda p: p.write_text(""), {}, "--current"),
        (lambda p: p.write_text("tenure_months,plan\n1,a\n"), {}, "columns.monthly_spend"),
        (lambda p: p.write_text("a,b\n1\n"), {}, "--current:2"),
        (  # was a csv.Error traceback
            lambda p: p.write_text("a,b\n1," + "x" * 200_000 + "\n"),
            {},
            "--current: not valid CSV: field larger than field limit (131072)",
        ),
    ],
)
def test_bad_input_is_named_and_submits_nothing(
    tmp_path: Path, make: Any, args: dict[str, str], field: str
) -> None:
    cfg = _sandbox(tmp_path)
    current = tmp_path / "current.csv"
    current.write_text((EXAMPLES / "current.csv").read_text())
    make(current)
    out = _trigger(cfg, current, **args)
    assert out.returncode == 2
    assert field in out.stderr
    assert "Traceback" not in out.stderr
    assert _jobs(cfg) == []


def test_a_reference_of_one_row_is_refused(tmp_path: Path) -> None:
    cfg = _sandbox(tmp_path)
    one = tmp_path / "ref.csv"
    one.write_text("tenure_months,monthly_spend,plan\n1,2,basic\n")
    out = _trigger(cfg, EXAMPLES / "current.csv", reference=one)
    assert out.returncode == 2
    assert "reference.monthly_spend" in out.stderr
    assert _jobs(cfg) == []
