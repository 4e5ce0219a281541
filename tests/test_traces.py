"""Trace and price loading: the real files load; malformed ones are named precisely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budgeteer.traces import TraceError, load_price_series, load_trace

DATA = Path(__file__).parent / "data"
V100 = DATA / "spot-traces/availability/1-node/aws-02-15-2023/us-east-1f_v100_1.json"
R5 = DATA / "spot-traces/preemption/1-node/aws-04-19-2023/us-east-1b_intel_64.json"


def test_real_traces_load() -> None:
    v100 = load_trace(V100)
    assert (v100.gap_seconds, len(v100)) == (195, 20158)
    assert v100.prices is None
    assert 0.55 < sum(v100.available) / len(v100) < 0.62  # PROVENANCE: 0.591
    r5 = load_trace(R5)
    assert r5.prices is not None
    assert len(r5.prices) == len(r5) == 16090
    assert min(r5.prices) == pytest.approx(1.2754)


def test_price_series_load_by_key_and_by_file() -> None:
    keyed, gap = load_price_series(DATA / "spot-prices/v100_spot_prices.json", "us-east-1f_v100_1")
    assert len(keyed) == 20158
    assert gap is None
    assert 1.14 < min(keyed) < max(keyed) < 1.41
    single, gap = load_price_series(DATA / "spot-prices/v100_1node_prices/us-east-1f_v100_1.json")
    assert (len(single), gap) == (20158, 195)


@pytest.mark.parametrize(
    ("doc", "field", "problem"),
    [
        ({"metadata": {"gap_seconds": 60}, "data": [1, 0], "extra": 1}, "extra", "unknown key"),
        ({"metadata": {"gap_seconds": 60}}, "data", "missing"),
        ({"metadata": {}, "data": [1]}, "metadata.gap_seconds", "missing"),
        ({"metadata": {"gap_seconds": 0}, "data": [1]}, "metadata.gap_seconds", "positive"),
        ({"metadata": {"gap_seconds": -5}, "data": [1]}, "metadata.gap_seconds", "positive"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, -1]}, "data[1]", "≥ 0"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, "x"]}, "data[1]", "must be a number"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 0.5]}, "data[1]", "whole count"),
        ({"metadata": {"gap_seconds": 60}, "data": []}, "data", "non-empty"),
        (
            {"metadata": {"gap_seconds": 60}, "data": [1, 0], "prices": [1.0]},
            "prices",
            "has 1 values but data has 2",
        ),
        ({"metadata": {"gap_seconds": 60}, "data": [1], "prices": [-2.0]}, "prices[0]", "≥ 0"),
        ([1, 2, 3], "(root)", "must be an object"),
    ],
)
def test_malformed_traces_name_file_and_field(
    tmp_path: Path, doc: object, field: str, problem: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert err.value.file == str(path)
    assert err.value.field == field
    assert problem in err.value.problem


def test_unreadable_and_invalid_json(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="not valid JSON"):
        load_trace(bad)


def test_keyed_price_file_needs_a_known_key() -> None:
    with pytest.raises(TraceError, match="give a key"):
        load_price_series(DATA / "spot-prices/v100_spot_prices.json")
    with pytest.raises(TraceError, match="no such series"):
        load_price_series(DATA / "spot-prices/v100_spot_prices.json", "mars-1a_v100_1")
