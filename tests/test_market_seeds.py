"""Market seeds: a spot offering's recorded availability, put in the store before the service
has seen the market, so the decider starts from weeks of it instead of the prior alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from api_world import World
from budgeteer.catalog import load_catalog
from budgeteer.config import load_config
from budgeteer.core.spot.estimate import MarketHistory, Period, estimate_availability, periods_of
from budgeteer.domain.offering import Market
from budgeteer.errors import SpecError
from budgeteer.service.wiring import build
from budgeteer.spec.errors import SpecErrors
from test_cli import budgeteer

GAP_SECONDS = 300
CHANGEOVER_HOURS = 0.25


def _offering(market: Market) -> str:
    return next(o.id for o in load_catalog(None).offerings if o.market is market)


def _pattern(days: float) -> list[int]:
    """Spot up 7 h, down 3 h, over and over (on 5-minute ticks): long outages, which the prior
    (half-hour outages) does not expect."""
    ticks = int(days * 24 * 3600 / GAP_SECONDS)
    cycle = [1] * (7 * 12) + [0] * (3 * 12)
    return (cycle * (ticks // len(cycle) + 1))[:ticks]


def _trace(folder: Path, name: str, data: Any) -> Path:
    path = folder / name
    path.write_text(json.dumps({"metadata": {"gap_seconds": GAP_SECONDS}, "data": data}))
    return path


def _config(tmp_path: Path, seeds: list[dict[str, Any]]) -> Path:
    path = tmp_path / "budgeteer.yaml"
    path.write_text(yaml.safe_dump({"store": "sqlite:///state.db", "market_seeds": seeds}))
    return path


def test_a_seeded_market_starts_the_decider_where_the_replay_of_its_trace_would(
    tmp_path: Path,
) -> None:
    spot = _offering(Market.SPOT)
    data = _pattern(20)
    _trace(tmp_path, "zone.json", data)
    svc = build(*load_config(_config(tmp_path, [{"offering": spot, "trace": "zone.json"}])))
    sched = svc.scheduler()
    history = sched.markets.history(spot)
    series = np.array(data) >= 1
    g = GAP_SECONDS / 3600
    assert history.periods == periods_of(series, g)
    assert (history.up, history.since, history.observations) == (None, None, 0)
    # the service's estimate is the replay's for the same series (20 days: all in the window)
    ours = history.estimate(None, g, CHANGEOVER_HOURS)
    replay = estimate_availability(series, g, 1, CHANGEOVER_HOURS)
    assert np.array_equal(ours.transition, replay.transition)
    # and it knows the outages are long: a fresh one is expected to last hours, where the prior
    # alone says about half an hour
    prior = MarketHistory(spot).estimate(None, g, CHANGEOVER_HOURS)
    assert ours.expected_outage_steps(0.0) * g > 2.0
    assert prior.expected_outage_steps(0.0) * g < 1.0
    # kept in the store: a restarted service reads it back, the trace no longer needed
    (tmp_path / "zone.json").unlink()
    again = build(*load_config(tmp_path / "budgeteer.yaml")).scheduler()
    assert again.markets.history(spot).periods == history.periods


def test_what_the_service_has_seen_is_never_replaced_by_a_seed(tmp_path: Path) -> None:
    spot = _offering(Market.SPOT)
    _trace(tmp_path, "zone.json", _pattern(10))
    svc = build(*load_config(_config(tmp_path, [{"offering": spot, "trace": "zone.json"}])))
    seen = MarketHistory(spot, (Period(True, 5.0, True), Period(False, 0.5, True)), observations=9)
    svc.store.put_market(seen)
    assert svc.seed_markets(svc.catalog.offerings) == 0
    assert svc.scheduler().markets.history(spot).periods == seen.periods
    assert {h.offering_id: h.periods for h in svc.store.markets()} == {spot: seen.periods}


def test_a_long_recording_keeps_its_newest_periods(tmp_path: Path) -> None:
    spot = _offering(Market.SPOT)
    flicker = [1, 0] * 1500  # 3,000 periods
    _trace(tmp_path, "zone.json", flicker)
    svc = build(*load_config(_config(tmp_path, [{"offering": spot, "trace": "zone.json"}])))
    assert svc.seed_markets(svc.catalog.offerings) == 1
    (history,) = svc.store.markets()
    assert len(history.periods) == 1000
    assert history.periods[-1] == Period(False, GAP_SECONDS / 3600, False)  # the last: censored


@pytest.mark.parametrize(
    ("seeds", "field", "problem"),
    [
        (
            [{"offering": "aws/nowhere-1/*/p9.huge/spot", "trace": "good.json"}],
            "market_seeds[0].offering",
            "no offering 'aws/nowhere-1/*/p9.huge/spot'",
        ),
        (
            [{"offering": "ON_DEMAND", "trace": "good.json"}],
            "market_seeds[0].offering",
            "only spot offerings have a market to seed",
        ),
        (
            [{"offering": "SPOT", "trace": "missing.json"}],
            "market_seeds[0].trace",
            "(file): cannot read",
        ),
        (
            [{"offering": "SPOT", "trace": "bad.json"}],
            "market_seeds[0].trace",
            "data[2]: must be a whole count",
        ),
        (  # the second is bad: the first is not written either
            [
                {"offering": "SPOT", "trace": "good.json"},
                {"offering": "SPOT2", "trace": "not-json.json"},
            ],
            "market_seeds[1].trace",
            "(file): not valid JSON",
        ),
    ],
)
def test_a_bad_seed_names_its_field_and_nothing_is_written(
    tmp_path: Path, seeds: list[dict[str, Any]], field: str, problem: str
) -> None:
    spots = [o.id for o in load_catalog(None).offerings if o.market is Market.SPOT]
    names = {"SPOT": spots[0], "SPOT2": spots[1], "ON_DEMAND": _offering(Market.ON_DEMAND)}
    for seed in seeds:
        seed["offering"] = names.get(seed["offering"], seed["offering"])
    _trace(tmp_path, "good.json", _pattern(2))
    _trace(tmp_path, "bad.json", [1, 0, 0.5])
    (tmp_path / "not-json.json").write_text("{data: [1")
    svc = build(*load_config(_config(tmp_path, seeds)))
    with pytest.raises(SpecError) as err:
        svc.scheduler()
    assert err.value.field == field
    assert problem in err.value.problem
    assert svc.store.markets() == []


def test_an_offering_seeded_twice_is_refused_at_load(tmp_path: Path) -> None:
    spot = _offering(Market.SPOT)
    path = _config(
        tmp_path, [{"offering": spot, "trace": "a.json"}, {"offering": spot, "trace": "b.json"}]
    )
    with pytest.raises(SpecErrors) as err:
        load_config(path)
    assert f"market_seeds[1].offering: {spot!r} is seeded already (market_seeds[0])" in str(
        err.value
    )


def test_the_api_shows_a_seeded_market_as_recorded_and_not_yet_seen(world: World) -> None:
    spot = next(o for o in world.ctx.catalog.offerings if o.market is Market.SPOT)
    series = np.array(_pattern(3)) >= 1
    world.store.put_market(MarketHistory.recorded(spot.id, series, GAP_SECONDS / 3600))
    rows = world.http.get("/v1/offerings", headers=world.auth(world.growth)).json()["offerings"]
    (seeded,) = [o for o in rows if o["spot_market"] is not None]
    market = seeded["spot_market"]
    assert (seeded["id"], market["up"], market["since"], market["sightings"]) == (
        spot.id,
        None,
        None,
        0,
    )
    assert market["periods"] == len(periods_of(series, GAP_SECONDS / 3600))
    assert market["mean_uptime_hours"] == pytest.approx(7.0)  # the complete ones
    assert market["mean_outage_hours"] == pytest.approx(3.0)
    # no outage of the recording ended young: a fresh one ends more slowly than the prior alone
    # says (2 an hour)
    assert market["hazard_per_hour"]["down_to_up"]["age>=0h"] < 1.5


def test_a_market_exported_by_one_deployment_seeds_another(tmp_path: Path) -> None:
    spot = _offering(Market.SPOT)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "budgeteer.yaml").write_text("store: sqlite:///state.db\n")
    learned = MarketHistory(
        spot,
        (Period(False, 1.0, False), Period(True, 6.5, True), Period(False, 2.25, True)),
        up=True,
        since=datetime.now(UTC) - timedelta(minutes=30),
        seen_start=True,
        observations=40,
    )
    build(*load_config(first / "budgeteer.yaml")).store.put_market(learned)

    trace = tmp_path / "exported.json"
    done = budgeteer(
        "markets", "export", spot, "--out", str(trace), "--config", str(first / "budgeteer.yaml")
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(trace.read_text())["metadata"]["gap_seconds"] == 60

    _config(second, [{"offering": spot, "trace": str(trace)}])
    seeded = build(*load_config(second / "budgeteer.yaml")).scheduler().markets.history(spot)
    assert seeded.periods[:3] == learned.periods  # the first censored, the others complete
    now_up = seeded.periods[3]
    assert (now_up.up, now_up.complete) == (True, False)  # the present: cut at the export
    assert now_up.hours == pytest.approx(0.5, abs=3 / 60)


def test_exporting_a_market_the_store_has_not_seen_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "budgeteer.yaml").write_text("store: sqlite:///state.db\n")
    out = tmp_path / "never.json"
    done = budgeteer(
        "markets",
        "export",
        "aws/nowhere-1/*/p9.huge/spot",
        "--out",
        str(out),
        "--config",
        str(tmp_path / "budgeteer.yaml"),
    )
    assert done.returncode == 2
    assert "OFFERING: no market history for 'aws/nowhere-1/*/p9.huge/spot'" in done.stderr
    assert not out.exists()
