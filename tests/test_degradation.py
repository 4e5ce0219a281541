"""The Page-Hinkley detector: the same detections as river's on the same streams; a mean shift at
a known point fires within a bounded delay and never before it (seeded)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeteer.triggers.degradation import PageHinkley, detections
from engines import engine_missing


def _river(values: np.ndarray, **params: object) -> list[int]:
    try:
        from river.drift import PageHinkley as RiverPH  # noqa: PLC0415
    except ImportError:
        engine_missing("river is not installed (pip install 'budgeteer[drift]')")
    ph = RiverPH(**params)  # type: ignore[arg-type]
    out = []
    for i, x in enumerate(values):
        ph.update(float(x))
        if ph.drift_detected:
            out.append(i)
    return out


@pytest.mark.parametrize("mode", ["up", "down", "both"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_detections_equal_rivers_on_the_same_stream(mode: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = np.concatenate(
        [rng.normal(0.8, 0.05, 500), rng.normal(0.7, 0.05, 500), rng.normal(0.85, 0.05, 500)]
    )
    params = {"min_instances": 30, "delta": 0.005, "threshold": 1.0, "mode": mode}
    ours = detections(values, PageHinkley(**params))  # type: ignore[arg-type]
    assert ours == _river(values, **params)
    assert ours  # the stream does shift


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=200, max_value=800))
def test_a_fall_fires_within_a_bounded_delay_and_not_before(seed: int, at: int) -> None:
    """An AUC at 0.80 ± 0.01 drops to 0.70 at ``at``: watched for falls, the detector fires
    after the drop, within 100 values, and never before it."""
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.normal(0.80, 0.01, at), rng.normal(0.70, 0.01, 400)])
    fired = detections(
        values, PageHinkley(min_instances=30, delta=0.005, threshold=1.0, mode="down")
    )
    assert fired
    assert fired[0] >= at
    assert fired[0] - at <= 100


def test_thresholds_at_their_edges() -> None:
    # a constant stream never fires; the same stream with a tiny threshold does after a step
    flat = np.full(200, 0.8)
    assert detections(flat, PageHinkley(threshold=1e-9)) == []
    step = np.concatenate([flat, np.full(50, 0.6)])
    assert (
        detections(step, PageHinkley(threshold=1e-9, mode="up")) == []
    )  # a fall, watched for rises
    assert detections(step, PageHinkley(threshold=1e-9, mode="down"))[0] == 200
    # nothing before min_instances values
    assert all(
        i >= 29
        for i in detections(
            np.concatenate([np.full(10, 0.8), np.full(40, 0.1)]), PageHinkley(threshold=1e-9)
        )
    )
