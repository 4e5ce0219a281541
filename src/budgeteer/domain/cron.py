"""Cron expressions (the five standard fields) for scheduled retrains: minute, hour, day of
month, month, day of week (0 or 7 = Sunday). Each field takes ``*``, numbers, ranges ``a-b``,
lists ``a,b`` and steps ``*/n`` or ``a-b/n``. As in cron, when both day fields are restricted a
day matches if either does. Times are UTC."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)


class CronError(ValueError):
    """A malformed cron expression; the message names the field."""


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronError(f"{name}: bad step {step_text!r}")
            step = int(step_text)
        if base == "*":
            lo, hi = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            if not (a.isdigit() and b.isdigit()):
                raise CronError(f"{name}: bad range {base!r}")
            lo, hi = int(a), int(b)
        elif base.isdigit():
            lo = hi = int(base)
            if step_text:
                hi = high
        else:
            raise CronError(f"{name}: bad value {base!r}")
        if not low <= lo <= hi <= high:
            raise CronError(f"{name}: {base!r} is outside {low}-{high}")
        values.update(range(lo, hi + 1, step))
    return frozenset(values)


def parse_cron(expr: str) -> tuple[frozenset[int], ...]:
    """The five fields as sets of values; raises :class:`CronError`."""
    parts = expr.split()
    if len(parts) != 5:
        raise CronError(f"expected 5 fields (minute hour day month weekday), got {len(parts)}")
    fields = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
    if 7 in fields[4]:
        fields[4] = fields[4] | {0}
    return tuple(fields)


def cron_times(expr: str, start: datetime, end: datetime) -> Iterator[datetime]:
    """Every time in ``[start, end)`` the expression fires (UTC, minute resolution)."""
    minutes, hours, days, months, weekdays = parse_cron(expr)
    any_day = len(days) == 31
    any_weekday = len(weekdays) >= 7
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    while day < end:
        weekday = (day.weekday() + 1) % 7  # cron: 0 = Sunday
        by_day, by_weekday = day.day in days, weekday in weekdays
        if any_day and any_weekday:
            match = True
        elif any_day:
            match = by_weekday
        elif any_weekday:
            match = by_day
        else:
            match = by_day or by_weekday
        if day.month in months and match:
            for h in sorted(hours):
                for m in sorted(minutes):
                    at = day.replace(hour=h, minute=m)
                    if start <= at < end:
                        yield at
        day += timedelta(days=1)
