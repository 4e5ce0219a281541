"""Data-transfer prices: what moving a job's dataset from where it lives to a venue costs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class EgressRate:
    """One row of an egress table: a volume band ``[tier_start_gb, tier_end_gb)`` and its price.

    ``scope`` is ``internet`` (leaving the provider), ``inter_region`` or ``intra_region``.
    """

    provider: str
    scope: str
    tier_start_gb: float
    tier_end_gb: float | None
    usd_per_gb: float


@dataclass(frozen=True, slots=True)
class EgressTable:
    """Egress prices per provider and scope.

    Transfers are priced per transfer across the volume bands (the first GB at the first band's
    price, and so on). Where a scope has several flat rows (e.g. AWS inter-region 0.01 for one
    region pair and 0.02 for the others) the highest is used: an estimate should not flatter.
    """

    rates: tuple[EgressRate, ...]

    def cost_usd(self, source: str, venue: str, size_gb: float) -> float:
        """Cost of moving ``size_gb`` from ``source`` to ``venue`` (both ``provider/region``)."""
        if size_gb <= 0 or source == venue:
            return 0.0
        src_provider = source.split("/", 1)[0]
        dst_provider = venue.split("/", 1)[0]
        scope = "inter_region" if src_provider == dst_provider else "internet"
        rows = [r for r in self.rates if r.provider == src_provider and r.scope == scope]
        if not rows:
            return 0.0
        return _banded_cost(rows, size_gb)

    def cost_usd_many(self, source: str, venue: str, sizes_gb: FloatArray) -> FloatArray:
        """:meth:`cost_usd` for an array of transfer sizes between the same two places."""
        src_provider = source.split("/", 1)[0]
        dst_provider = venue.split("/", 1)[0]
        scope = "inter_region" if src_provider == dst_provider else "internet"
        rows = [r for r in self.rates if r.provider == src_provider and r.scope == scope]
        total = np.zeros(len(sizes_gb))
        if source == venue or not rows:
            return total
        for (start, end), price in _bands(rows):
            width = math.inf if end is None else end - start
            total += np.clip(sizes_gb - start, 0.0, width) * price
        return total


def _bands(rows: list[EgressRate]) -> list[tuple[tuple[float, float | None], float]]:
    """Volume bands in order; flat rows covering the same band collapse to their maximum."""
    bands: dict[tuple[float, float | None], float] = {}
    for r in rows:
        key = (r.tier_start_gb, r.tier_end_gb)
        bands[key] = max(bands.get(key, 0.0), r.usd_per_gb)
    return sorted(bands.items(), key=lambda kv: kv[0][0])


def _banded_cost(rows: list[EgressRate], size_gb: float) -> float:
    """Sum ``size_gb`` over the volume bands."""
    total = 0.0
    for (start, end), price in _bands(rows):
        if size_gb <= start:
            break
        upper = size_gb if end is None else min(size_gb, end)
        total += (upper - start) * price
    return total
