"""How money and times are written for people (dashboard, CLI tables, the demo's report).

Money to the cent with thousands separators, rounded half-even (``$1,234.57``); the exact
amounts stay in the JSON API and in ``budgeteer ledger --detail``. Times to the minute in UTC
(``2026-12-03 14:05 UTC``), without ISO's ``T`` and microseconds."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal

_CENT = Decimal("0.01")


def usd(value: object) -> str:
    """``1234.567891`` → ``1,234.57`` (a Decimal, a number or its string)."""
    return f"{Decimal(str(value)).quantize(_CENT, ROUND_HALF_EVEN):,}"


def when(value: datetime | str | None) -> str:
    """A time for people, or ``—`` for none."""
    if value is None or value == "":
        return "—"
    at = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
