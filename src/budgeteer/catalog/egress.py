"""Data-transfer prices: what moving a job's dataset from where it lives to a venue costs."""

from __future__ import annotations

from dataclasses import dataclass


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


def _banded_cost(rows: list[EgressRate], size_gb: float) -> float:
    """Sum ``size_gb`` over volume bands; flat overlapping rows collapse to their maximum."""
    bands: dict[tuple[float, float | None], float] = {}
    for r in rows:
        key = (r.tier_start_gb, r.tier_end_gb)
        bands[key] = max(bands.get(key, 0.0), r.usd_per_gb)
    total = 0.0
    for (start, end), price in sorted(bands.items(), key=lambda kv: kv[0][0]):
        if size_gb <= start:
            break
        upper = size_gb if end is None else min(size_gb, end)
        total += (upper - start) * price
    return total
