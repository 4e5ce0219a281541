"""Offerings: one way to rent (or use) compute, with its price and where the price came from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Market(StrEnum):
    """How an instance is bought. Only ``spot`` can be revoked by the provider."""

    ON_DEMAND = "on_demand"
    SPOT = "spot"
    ON_PREM = "on_prem"
    RESERVED = "reserved"


@dataclass(frozen=True, slots=True)
class Price:
    """A price per instance-hour in USD, with its source (file, feed, API) and when it was seen."""

    usd_per_hour: float
    source: str
    observed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Offering:
    """An instance type sold on one market in one venue (provider, region, zones).

    ``accelerator`` is the catalog name (``A100``, ``H100`` …) and ``accelerators_per_instance``
    how many an instance carries. ``gpu_memory_gib`` is per accelerator. ``interruption_per_hour``
    is the expected revocation rate of one instance (0 outside spot). ``max_instances`` is the
    venue's capacity for this offering, ``None`` when unlimited.
    """

    id: str
    provider: str
    region: str
    zones: tuple[str, ...]
    instance_type: str
    accelerator: str
    accelerators_per_instance: int
    vcpus: float | None
    memory_gib: float | None
    gpu_memory_gib: float
    market: Market
    price: Price
    interruption_per_hour: float = 0.0
    startup_seconds: float = 120.0
    max_instances: int | None = None

    @property
    def usd_per_hour(self) -> float:
        """The instance-hour price in force."""
        return self.price.usd_per_hour

    @property
    def venue(self) -> str:
        """``provider/region``: the unit used for data-egress pricing."""
        return f"{self.provider}/{self.region}"
