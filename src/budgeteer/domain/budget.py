"""Budgets: a money limit for a scope over a calendar period, with per-tier hold thresholds."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import StrEnum
from zoneinfo import ZoneInfo

from budgeteer.domain.job import Job
from budgeteer.domain.tier import Tier


class ScopeKind(StrEnum):
    """What a budget covers: every job, one team's jobs, or one project's jobs."""

    ORGANISATION = "organisation"
    TEAM = "team"
    PROJECT = "project"


@dataclass(frozen=True, slots=True)
class Scope:
    """A budget's scope, e.g. ``Scope(TEAM, "growth")``."""

    kind: ScopeKind
    name: str

    def covers(self, team: str, project: str | None) -> bool:
        """True if spending by ``team`` on ``project`` counts against this scope."""
        if self.kind is ScopeKind.ORGANISATION:
            return True
        if self.kind is ScopeKind.TEAM:
            return team == self.name
        return project == self.name


class PeriodKind(StrEnum):
    """Calendar months, calendar quarters, or a custom repeating window."""

    MONTHLY = "monthly"
    QUARTERLY = "quarterly"
    CUSTOM = "custom"


@dataclass(frozen=True, slots=True)
class Period:
    """A budget period in a time zone.

    Months and quarters start at local midnight on their first day. A ``custom`` period starts at
    ``anchor`` (local midnight) and repeats every ``length_days``.
    """

    kind: PeriodKind = PeriodKind.MONTHLY
    timezone: str = "UTC"
    anchor: date | None = None
    length_days: int | None = None

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        """The ``[start, end)`` window containing ``now`` (aware datetimes in the period's zone)."""
        last = _LAST_WINDOW.get(self)  # every cycle asks again, mostly within the same window
        if last is not None and last[0] <= now < last[1]:
            return last
        window = self._window(now)
        if len(_LAST_WINDOW) > 1024:
            _LAST_WINDOW.clear()
        _LAST_WINDOW[self] = window
        return window

    def _window(self, now: datetime) -> tuple[datetime, datetime]:
        tz = ZoneInfo(self.timezone)
        local = now.astimezone(tz)
        if self.kind is PeriodKind.CUSTOM:
            assert self.anchor is not None
            assert self.length_days is not None
            start_day = self.anchor + timedelta(
                days=((local.date() - self.anchor).days // self.length_days) * self.length_days
            )
            end_day = start_day + timedelta(days=self.length_days)
        else:
            months = 1 if self.kind is PeriodKind.MONTHLY else 3
            first_month = local.month - (local.month - 1) % months
            start_day = date(local.year, first_month, 1)
            y, m = divmod(first_month - 1 + months, 12)
            end_day = date(local.year + y, m + 1, 1)
        return (
            datetime.combine(start_day, time(), tzinfo=tz),
            datetime.combine(end_day, time(), tzinfo=tz),
        )


#: Each period's latest window (a window is a pure function of the period and the time).
_LAST_WINDOW: dict[Period, tuple[datetime, datetime]] = {}

#: Default share of the limit each tier may bring projected spend up to (P0: the whole limit,
#: plus the emergency reserve).
DEFAULT_THRESHOLDS: dict[Tier, Decimal] = {
    Tier.P0: Decimal("1.00"),
    Tier.P1: Decimal("0.95"),
    Tier.P2: Decimal("0.80"),
    Tier.P3: Decimal("0.70"),
}


@dataclass(frozen=True, slots=True)
class Budget:
    """A spending limit for a scope and period.

    A job of tier ``t`` is admitted only while accrued + committed + its own expected cost stays
    within ``thresholds[t] × limit_usd``; P0 may go beyond the limit into
    ``emergency_reserve_usd`` (and is flagged when it does).
    """

    id: str
    scope: Scope
    limit_usd: Decimal
    period: Period = field(default_factory=Period)
    thresholds: tuple[tuple[Tier, Decimal], ...] = tuple(DEFAULT_THRESHOLDS.items())
    emergency_reserve_usd: Decimal = Decimal(0)

    def covers(self, job: Job) -> bool:
        """True if ``job``'s spending counts against this budget."""
        return self.scope.covers(job.team, job.project)

    def threshold(self, tier: Tier) -> Decimal:
        """The fraction of the limit ``tier`` may bring projected spend up to."""
        return dict(self.thresholds).get(tier, DEFAULT_THRESHOLDS[tier])

    def allowance_usd(self, tier: Tier) -> Decimal:
        """How much projected spend (in USD) a job of ``tier`` may bring this budget up to."""
        base = self.threshold(tier) * self.limit_usd
        if tier is Tier.P0:
            return base + self.emergency_reserve_usd
        return base


@dataclass(frozen=True, slots=True)
class SpendRecord:
    """Money actually spent (accrued), attributed to a team and project, at a point in time."""

    team: str
    amount_usd: Decimal
    at: datetime
    project: str | None = None
    job_id: str | None = None
