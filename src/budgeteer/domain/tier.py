"""Priority tiers: P0 (critical) is served first, P3 (exploratory) last."""

from __future__ import annotations

from enum import IntEnum


class Tier(IntEnum):
    """A job's priority tier. Lower value = more important; sorts naturally in queue keys."""

    P0 = 0
    P1 = 1
    P2 = 2
    P3 = 3

    @classmethod
    def parse(cls, text: str) -> Tier:
        """Parse ``"P0"`` … ``"P3"`` (case-insensitive); raises ``KeyError`` otherwise."""
        return cls[text.strip().upper()]
