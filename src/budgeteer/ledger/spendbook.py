"""The ledger, folded as it grows, into the few spend records a plan needs — exactly.

A long-lived service's ledger grows without bound, and handing every entry to every cycle makes
planning slower day by day. The core reads spend for two things only (``core/admit.py``,
``core/order.py``): each budget's accrued money in its current period (which records fall in
``[start, end)``), and each team's decayed usage ``Σ aᵢ · 2^(−(now − tᵢ)/h)``.

So entries of one (team, project) are merged while they fall between the same two *boundaries*
— the starts and ends of every budget's current period — into one record whose amount is the
exact sum and whose time ``t*`` is the decay-weighted mean ``t* = h·log2(Σ aᵢ 2^(tᵢ/h) / Σ aᵢ)``:
then ``A · 2^(−(now − t*)/h)`` equals the sum of the parts' decayed amounts, and ``t*`` lies
between the parts' times (it is clamped there), so it falls in the same periods as every part.
Boundaries only ever disappear (an old period start) or appear beyond every recorded time (a new
period end), so merged records never need splitting. Records are placed by their time — the
entry's end, as the core reads the ledger.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from budgeteer.domain.budget import Budget, SpendRecord


@dataclass
class _Bucket:
    amount_usd: Decimal
    weight: float  # Σ aᵢ 2^((tᵢ − origin)/h)
    first: datetime
    last: datetime


class SpendBook:
    """Incremental, exact compaction of the ledger into spend records (see the module
    docstring). ``origin`` anchors the exponent (any time near the ledger's start)."""

    def __init__(self, half_life_seconds: float, origin: datetime) -> None:
        self.half_life = half_life_seconds
        self.origin = origin
        self._bounds: list[datetime] = []
        self._buckets: dict[tuple[str, str | None, int], _Bucket] = {}

    def _exp(self, at: datetime) -> float:
        return float(2.0 ** ((at - self.origin).total_seconds() / self.half_life))

    def add(self, team: str, project: str | None, amount_usd: Decimal, at: datetime) -> None:
        """Record spend of ``amount_usd`` by (team, project) at ``at`` (an entry's end)."""
        key = (team, project, bisect.bisect_right(self._bounds, at))
        weight = float(amount_usd) * self._exp(at)
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = _Bucket(amount_usd, weight, at, at)
            return
        bucket.amount_usd += amount_usd
        bucket.weight += weight
        bucket.first = min(bucket.first, at)
        bucket.last = max(bucket.last, at)

    def set_boundaries(self, budgets: Sequence[Budget], now: datetime) -> bool:
        """Re-cut at the starts and ends of every budget's period at ``now`` (merging what the
        dropped boundaries separated). ``False`` — nothing changed — when a new boundary would
        split merged spend (a budget added with a period that began in the past): then the
        book must be filled again from the ledger."""
        bounds = sorted({t for b in budgets for t in b.period.window(now)})
        if bounds == self._bounds:
            return True
        for bucket in self._buckets.values():
            if bisect.bisect_right(bounds, bucket.first) != bisect.bisect_right(
                bounds, bucket.last
            ):
                return False
        merged: dict[tuple[str, str | None, int], _Bucket] = {}
        for (team, project, _), bucket in self._buckets.items():
            key = (team, project, bisect.bisect_right(bounds, bucket.first))
            have = merged.get(key)
            if have is None:
                merged[key] = _Bucket(bucket.amount_usd, bucket.weight, bucket.first, bucket.last)
            else:
                have.amount_usd += bucket.amount_usd
                have.weight += bucket.weight
                have.first = min(have.first, bucket.first)
                have.last = max(have.last, bucket.last)
        self._bounds = bounds
        self._buckets = merged
        return True

    def records(self) -> tuple[SpendRecord, ...]:
        """The compacted spend, one record per (team, project, stretch between boundaries)."""
        out = []
        for (team, project, _), b in sorted(
            self._buckets.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2])
        ):
            out.append(SpendRecord(team, b.amount_usd, self._time(b), project, None))
        return tuple(out)

    def _time(self, b: _Bucket) -> datetime:
        amount = float(b.amount_usd)
        if amount <= 0 or b.weight <= 0 or b.first == b.last:
            return b.last
        seconds = self.half_life * math.log2(b.weight / amount)
        at = self.origin + timedelta(seconds=seconds)
        return min(max(at, b.first), b.last)


def fill(book: SpendBook, entries: Iterable[tuple[str, str | None, Decimal, datetime]]) -> None:
    """Add many (team, project, amount, at) entries."""
    for team, project, amount, at in entries:
        book.add(team, project, amount, at)
