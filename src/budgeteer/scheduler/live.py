"""The attempts this process is running (launched or re-attached), with how far each is
billed — and the running allocations the snapshot reads, published as one immutable tuple so
that API threads never iterate what the loop changes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from budgeteer.backends.base import Handle
from budgeteer.core import Allocation
from budgeteer.store.base import Attempt


@dataclass
class Live:
    """One live attempt: its record, the backend's handle, the cost its plan expected, the
    ledger's progress (billed up to ``billed_until``, ``billed_usd`` so far) and when its plan
    expected it to end."""

    attempt: Attempt
    handle: Handle
    expected_cost_usd: float
    billed_until: datetime
    billed_usd: Decimal = Decimal(0)
    expected_end: datetime | None = None  # its plan's finish (unknown when re-attached)

    @property
    def committed_usd(self) -> float:
        """What the attempt is still expected to cost (never below zero)."""
        return max(0.0, self.expected_cost_usd - float(self.billed_usd))


class LiveAttempts:
    """The live attempts by attempt id (changed by the loop thread only) and the allocations
    last published from them (read by any thread)."""

    def __init__(self) -> None:
        self._live: dict[int, Live] = {}
        self.allocations: tuple[Allocation, ...] = ()

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[Live]:
        return iter(list(self._live.values()))

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._live

    def add(self, live: Live) -> None:
        """A launched or re-attached attempt."""
        self._live[live.attempt.id] = live
        self.publish()

    def remove(self, attempt_id: int) -> None:
        """An attempt that ended."""
        self._live.pop(attempt_id, None)

    def publish(self) -> None:
        """Replace the published allocations with the attempts' state now (one assignment:
        readers see the old tuple or the new one, never a half-built one)."""
        self.allocations = tuple(
            Allocation(
                live.attempt.job_id,
                live.attempt.offering_id,
                live.attempt.instances,
                live.committed_usd,
                live.expected_end,
            )
            for live in self._live.values()
        )
