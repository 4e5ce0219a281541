"""Spot availability traces: what a zone's spot market offered, tick by tick."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SpotTrace:
    """A spot availability trace on a fixed grid of ``gap_seconds``.

    ``available[i]`` is the number of spot instances obtainable at tick ``i`` (≥ 1 means a spot
    instance can be had). ``prices``, when present, is the spot price per tick (USD/hour), the
    same length as ``available``.
    """

    name: str
    gap_seconds: int
    available: tuple[int, ...]
    prices: tuple[float, ...] | None = None

    @property
    def gap_hours(self) -> float:
        """Tick length in hours."""
        return self.gap_seconds / 3600.0

    def __len__(self) -> int:
        return len(self.available)
