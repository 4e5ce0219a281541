"""The in-memory store's records beside jobs — offering backoffs, spot market histories, live
price points, retraining signals, the spot decider's moves and learned speeds (the
:class:`~budgeteer.store.memory.MemoryStore` is built on them)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence
from datetime import datetime

from budgeteer.core.speed import Speed
from budgeteer.core.spot.estimate import MarketHistory
from budgeteer.store.base import (
    OfferingBackoff,
    PricePoint,
    in_force_since,
)
from budgeteer.store.records import PoolCharge, SignalRecord, SpotDecisionRecord


class MemoryRecords:
    """The records beside jobs, under one lock (the store's: ``_lock``, re-entrant —
    ``transitions()`` calls ``transition()``)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._backoffs: dict[str, OfferingBackoff] = {}
        self._markets: dict[str, MarketHistory] = {}
        self._speeds: dict[tuple[str, str], Speed] = {}
        self._prices: dict[str, dict[datetime, PricePoint]] = {}
        self._signals: list[SignalRecord] = []
        self._spot_decisions: list[SpotDecisionRecord] = []
        self._charges: dict[tuple[str, str, datetime, tuple[str, ...]], PoolCharge] = {}

    def put_backoff(self, backoff: OfferingBackoff) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            self._backoffs[backoff.offering_id] = backoff

    def clear_backoff(self, offering_id: str) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            self._backoffs.pop(offering_id, None)

    def backoffs(self) -> list[OfferingBackoff]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return [self._backoffs[k] for k in sorted(self._backoffs)]

    def put_market(self, history: MarketHistory) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            self._markets[history.offering_id] = history

    def markets(self) -> list[MarketHistory]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return [self._markets[k] for k in sorted(self._markets)]

    def add_prices(self, points: Sequence[PricePoint]) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        added = 0
        with self._lock:
            for p in points:
                kept = self._prices.setdefault(p.offering_id, {})
                if p.at not in kept:
                    kept[p.at] = p
                    added += 1
        return added

    def price_points(
        self, offering_id: str | None = None, since: datetime | None = None
    ) -> list[PricePoint]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            ids = sorted(self._prices) if offering_id is None else [offering_id]
            out: list[PricePoint] = []
            for oid in ids:
                points = [self._prices.get(oid, {})[t] for t in sorted(self._prices.get(oid, {}))]
                out += in_force_since(points, since)
            return out

    def add_signal(self, record: SignalRecord) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            kept = dataclasses.replace(record, id=len(self._signals) + 1)
            self._signals.append(kept)
            return kept.id

    def signals(self, model: str | None = None, limit: int | None = 100) -> list[SignalRecord]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            out = [r for r in reversed(self._signals) if model is None or r.model == model]
            return out if limit is None else out[:limit]

    def add_spot_decision(self, record: SpotDecisionRecord) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            kept = dataclasses.replace(record, id=len(self._spot_decisions) + 1)
            self._spot_decisions.append(kept)
            return kept.id

    def spot_decisions(
        self, job_id: str | None = None, limit: int | None = 100
    ) -> list[SpotDecisionRecord]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            out = [
                r for r in reversed(self._spot_decisions) if job_id is None or r.job_id == job_id
            ]
            return out if limit is None else out[:limit]

    def add_pool_charge(self, charge: PoolCharge) -> bool:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            key = (charge.offering_id, charge.team, charge.start, charge.instance_ids)
            if key in self._charges:
                return False
            self._charges[key] = charge
            return True

    def pool_charges(self, team: str | None = None) -> list[PoolCharge]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            rows = [c for c in self._charges.values() if team is None or c.team == team]
        # in the SQL stores' order: ties on the instances' JSON text
        return sorted(
            rows, key=lambda c: (c.start, c.offering_id, c.team, json.dumps(list(c.instance_ids)))
        )

    def pool_charge_count(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return len(self._charges)

    def put_speed(self, speed: Speed) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            self._speeds[(speed.family, speed.accelerator)] = speed

    def speeds(self) -> list[Speed]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._lock:
            return [self._speeds[k] for k in sorted(self._speeds)]
