"""Money views over the ledger: what a job cost, what it is still expected to cost, and what the
same work would have cost on on-demand (for honest savings).

The on-demand equivalent of a ledger entry is its hours × instances × the on-demand price of
the *same* instance type in the same provider and region (the catalog's on-demand offering);
entries already on on-demand (or on-prem) count at their own price. Nothing here is a float:
amounts are ``Decimal`` from the ledger and the catalog's prices as decimal text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from budgeteer.catalog import Catalog
from budgeteer.domain.offering import Market, Offering
from budgeteer.ledger.billing import amount_usd
from budgeteer.store.base import Attempt, LedgerEntry

ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class JobCost:
    """A job's accrued spend, the rest its running attempt is expected to cost, and the
    on-demand equivalent of what it accrued."""

    accrued_usd: Decimal
    committed_usd: Decimal
    on_demand_equivalent_usd: Decimal

    @property
    def savings_usd(self) -> Decimal:
        """On-demand equivalent minus accrued (what spot saved)."""
        return self.on_demand_equivalent_usd - self.accrued_usd


class OnDemandPrices:
    """The on-demand price of each offering's instance type, from a catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self._by_id = {o.id: o for o in catalog.offerings}
        self._on_demand = {
            (o.provider, o.region, o.instance_type): o
            for o in catalog.offerings
            if o.market is Market.ON_DEMAND
        }

    def offering(self, offering_id: str) -> Offering | None:
        """The catalog offering with this id, if any."""
        return self._by_id.get(offering_id)

    def usd_per_hour(self, offering_id: str, paid: Decimal) -> Decimal:
        """On-demand price per instance-hour for the offering (``paid`` when it is not spot
        or no on-demand twin is listed)."""
        offering = self._by_id.get(offering_id)
        if offering is None or offering.market is not Market.SPOT:
            return paid
        twin = self._on_demand.get((offering.provider, offering.region, offering.instance_type))
        return paid if twin is None else Decimal(repr(twin.usd_per_hour))


def job_cost(
    attempts: Sequence[Attempt], entries: Iterable[LedgerEntry], prices: OnDemandPrices
) -> JobCost:
    """Accrued, committed and on-demand-equivalent cost of one job."""
    offering_of = {a.id: a.offering_id for a in attempts}
    accrued = ZERO
    equivalent = ZERO
    billed: dict[int, Decimal] = {}
    for e in entries:
        accrued += e.amount_usd
        billed[e.attempt_id] = billed.get(e.attempt_id, ZERO) + e.amount_usd
        od = prices.usd_per_hour(offering_of.get(e.attempt_id, ""), e.usd_per_hour)
        equivalent += amount_usd(od, e.instances, e.start, e.end)
    committed = sum(
        (
            max(ZERO, a.expected_cost_usd - billed.get(a.id, ZERO))
            for a in attempts
            if a.ended_at is None
        ),
        ZERO,
    )
    return JobCost(accrued, committed, equivalent)
