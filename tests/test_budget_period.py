"""Budget periods in their time zones."""

from __future__ import annotations

from datetime import UTC, date, datetime

from budgeteer.domain.budget import Period, PeriodKind


def test_monthly_window_starts_at_local_midnight() -> None:
    # 23:30 UTC on 30 Nov is already 1 Dec in Berlin
    start, end = Period(PeriodKind.MONTHLY, "Europe/Berlin").window(
        datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    )
    assert start.isoformat() == "2026-12-01T00:00:00+01:00"
    assert end.isoformat() == "2027-01-01T00:00:00+01:00"


def test_quarterly_window_across_a_dst_change() -> None:
    start, end = Period(PeriodKind.QUARTERLY, "America/New_York").window(
        datetime(2026, 5, 10, tzinfo=UTC)
    )
    assert start.isoformat() == "2026-04-01T00:00:00-04:00"
    assert end.isoformat() == "2026-07-01T00:00:00-04:00"
    start, end = Period(PeriodKind.QUARTERLY, "UTC").window(datetime(2026, 12, 2, tzinfo=UTC))
    assert (start.month, end.year, end.month) == (10, 2027, 1)


def test_custom_period_repeats_from_its_anchor() -> None:
    period = Period(PeriodKind.CUSTOM, "UTC", anchor=date(2026, 11, 2), length_days=14)
    start, end = period.window(datetime(2026, 12, 2, 9, tzinfo=UTC))
    assert (start.date(), end.date()) == (date(2026, 11, 30), date(2026, 12, 14))
