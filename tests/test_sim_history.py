"""A scenario's ``market.history_days``: the simulated service starts as one that has watched its
spot markets that long — each spot offering's market book holds its trace's periods before the
start (what ``market_seeds:`` gives a deployment), while the market from the start on is the
very one it was without them."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import yaml

from budgeteer.core.spot.estimate import MarketHistory, periods_of
from budgeteer.domain.offering import Market
from budgeteer.errors import SpecErrors
from budgeteer.sim.scenario import build, load_scenario

ROOT = Path(__file__).parents[1]
TRACES = ROOT / "tests/data/spot-traces/availability/1-node/aws-02-15-2023"
AZ2 = "aws/us-east-1/use1-az2/p3.2xlarge/spot"  # quiet-quarter's zone on the us-east-1a trace


def _scenario(tmp_path: Path, name: str, **market: object) -> Path:
    """A bundled scenario with its paths made absolute and ``market`` fields changed."""
    doc = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())

    def here(p: str) -> str:
        return str(ROOT / p.removeprefix("../"))

    doc["market"]["trace"] = here(doc["market"]["trace"])
    for zone in doc["market"].get("zones", []):
        zone["trace"] = here(zone["trace"])
        if "prices" in zone:
            zone["prices"]["file"] = here(zone["prices"]["file"])
    doc["market"].update(market)
    path = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _ticks(trace: str) -> tuple[np.ndarray, float]:
    doc = json.loads((TRACES / trace).read_text())
    return np.asarray(doc["data"]) >= 1, doc["metadata"]["gap_seconds"]


@pytest.mark.parametrize("name", ["quiet-quarter", "spot-drought"])
def test_the_market_from_the_start_is_the_same_with_history(tmp_path: Path, name: str) -> None:
    """History only adds what came before: availability and prices from the start on (zones,
    the default trace, droughts) are those of the scenario without it."""
    plain = build(load_scenario(_scenario(tmp_path, name)))
    seeded = build(load_scenario(_scenario(tmp_path, name, history_days=30)))
    assert plain.histories == ()
    spot = [o for o in plain.catalog.offerings if o.market is Market.SPOT]
    probes = [plain.start + timedelta(minutes=m) for m in range(0, 90 * 24 * 60, 997)]
    for offering in (spot[0], spot[-1], *(o for o in spot if o.id == AZ2)):
        for at in probes:
            assert seeded.market.available(offering, at) == plain.market.available(offering, at)
            assert seeded.market.price(offering, at)[0] == plain.market.price(offering, at)[0]


def test_each_spot_offering_starts_with_its_own_traces_past(tmp_path: Path) -> None:
    """The zone's offering holds the periods of its own trace's ticks before the start (here
    24 h in, so the 30 days wrap around to the trace's end, as the replay repeats it); every
    other spot offering holds the default trace's; on-demand and on-prem hold none."""
    built = build(load_scenario(_scenario(tmp_path, "quiet-quarter", history_days=30)))
    by_id = {h.offering_id: h for h in built.histories}
    spot = {o.id for o in built.catalog.offerings if o.market is Market.SPOT}
    assert set(by_id) == spot

    def expected(trace: str) -> MarketHistory:
        ticks, gap = _ticks(trace)
        skip, before = 24 * 3600 // gap, int(30 * 86400 // gap)
        past = ticks[np.arange(skip - before, skip) % len(ticks)]
        return MarketHistory("x", periods_of(past, gap / 3600)[-1000:])

    zone, default = expected("us-east-1a_v100_1.json"), expected("us-east-1f_v100_1.json")
    assert zone.periods != default.periods
    assert by_id[AZ2].periods == zone.periods
    assert by_id["aws/us-east-1/use1-az1/g5.xlarge/spot"].periods == default.periods
    assert sum(p.hours for p in by_id[AZ2].periods) == pytest.approx(30 * 24, abs=195 / 3600)
    assert all(h.up is None and h.since is None for h in built.histories)  # nothing seen now


def test_the_simulated_service_starts_from_the_history(tmp_path: Path) -> None:
    """The store (and so the scheduler's market book) holds the history at the start: after a
    day the zone's market still begins with the seeded periods, and has added its own."""
    path = _scenario(tmp_path, "quiet-quarter", history_days=10)
    doc = yaml.safe_load(path.read_text())
    doc["days"] = 1
    path.write_text(yaml.safe_dump(doc))
    built = build(load_scenario(path))
    seeded = {h.offering_id: h for h in built.histories}[AZ2]
    run = built.run("default")
    after = {h.offering_id: h for h in run.store.markets()}[AZ2]
    assert after.periods[: len(seeded.periods)] == seeded.periods
    assert after.observations > 0  # and the day's own sightings on top


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("history_days", -1, "greater than or equal"),
        ("history_days", 400, "less"),
        ("offset_hours", float("inf"), "finite number"),  # was a ValueError in the replay
        ("trace", "a\0b.json", "holds a NUL byte"),
    ],
)
def test_bad_market_fields_name_the_field(
    tmp_path: Path, field: str, value: object, problem: str
) -> None:
    with pytest.raises(SpecErrors) as err:
        load_scenario(_scenario(tmp_path, "quiet-quarter", **{field: value}))
    [error] = err.value.errors
    assert error.field == f"market.{field}"
    assert problem in error.problem
