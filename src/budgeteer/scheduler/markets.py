"""What the scheduler has seen of each spot offering's market, learned as it runs and kept in
the store (a restart does not forget it; every API replica shows it).

Sightings: a launch that started (up), a launch refused for capacity (down), a preemption
(down), and — where the backend has one — its availability feed, read once a cycle for every
spot offering. Each offering's :class:`~budgeteer.core.spot.estimate.MarketHistory` folds them
into up and down periods; the store is written when a period ends (a flip) or on a first
sighting, not on every sighting of the same state.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from budgeteer.core.spot.estimate import Availability, F, MarketHistory
from budgeteer.domain.offering import Market, Offering
from budgeteer.store.base import Store


@runtime_checkable
class AvailabilityFeed(Protocol):
    """A backend that can say whether spot capacity of an offering is there now (the
    sandbox's and the simulator's traces; a cloud's capacity signal)."""

    def spot_available(self, offering: Offering, at: datetime) -> bool:
        """Whether a launch on ``offering`` at ``at`` would find spot capacity."""
        ...


#: The changeover whose multiples are the age buckets of the planner's outage estimate.
BUCKET_CHANGEOVER_HOURS = 0.2


class MarketBook:
    """Market histories by spot offering (loop thread only)."""

    def __init__(self, store: Store, offerings: Mapping[str, Offering], feed: object) -> None:
        self.store = store
        self.spot = tuple(o for o in offerings.values() if o.market is Market.SPOT)
        self.feed = feed if isinstance(feed, AvailabilityFeed) else None
        self.histories: dict[str, MarketHistory] = {h.offering_id: h for h in store.markets()}
        # the planner's outage chains (and their expected outage lengths by state), by
        # offering, until its periods change
        self._chains: dict[str, tuple[tuple[int, datetime, float], Availability, F]] = {}

    def history(self, offering_id: str) -> MarketHistory:
        """What was seen of ``offering_id`` (empty when nothing was)."""
        return self.histories.get(offering_id) or MarketHistory(offering_id)

    def observe(self, offering: Offering, up: bool, at: datetime) -> None:
        """One sighting of ``offering`` (spot only; others are ignored)."""
        if offering.market is not Market.SPOT:
            return
        before = self.history(offering.id)
        after = before.observe(up, at)
        self.histories[offering.id] = after
        if after.up is not before.up or after.since != before.since:
            self.store.put_market(after)

    def down(self) -> frozenset[str]:
        """The spot offerings seen down now (in an observed drought)."""
        return frozenset(
            offering_id for offering_id, h in tuple(self.histories.items()) if h.up is False
        )

    def room_at(self, now: datetime, step_hours: float = 0.05) -> tuple[tuple[str, datetime], ...]:
        """Spot offerings seen down now, with when spot is expected back: the outage's expected
        remaining length given its age, from the offering's own estimate (for the planner, which
        counts the wait in every plan's finish there)."""
        out = []
        for offering_id, h in tuple(self.histories.items()):  # API threads call this too
            if h.up is not False or h.since is None:
                continue
            key = (len(h.periods), h.since, step_hours)
            cached = self._chains.get(offering_id)
            if cached is None or cached[0] != key:
                chain = h.estimate(None, step_hours, BUCKET_CHANGEOVER_HOURS)
                cached = (key, chain, chain.outage_steps())
                self._chains[offering_id] = cached
            _, chain, steps = cached
            wait = chain.expected_outage_steps(h.age_hours(now) / step_hours, steps) * step_hours
            out.append((offering_id, now + timedelta(hours=wait)))
        return tuple(sorted(out))

    def sweep(self, now: datetime) -> None:
        """Read the backend's feed for every spot offering (no-op without one)."""
        if self.feed is None:
            return
        for offering in self.spot:
            self.observe(offering, self.feed.spot_available(offering, now), now)
