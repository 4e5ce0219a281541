"""Bids and what the price history says about a spot market.

The bid (the maximum price a job accepts) is a quantile of recent spot prices, scaled by tier —
critical work bids higher to keep its instance — and never above the on-demand price (above it,
on-demand is simply better). From the same history: the probability of acquiring an instance at
that bid (share of recent ticks where spot was available at or below it) and the interruption
rate (how often per available hour it stopped being so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from budgeteer.domain.tier import Tier

#: (price quantile, scale) per tier.
DEFAULT_BID_POLICY: Mapping[Tier, tuple[float, float]] = {
    Tier.P0: (0.99, 1.20),
    Tier.P1: (0.95, 1.10),
    Tier.P2: (0.90, 1.05),
    Tier.P3: (0.75, 1.00),
}


@dataclass(frozen=True, slots=True)
class Bid:
    """A bid with the market estimates behind it."""

    max_usd_per_hour: float
    acquisition_probability: float
    interruptions_per_hour: float
    capped_at_on_demand: bool


def bid_for(
    tier: Tier,
    prices: NDArray[np.float64],
    available: NDArray[np.bool_],
    gap_hours: float,
    on_demand_usd_per_hour: float,
    policy: Mapping[Tier, tuple[float, float]] = DEFAULT_BID_POLICY,
) -> Bid:
    """The bid for ``tier`` from recent ``prices`` and ``available`` (same length, oldest first)."""
    if len(prices) == 0 or len(prices) != len(available):
        raise ValueError("prices and availability must be non-empty and of equal length")
    quantile, scale = policy[tier]
    raw = float(np.quantile(prices, quantile)) * scale
    bid = min(raw, on_demand_usd_per_hour)
    usable = available & (prices <= bid + 1e-12)
    up_hours = float(usable[:-1].sum()) * gap_hours
    drops = int((usable[:-1] & ~usable[1:]).sum())
    return Bid(
        max_usd_per_hour=bid,
        acquisition_probability=float(usable.mean()),
        interruptions_per_hour=drops / up_hours if up_hours > 0 else float("inf"),
        capped_at_on_demand=raw > on_demand_usd_per_hour,
    )
