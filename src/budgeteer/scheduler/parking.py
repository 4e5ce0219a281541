"""Parking (Kueue's inadmissible workloads): jobs held for budget or quota — and jobs
quarantined because planning them raised — are left out of planning until something happens
that could admit them, instead of being planned again every cycle.

Wake rules:

- **an attempt ends** of a job covered by a budget that blocks a parked job (or, held for
  quota, of the same team): its spend and capacity changed;
- **the budgets change** (limits, thresholds): every parked job;
- **a spot price falls** far enough for a budget hold's cheapest plan to fit its room — a
  plan costs hours × price + egress, so no plan can cost less than the cheapest at park time
  × the largest fall of any spot price since; a job whose room is smaller stays parked;
- **its time comes**: the hold's own wake time (a budget period reset), the job's deadline,
  or at the latest ``park_seconds`` after parking (a safety net).

Between those events a parked job's room only shrinks and its cheapest deadline-meeting plan
only gets dearer, which is why the rules are enough. The lot is the loop thread's alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from budgeteer.core import Hold, HoldReason
from budgeteer.domain.budget import Budget
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Market, Offering

_NEVER = datetime.max.replace(tzinfo=UTC)
#: Hold reasons whose jobs are parked.
PARKED_REASONS = frozenset({HoldReason.BUDGET, HoldReason.QUOTA, HoldReason.INVALID})


@dataclass(frozen=True, slots=True)
class Parked:
    """A held job left out of planning until ``until``, or until an attempt ends that holds
    one of ``keys`` (``budget:ID`` covering it, ``team:NAME`` for quota); a budget hold also
    wakes when spot prices fall far enough from ``prices`` (those of the plan that held it) for
    its ``cheapest_usd`` plan to fit ``room_usd``."""

    until: datetime
    keys: frozenset[str]
    prices: tuple[Offering, ...] | None = None
    cheapest_usd: Decimal = Decimal(0)
    room_usd: Decimal = Decimal(0)


class ParkingLot:
    """The parked jobs and their wake rules (see the module docstring)."""

    def __init__(self, park_seconds: float) -> None:
        self.park_seconds = park_seconds  # 0: nothing is parked, every hold planned each cycle
        self._parked: dict[str, Parked] = {}
        self._next_due = _NEVER  # the earliest time a parked job is due to be planned

    def ids(self) -> frozenset[str]:
        """The jobs parked now."""
        return frozenset(self._parked)

    def park(self, hold: Hold, job: Job, now: datetime, prices: tuple[Offering, ...]) -> None:
        """Park ``job`` for ``hold`` (a hold of :data:`PARKED_REASONS`), made at ``prices``."""
        if self.park_seconds <= 0 or hold.reason not in PARKED_REASONS:
            return
        until = now + timedelta(seconds=self.park_seconds)
        for t in (hold.wake_at, job.deadline):
            if t is not None and now < t < until:
                until = t
        if hold.budget is not None:
            block = hold.budget
            parked = Parked(
                until,
                frozenset(f"budget:{b}" for b in block.blocking),
                prices,
                block.cheapest_usd,
                block.room_usd,
            )
        elif hold.reason is HoldReason.QUOTA:
            parked = Parked(until, frozenset({f"team:{job.team}"}))
        else:  # quarantined: nothing but time wakes it
            parked = Parked(until, frozenset())
        self._parked[job.id] = parked
        self._next_due = min(self._next_due, until)

    def wake_due(self, now: datetime) -> None:
        """Wake the jobs whose time came."""
        if self._parked and now >= self._next_due:
            self._parked = {j: p for j, p in self._parked.items() if p.until > now}
            self._next_due = min((p.until for p in self._parked.values()), default=_NEVER)

    def wake_all(self) -> None:
        """The budgets changed: plan every parked job again."""
        self._parked.clear()

    def wake_for(self, ended: Job, budgets: Iterable[Budget]) -> None:
        """An attempt of ``ended`` ended: wake the jobs it could make room for — held by a
        budget that covers it, or held for quota in its team."""
        if not self._parked:
            return
        keys = {f"team:{ended.team}"} | {f"budget:{b.id}" for b in budgets if b.covers(ended)}
        self._parked = {j: p for j, p in self._parked.items() if not p.keys & keys}

    def wake_on_prices(self, in_force: tuple[Offering, ...]) -> None:
        """Spot prices fell (``in_force`` are the prices now): wake the budget holds whose
        cheapest plan could fit now (see the module docstring)."""
        now_price = {o.id: o.usd_per_hour for o in in_force}
        falls: list[tuple[tuple[Offering, ...], Decimal]] = []  # per price list seen at parking
        woken: list[str] = []
        for job_id, p in self._parked.items():
            if p.prices is None:  # a quota hold or a quarantine: prices do not matter
                continue
            ratio = next((r for prices, r in falls if prices is p.prices), None)
            if ratio is None:
                ratio = _largest_fall(p.prices, now_price)
                falls.append((p.prices, ratio))
            if p.cheapest_usd * ratio <= p.room_usd:
                woken.append(job_id)
        for job_id in woken:
            del self._parked[job_id]


def _largest_fall(prices: tuple[Offering, ...], now_price: dict[str, float]) -> Decimal:
    """The smallest ratio of a spot price now to its price in ``prices`` (1 when none)."""
    ratios = [
        Decimal(repr(now_price[o.id])) / Decimal(repr(o.usd_per_hour))
        for o in prices
        if o.market is Market.SPOT and o.usd_per_hour > 0 and o.id in now_price
    ]
    return min(ratios, default=Decimal(1))
