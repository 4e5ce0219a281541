"""Billing: an attempt's time into exact ledger entries, one per stretch at one price.

An entry's amount is ``usd_per_hour × instances × seconds / 3600`` in ``Decimal``, rounded
half-even to the ledger's scale (:data:`LEDGER_QUANTUM`, 10⁻⁸ USD: what the ``NUMERIC(20, 8)``
column keeps), so the amount billed in memory is exactly the amount every store keeps — the one
formula every reader of the ledger (accounting's on-demand equivalent included) uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal

from budgeteer.store.base import Attempt, LedgerEntry

_HOUR = Decimal(3600)
#: The ledger's scale: amounts are kept to 10⁻⁸ USD.
LEDGER_QUANTUM = Decimal("1e-8")
#: How an idle pooled instance's entries begin their price source (billed to the attempt that
#: left it warm): ``"idle in pool: <the price's own source>"``.
IDLE_SOURCE = "idle in pool: "


def is_idle(entry: LedgerEntry) -> bool:
    """Whether ``entry`` bills a pooled instance's idle time."""
    return entry.price_source.startswith(IDLE_SOURCE)


def amount_usd(usd_per_hour: Decimal, instances: int, start: datetime, end: datetime) -> Decimal:
    """What ``instances`` instances cost over ``[start, end)`` at ``usd_per_hour`` each."""
    seconds = Decimal(str((end - start).total_seconds()))
    return (usd_per_hour * instances * seconds / _HOUR).quantize(LEDGER_QUANTUM, ROUND_HALF_EVEN)


def ledger_entries(
    attempt: Attempt, segments: Iterable[tuple[datetime, datetime, Decimal, str]]
) -> list[LedgerEntry]:
    """The entries for ``attempt`` over price ``segments`` (start, end, price, its source), as
    the backend's market reports them: every instance of the attempt billed."""
    return [
        LedgerEntry(
            attempt.id,
            attempt.job_id,
            start,
            end,
            price,
            amount_usd(price, attempt.instances, start, end),
            source,
            attempt.instances,
        )
        for start, end, price, source in segments
    ]
