"""What the API reads and writes, wired once by the composition root (``serve``) or a test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from budgeteer.catalog import Catalog
from budgeteer.clock import Clock
from budgeteer.core import Plan, Policy, Snapshot, plan_cycle
from budgeteer.service.accounting import OnDemandPrices
from budgeteer.store import Store


@dataclass
class ApiContext:
    """The API's collaborators: the store, the catalog, the clock, the policy, and how to take a
    snapshot of the scheduler's world (for ``explain`` and budget status)."""

    store: Store
    catalog: Catalog
    clock: Clock
    snapshot: Callable[[], Snapshot]
    admin_token: str
    secret_key: bytes
    policy: Policy = field(default_factory=Policy)
    max_body_bytes: int = 1_000_000
    is_leader: Callable[[], bool] = lambda: True
    checkpoint_root: Path | None = None
    prices: OnDemandPrices = field(init=False)

    def __post_init__(self) -> None:
        self.prices = OnDemandPrices(self.catalog)

    def plan(self) -> Plan:
        """The plan the core would make now (pure; nothing is applied)."""
        return plan_cycle(self.snapshot(), self.policy)
