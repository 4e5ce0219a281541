"""The simulator's pools: each idle instance (since when, its id, the attempt whose ledger pays
for its idle time, the dataset its last job ran with), each pool's idle instances, and the idle
stretches billed (:class:`IdleStretch`, kept beside the ledger by
:class:`~budgeteer.sim.backend.SimBackend`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from budgeteer.core.pools import PoolSettings


@dataclass(frozen=True, slots=True)
class IdleStretch:
    """One instance idle in a pool over ``[start, end)`` at one price (billed)."""

    offering_id: str
    start: datetime
    end: datetime
    usd_per_hour: Decimal
    amount_usd: Decimal
    price_source: str
    instance_id: str = ""

    @property
    def hours(self) -> float:
        """Its length in hours."""
        return (self.end - self.start).total_seconds() / 3600


@dataclass(eq=False, slots=True)
class Idle:
    """One idle pooled instance: since when (one its pool booted with no job: from when its
    start-up ends), its id (an attempt that takes it keeps the id:
    one instance, one id, however many jobs), the attempt whose end left it warm (whose
    ledger pays for its idle time) and until when that time went to the ledger."""

    since: datetime
    instance_id: str
    job_id: str | None  # None: booted by its pool with no job (its team pays)
    attempt: int
    billed_from: datetime
    data: str | None = None  # the dataset its last job ran with (still on its disk)
    team: str | None = None  # who pays for a booted instance
    booted_at: datetime | None = None  # a booted instance: when it was (``since``: ready)

    @property
    def idle_from(self) -> datetime:
        """When its idle time began (a booted instance's at its boot)."""
        return self.since if self.booted_at is None else self.booted_at


@dataclass
class Warm:
    """A pool's idle instances."""

    settings: PoolSettings
    idle: list[Idle] = field(default_factory=list)

    @property
    def idle_since(self) -> list[datetime]:
        """When each idle instance became idle."""
        return [i.since for i in self.idle]

    def ready(self, now: datetime) -> list[Idle]:
        """The idle instances warm by ``now`` (not booting)."""
        return [i for i in self.idle if i.since <= now]

    def first_since(self, since: datetime) -> Idle:
        """The (first) idle instance idle since ``since``."""
        return next(i for i in self.idle if i.since == since)
