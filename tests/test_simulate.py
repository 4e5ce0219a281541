"""``budgeteer simulate``: cron, scenario files (validated, errors naming fields), the workload
generators (seeded), the market with droughts, the CLI's JSON and report, and the claims we make
on a short run."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from budgeteer.domain.cron import CronError, cron_times
from budgeteer.errors import BudgeteerError, SpecErrors
from budgeteer.sim.scenario import build, load_scenario

ROOT = Path(__file__).parents[1]
T0 = datetime(2026, 10, 1, tzinfo=UTC)  # a Thursday


@pytest.mark.parametrize(
    ("expr", "days", "count", "first"),
    [
        ("0 2 * * *", 3, 3, T0.replace(hour=2)),
        ("*/15 * * * *", 1 / 24, 4, T0),
        ("0 0 * * 1", 14, 2, datetime(2026, 10, 5, tzinfo=UTC)),  # Mondays
        ("30 6 1 * *", 40, 2, T0.replace(hour=6, minute=30)),  # the 1st of each month
        ("0 0 1 * 1", 14, 3, T0),  # day 1 OR Mondays, as cron does
        ("0 9-17/4 * * 7", 7, 3, datetime(2026, 10, 4, 9, tzinfo=UTC)),  # Sundays 9, 13, 17
    ],
)
def test_cron(expr: str, days: float, count: int, first: datetime) -> None:
    times = list(cron_times(expr, T0, T0 + timedelta(days=days)))
    assert len(times) == count
    assert times[0] == first


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("0 2 * *", "expected 5 fields"),
        ("60 * * * *", "minute"),
        ("0 x * * *", "hour"),
        ("0 0 0 * *", "day of month"),
        ("*/0 * * * *", "minute"),
    ],
)
def test_bad_cron_names_the_field(expr: str, field: str) -> None:
    with pytest.raises(CronError, match=field):
        list(cron_times(expr, T0, T0 + timedelta(days=1)))


def _scenario(tmp_path: Path, **changes: object) -> Path:
    doc = yaml.safe_load((ROOT / "scenarios" / "quiet-quarter.yaml").read_text())
    doc["market"]["trace"] = str(ROOT / doc["market"]["trace"].removeprefix("../"))
    doc["market"].pop("zones", None)
    doc.update(changes)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"surprise": 1}, "surprise"),
        ({"days": 0}, "days"),
        ({"seed": -1}, "seed"),  # numpy's generators take no negative seed
        (  # 1e30 arrivals a day were drawn until the process was killed for memory
            {
                "workload": {
                    "drift": [{"model": "m", "team": "t", "per_day": 1e30, "reference_hours": 1}]
                }
            },
            "workload.drift[0].per_day",
        ),
        (
            {
                "workload": {
                    "experiments": [{"team": "t", "per_day": 1, "max_reference_hours": 1e30}]
                }
            },
            "workload.experiments[0].max_reference_hours",
        ),
        ({"start": "2026-10-01T00:00:00"}, "start"),  # no time zone
        (
            {
                "workload": {
                    "scheduled": [
                        {"model": "m", "team": "t", "cron": "0 25 * * *", "reference_hours": 1}
                    ]
                }
            },
            "workload.scheduled[0].cron",
        ),
        (
            {
                "workload": {
                    "drift": [{"model": "m", "team": "t", "per_day": -1, "reference_hours": 1}]
                }
            },
            "workload.drift[0].per_day",
        ),
        (
            {"budgets": [{"id": "b", "scope": {"team": "t"}, "limit_usd": -5}]},
            "budgets[0].limit_usd",
        ),
    ],
)
def test_bad_scenarios_name_the_field(
    tmp_path: Path, change: dict[str, object], field: str
) -> None:
    with pytest.raises(SpecErrors) as err:
        load_scenario(_scenario(tmp_path, **change))
    assert field in [e.field for e in err.value.errors]
    assert all(e.source == str(tmp_path / "s.yaml") for e in err.value.errors)


def test_a_missing_trace_is_a_clear_error(tmp_path: Path) -> None:
    doc = yaml.safe_load(_scenario(tmp_path).read_text())
    doc["market"]["trace"] = "nowhere.json"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(BudgeteerError, match=r"nowhere\.json"):
        build(load_scenario(tmp_path / "s.yaml"))


def test_generators_are_seeded_and_follow_their_rules(tmp_path: Path) -> None:
    scenario = load_scenario(ROOT / "scenarios" / "drift-storm.yaml")
    one, two, other = build(scenario), build(scenario), build(scenario, seed=99)
    assert [(a.at, a.job) for a in one.arrivals] == [(a.at, a.job) for a in two.arrivals]
    assert [a.at for a in one.arrivals] != [a.at for a in other.arrivals]
    start = scenario.start
    daily = [a for a in one.arrivals if a.job.name == "churn-scheduled"]
    assert len(daily) == 90
    assert all(a.at.hour == 2 and a.at.minute == 0 for a in daily)
    critical = [a for a in one.arrivals if a.job.name.endswith("drift-critical")]
    assert all(a.job.deadline - a.at == timedelta(hours=4) for a in critical)  # P0, 4 h SLA
    storm = [a for a in critical if start + timedelta(days=20) <= a.at < start + timedelta(days=23)]
    assert len(storm) > 10  # the storm is a storm
    gates = {a.job.id for a in one.arrivals if a.job.name.endswith("-validate")}
    assert one.gate_failures <= gates
    assert 0 < len(one.gate_failures) < len(gates)
    by_id = {a.job.id: a.job for a in one.arrivals}
    packages = [j for j in by_id.values() if j.name.endswith("-package")]
    assert packages
    for package in packages:  # each package waits for its own run's validation gate
        [dep] = package.depends_on
        assert by_id[dep.job].name.endswith("-validate")
        assert by_id[dep.job].seq == package.seq - 1


def test_droughts_take_spot_away_for_their_days() -> None:
    built = build(load_scenario(ROOT / "scenarios" / "spot-drought.yaml"))
    spot = next(o for o in built.catalog.offerings if o.market.value == "spot")
    start = built.start
    in_drought = [start + timedelta(days=18, hours=h) for h in range(0, 240, 7)]
    assert not any(built.market.available(spot, t) for t in in_drought)
    quiet = build(load_scenario(ROOT / "scenarios" / "quiet-quarter.yaml"))
    assert any(quiet.market.available(spot, t) for t in in_drought)  # the same trace otherwise


def test_zones_follow_their_own_trace_and_price_series() -> None:
    built = build(load_scenario(ROOT / "scenarios" / "quiet-quarter.yaml"))
    offerings = {o.id: o for o in built.catalog.offerings}
    az2 = offerings["aws/us-east-1/use1-az2/p3.2xlarge/spot"]
    other = offerings["aws/us-east-1/use1-az2/p3.8xlarge/spot"]
    data = ROOT / "tests" / "data"
    series = json.loads((data / "spot-prices" / "v100_spot_prices.json").read_text())
    trace = json.loads(
        (data / "spot-traces/availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json").read_text()
    )
    gap = trace["metadata"]["gap_seconds"]
    skip = 24 * 3600 // gap  # offset_hours: 24
    for tick in (0, 100, 5000, 20158 + 7):  # the last one after the trace wrapped around
        at = built.start + timedelta(seconds=tick * gap + 1)
        k = (tick + skip) % 20158
        price, source = built.market.price(az2, at)
        assert price == Decimal(repr(series["us-east-1a_v100_1"][k]))
        assert source.startswith("prices:us-east-1a_v100_1")
        assert built.market.available(az2, at) == (trace["data"][k] >= 1)
        assert built.market.price(other, at) == (
            Decimal(repr(other.usd_per_hour)),
            other.price.source,
        )


@pytest.mark.parametrize(
    ("zone", "field", "problem"),
    [
        ({"offerings": "gcp/*"}, "market.zones[0].offerings", "matches no offering"),
        (
            {"prices": {"file": "short.json"}},
            "market.zones[0].prices",
            "short.json has 3 prices; the trace has 20158 ticks",
        ),
    ],
)
def test_bad_zones_name_the_field(
    tmp_path: Path, zone: dict[str, object], field: str, problem: str
) -> None:
    (tmp_path / "short.json").write_text(json.dumps({"prices": [1.0, 1.1, 1.2]}))
    doc = yaml.safe_load(_scenario(tmp_path).read_text())
    doc["market"]["zones"] = [
        {"offerings": "aws/*/p3.2xlarge/spot", "trace": doc["market"]["trace"], **zone}
    ]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(BudgeteerError) as err:
        build(load_scenario(tmp_path / "s.yaml"))
    assert f"{field}: {problem}" in str(err.value)


def test_the_cli_compares_policies_as_json_and_writes_a_report(tmp_path: Path) -> None:
    path = _scenario(tmp_path, days=3)
    report = tmp_path / "report"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "budgeteer",
            "simulate",
            str(path),
            "--json",
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["scenario"] == "quiet-quarter"
    assert set(doc["policies"]) == {
        "default",
        "on-demand-fifo",
        "spot-greedy-fifo",
        "priority-quota",
    }
    keys = {
        "cost_usd",
        "on_demand_equivalent_usd",
        "budget_overrun_usd",
        "sla_met_fraction",
        "jobs_completed",
        "jobs_held_at_end",
        "preemptions",
        "waste_usd",
        "changeovers",
        "on_demand_hours",
        "startups",
        "startup_hours",
        "idle_hours",
    }
    for result in doc["policies"].values():
        assert keys <= set(result)
        assert set(result["sla_met_fraction"]) == {"P0", "P1", "P2", "P3"}
    od = doc["policies"]["on-demand-fifo"]
    assert od["preemptions"] == 0
    assert od["startups"] >= od["jobs_completed"] > 0  # each attempt boots its own instances
    assert od["startup_hours"] > 0
    assert {r["idle_hours"] for r in doc["policies"].values()} == {0.0}
    assert od["changeovers"] == {"to_spot": 0, "bridge_on_demand": 0, "to_on_demand": 0}
    assert od["on_demand_hours"] > default_hours(doc)
    assert od["cost_usd"] == pytest.approx(od["on_demand_equivalent_usd"])
    default = doc["policies"]["default"]
    assert default["on_demand_hours"] > 0  # spot is not always there
    assert default["budget_overrun_usd"] == 0
    assert default["cost_usd"] < od["cost_usd"]
    assert default["sla_met_fraction"]["P0"] in {None, 1.0}
    page = (report / "index.html").read_text()
    assert "quiet-quarter" in page
    assert {p.name for p in report.glob("*.png")} >= {
        "cost.png",
        "sla.png",
        "spend-default.png",
        "queue-default.png",
        "mix-default.png",
    }
    bad = subprocess.run(
        [sys.executable, "-m", "budgeteer", "simulate", str(path), "--policies", "cheapest"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert "--policies: unknown policy 'cheapest'" in bad.stderr


def default_hours(doc: dict[str, Any]) -> float:
    """On-demand instance-hours of the ``default`` policy in a ``simulate --json`` document."""
    return float(doc["policies"]["default"]["on_demand_hours"])


def test_startup_hours_are_the_boot_the_ledger_billed() -> None:
    from types import SimpleNamespace  # noqa: PLC0415

    from budgeteer.sim.metrics import _startups  # noqa: PLC0415
    from budgeteer.store.base import Attempt  # noqa: PLC0415

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    built = SimpleNamespace(
        catalog=SimpleNamespace(
            offerings=[
                SimpleNamespace(id="slow", startup_seconds=600.0),
                SimpleNamespace(id="warm", startup_seconds=0.0),
            ]
        ),
        end=t0 + timedelta(hours=10),
    )

    def attempt(n: int, offering: str, minutes: float | None, instances: int = 1) -> Attempt:
        ended = None if minutes is None else t0 + timedelta(minutes=minutes)
        return Attempt(n, "j", n, "sim", offering, "spot", (), t0, ended, instances=instances)

    got = _startups(
        [
            attempt(1, "slow", 60, instances=2),  # 2 × 10 min
            attempt(2, "slow", 4),  # stopped while booting: 4 min paid
            attempt(3, "warm", 30),  # no boot
            attempt(4, "slow", None),  # still running at the end: 10 min
        ],
        built,  # type: ignore[arg-type]
    )
    assert got == {
        "startups": 3,
        "startup_hours": round((20 + 4 + 10) / 60, 3),
        "warm_starts": 0,
        "idle_hours": 0.0,
        "idle_usd": 0.0,
        "pool_boots": 0,
    }
