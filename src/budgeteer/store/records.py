"""Append-only records the store keeps beside jobs: retraining signals, the spot decider's
moves and pools' charges to teams (re-exported by :mod:`budgeteer.store.base`, whose ``Store``
port keeps them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from budgeteer.core.spot.decide import Decision, Situation
from budgeteer.core.spot.replay import Mode


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A retraining signal and what it caused (``budgeteer trigger``, ``POST /v1/signals``):
    the model and its team, the kind (drift, skew, degradation), the severity reached, the
    action (submit, upgrade, none), the job it submitted (if any), why, and the per-feature
    statistics ``(feature, psi, ks, js)``. ``id`` is the store's (0 before it is kept)."""

    model: str
    team: str
    kind: str
    severity: str
    action: str
    job_id: str | None
    at: datetime
    reason: str
    statistics: tuple[tuple[str, float, float | None, float], ...] = ()
    id: int = 0


#: What a spot decision did: a queued job took on-demand instead of waiting for spot, a spot
#: attempt was moved to on-demand, an on-demand attempt was moved back to spot.
SPOT_ACTIONS = ("take_on_demand", "bridge_on_demand", "to_spot")


@dataclass(frozen=True, slots=True)
class SpotDecisionRecord:
    """A move the spot decider made, kept as data (``explain`` and the tests read it back; the
    events keep the same decision in words): the job, the attempt it moved (``None`` for a
    queued job), when, the ``action`` (one of :data:`SPOT_ACTIONS`), the spot offering the
    decision was about, the mode decided, the :class:`~budgeteer.core.spot.decide.Situation`
    it read (every number behind it: :func:`~budgeteer.core.spot.decide.decide` on it answers
    the same again, given the market's estimate) and the safety net's word if it overrode the
    MDP. ``id`` is the store's (0 before it is kept)."""

    job_id: str
    attempt_id: int | None
    at: datetime
    action: str
    offering_id: str
    decided: Mode
    situation: Situation
    safety_net: str = ""
    id: int = 0

    @property
    def decision(self) -> Decision:
        """The decision again (its :attr:`~budgeteer.core.spot.decide.Decision.reason` gives
        the words)."""
        return Decision(self.decided, self.situation, self.safety_net)


@dataclass(frozen=True, slots=True)
class PoolCharge:
    """Money a pool spent on instances no job asked for — booted to keep its ``min`` or ahead of
    a scheduled burst (``warm``), idling until a job takes them or they are given back — billed
    to the pool's ``team`` (exact, as a :class:`~budgeteer.store.base.LedgerEntry` is):
    ``instances`` instances of ``offering_id`` over ``[start, end)`` at ``usd_per_hour`` each
    from ``price_source``, ``amount_usd`` = price × instances × hours; ``instance_ids`` names
    them. One charge per (offering, team, start, instances)."""

    offering_id: str
    team: str
    start: datetime
    end: datetime
    usd_per_hour: Decimal
    amount_usd: Decimal
    price_source: str
    instance_ids: tuple[str, ...]

    @property
    def instances(self) -> int:
        """How many instances the charge is for."""
        return len(self.instance_ids)


__all__ = ["SPOT_ACTIONS", "PoolCharge", "SignalRecord", "SpotDecisionRecord"]
