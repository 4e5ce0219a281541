"""The sandbox's simulated spot market: is spot capacity there at a time, and at what price.

``TraceMarket`` replays a real availability trace (and its price series) from an origin time;
``RateMarket`` draws up/down periods from an interruption rate with a seeded generator (the
same offering and seed always give the same history). On-demand and on-prem capacity is always
there at the catalog price.
"""

from __future__ import annotations

import fnmatch
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from decimal import Decimal
from typing import Protocol
from zoneinfo import ZoneInfo

import numpy as np
from numpy.typing import NDArray

from budgeteer.domain.offering import Market, Offering


class SandboxMarket(Protocol):
    """Spot availability and price at a time."""

    def available(self, offering: Offering, at: datetime) -> bool:
        """True when an instance of ``offering`` can be held at ``at``."""
        ...

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """Price per instance-hour at ``at`` and its source."""
        ...

    def segments(self, offering: Offering, start: datetime, end: datetime) -> list[Segment]:
        """``[start, end)`` cut where the price changes, each piece with its price and source."""
        ...


#: A stretch of time at one price: (start, end, USD per instance-hour, source).
Segment = tuple[datetime, datetime, Decimal, str]


def _catalog_price(offering: Offering) -> tuple[Decimal, str]:
    return Decimal(repr(offering.usd_per_hour)), offering.price.source


def _one_segment(offering: Offering, start: datetime, end: datetime) -> list[Segment]:
    price, source = _catalog_price(offering)
    return [(start, end, price, source)] if end > start else []


class TraceMarket:
    """Spot availability and prices replayed from a trace starting at ``origin`` (tick 0);
    after the trace ends spot is unavailable."""

    def __init__(
        self,
        available: NDArray[np.bool_],
        gap_seconds: float,
        origin: datetime,
        prices: NDArray[np.float64] | None = None,
        source: str = "trace",
    ) -> None:
        self._available = available
        self._gap = gap_seconds
        self._origin = origin
        self._prices = prices
        self._source = source
        # ticks where the price differs from the tick before (to cut billing intervals fast)
        self._changes = (
            np.flatnonzero(np.diff(prices) != 0) + 1 if prices is not None else np.array([], int)
        )

    def _tick(self, at: datetime) -> int:
        return math.floor((at - self._origin).total_seconds() / self._gap)

    @property
    def gap_hours(self) -> float:
        """The trace's tick, in hours."""
        return self._gap / 3600.0

    def window(self, start: datetime, end: datetime) -> NDArray[np.bool_]:
        """Whether spot is up on each of the trace's ticks from ``start``'s to the one before
        ``end``'s (only ticks the trace has: none before its origin or after its end)."""
        lo = max(self._tick(start), 0)
        hi = min(self._tick(end), len(self._available))
        return self._available[lo:hi].copy() if hi > lo else np.zeros(0, dtype=np.bool_)

    def available(self, offering: Offering, at: datetime) -> bool:
        """See :class:`SandboxMarket`."""
        if offering.market is not Market.SPOT:
            return True
        tick = self._tick(at)
        return 0 <= tick < len(self._available) and bool(self._available[tick])

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """See :class:`SandboxMarket`."""
        if offering.market is not Market.SPOT or self._prices is None:
            return _catalog_price(offering)
        tick = min(max(self._tick(at), 0), len(self._prices) - 1)
        return Decimal(repr(float(self._prices[tick]))), f"{self._source}[{tick}]"

    def segments(self, offering: Offering, start: datetime, end: datetime) -> list[Segment]:
        """See :class:`SandboxMarket`: cut at the trace's ticks where the price changes."""
        if offering.market is not Market.SPOT or self._prices is None:
            return _one_segment(offering, start, end)
        out: list[Segment] = []
        at = start
        while at < end:
            price, source = self.price(offering, at)
            tick = self._tick(at)
            boundary = end
            if 0 <= tick < len(self._prices) - 1:
                i = int(np.searchsorted(self._changes, tick, side="right"))
                if i < len(self._changes):
                    nxt = int(self._changes[i])
                    boundary = min(end, self._origin + timedelta(seconds=nxt * self._gap))
            elif tick < 0:
                boundary = min(end, self._origin)
            out.append((at, boundary, price, source))
            at = boundary
        return out


def replay_market(
    available: Sequence[float] | NDArray[np.float64],
    gap_seconds: float,
    origin: datetime,
    *,
    source: str,
    prices: Sequence[float] | NDArray[np.float64] | None = None,
    skip_ticks: int = 0,
    ticks: int | None = None,
    dry: Sequence[tuple[int, int]] = (),
) -> TraceMarket:
    """A trace (instances available per tick; one or more counts as available) replayed from
    ``origin`` — the one way the service (``wiring``) and the simulator (scenarios) turn a
    trace into a market. Optionally started ``skip_ticks`` in and repeated to ``ticks`` ticks
    (the price series, when given, moves with it), with the ``dry`` tick ranges ``[a, b)``
    made unavailable (droughts)."""
    avail = np.asarray(available) >= 1
    series = None if prices is None else np.asarray(prices, dtype=np.float64)
    if skip_ticks or ticks is not None:
        skip = skip_ticks % len(avail)
        n = len(avail) if ticks is None else ticks
        avail = np.resize(np.roll(avail, -skip), n)
        if series is not None:
            series = np.resize(np.roll(series, -skip), n)
    for a, b in dry:
        avail[a:b] = False
    return TraceMarket(avail, gap_seconds, origin, series, source=source)


class RateMarket:
    """Spot up for exponential periods (mean ``1/interruptions_per_hour``), then down for
    exponential outages (mean ``mean_outage_hours``), from ``origin``; seeded per offering."""

    def __init__(self, origin: datetime, seed: int = 0, mean_outage_hours: float = 0.5) -> None:
        self._origin = origin
        self._seed = seed
        self._outage = mean_outage_hours
        self._changes: dict[str, list[float]] = {}

    def _flips(self, offering: Offering, until_hours: float) -> list[float]:
        flips = self._changes.setdefault(offering.id, [])
        rng_seed = self._seed ^ zlib.crc32(offering.id.encode())
        if not flips:
            flips.append(0.0)
        rng = np.random.default_rng([rng_seed, len(flips)])
        while flips[-1] <= until_hours:
            up = len(flips) % 2 == 1  # after an even number of flips, spot is up
            rate = offering.interruption_per_hour if up else 1 / self._outage
            flips.append(flips[-1] + float(rng.exponential(1 / max(rate, 1e-9))))
            rng = np.random.default_rng([rng_seed, len(flips)])
        return flips

    def available(self, offering: Offering, at: datetime) -> bool:
        """See :class:`SandboxMarket`."""
        if offering.market is not Market.SPOT:
            return True
        hours = (at - self._origin).total_seconds() / 3600
        if hours < 0:
            return False
        flips = self._flips(offering, hours)
        period = int(np.searchsorted(np.array(flips), hours, side="right"))
        return period % 2 == 1

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """The catalog price (this market varies availability, not price)."""
        return _catalog_price(offering)

    def segments(self, offering: Offering, start: datetime, end: datetime) -> list[Segment]:
        """See :class:`SandboxMarket`: one price throughout."""
        return _one_segment(offering, start, end)


#: Markets whose capacity the market can take back (on-prem: a pool lent out on a calendar).
REVOCABLE = frozenset({Market.SPOT, Market.ON_PREM})
#: How finely :func:`next_available` probes a market (seconds).
PROBE_SECONDS = 60.0


def next_available(
    market: SandboxMarket, offering: Offering, start: datetime, within_days: float = 7.0
) -> datetime | None:
    """When ``market`` has room for ``offering`` again after ``start`` (a pool's opening),
    probing each :data:`PROBE_SECONDS`; ``None`` when not within ``within_days``."""
    step = timedelta(seconds=PROBE_SECONDS)
    t = start + step
    while t <= start + timedelta(days=within_days):
        if market.available(offering, t):
            return t
        t += step
    return None


@dataclass(frozen=True, slots=True)
class Closed:
    """A weekly window in which a pool is not lent out: on ``days`` (0 = Monday) from
    ``start`` to ``end`` local time (``end`` ≤ ``start`` runs past midnight into the next day)."""

    days: frozenset[int]
    start: time
    end: time


class CalendarMarket:
    """An on-prem pool lent to retraining outside its ``closed`` windows (business hours, say)
    in time zone ``tz``: while closed nothing can be held on it, and what runs is revoked at
    closing time like spot. Always at the catalog price (an amortised cost)."""

    def __init__(self, closed: Sequence[Closed], tz: str = "UTC") -> None:
        self._closed = tuple(closed)
        self._tz = ZoneInfo(tz)

    def available(self, offering: Offering, at: datetime) -> bool:
        """See :class:`SandboxMarket`."""
        return self.is_open(at)

    def is_open(self, at: datetime) -> bool:
        """True outside every closed window."""
        local = at.astimezone(self._tz)
        day, now = local.weekday(), local.time()
        for w in self._closed:
            if w.end > w.start:
                if day in w.days and w.start <= now < w.end:
                    return False
            elif (day in w.days and now >= w.start) or ((day - 1) % 7 in w.days and now < w.end):
                return False
        return True

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """See :class:`SandboxMarket`."""
        return _catalog_price(offering)

    def segments(self, offering: Offering, start: datetime, end: datetime) -> list[Segment]:
        """See :class:`SandboxMarket`."""
        return _one_segment(offering, start, end)

    def open_share(self) -> float:
        """The share of a week the pool is open."""
        minutes = 7 * 24 * 60
        start = datetime(2024, 1, 1, tzinfo=self._tz)  # a Monday
        step = 15
        open_ = sum(self.is_open(start + timedelta(minutes=m)) for m in range(0, minutes, step))
        return open_ * step / minutes

    def closings_per_week(self) -> int:
        """How many times a week the pool closes (each revokes what runs on it)."""
        start = datetime(2024, 1, 1, tzinfo=self._tz)
        states = [self.is_open(start + timedelta(minutes=m)) for m in range(0, 10080, 15)]
        return sum(1 for a, b in zip(states, states[1:] + states[:1], strict=True) if a and not b)


class ZonedMarket:
    """A market per group of offerings: each offering is replayed from the first route whose
    pattern (``fnmatch`` on the offering id, e.g. ``aws/us-east-1/use1-az1/p3.2xlarge/spot``)
    matches it, every other one from ``default`` — so each zone's spot capacity and price can
    follow its own trace."""

    def __init__(self, routes: Sequence[tuple[str, SandboxMarket]], default: SandboxMarket) -> None:
        self._routes = tuple(routes)
        self._default = default
        self._of: dict[str, SandboxMarket] = {}

    def market_for(self, offering: Offering) -> SandboxMarket:
        """The market that replays ``offering``."""
        market = self._of.get(offering.id)
        if market is None:
            market = next(
                (m for pattern, m in self._routes if fnmatch.fnmatchcase(offering.id, pattern)),
                self._default,
            )
            self._of[offering.id] = market
        return market

    def available(self, offering: Offering, at: datetime) -> bool:
        """See :class:`SandboxMarket`."""
        return self.market_for(offering).available(offering, at)

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """See :class:`SandboxMarket`."""
        return self.market_for(offering).price(offering, at)

    def segments(self, offering: Offering, start: datetime, end: datetime) -> list[Segment]:
        """See :class:`SandboxMarket`."""
        return self.market_for(offering).segments(offering, start, end)


class MarketPrices:
    """The pricing half of the ``ComputeBackend`` port for backends that bill at a
    :class:`SandboxMarket`'s prices (the sandbox and the simulator), and their availability
    feed (the scheduler's market book reads it each cycle)."""

    market: SandboxMarket

    def spot_available(self, offering: Offering, at: datetime) -> bool:
        """Whether the market has spot capacity of ``offering`` at ``at``."""
        return self.market.available(offering, at)

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        return self.market.price(offering, at)

    def price_segments(
        self, offering: Offering, start: datetime, end: datetime
    ) -> list[tuple[datetime, datetime, Decimal, str]]:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        return self.market.segments(offering, start, end)


class LivePrices(Protocol):
    """Prices kept from the clouds' feeds (:class:`budgeteer.catalog.live.StorePrices`)."""

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]: ...

    def segments(self, offering: Offering, start: datetime, end: datetime) -> list[Segment]: ...

    def recent(self, offering: Offering, since: datetime) -> list[tuple[datetime, Decimal]]:
        """The live prices kept since ``since`` (oldest first)."""
        ...


class CatalogPrices:
    """The pricing half of the ``ComputeBackend`` port for engines that bill at the catalog's
    price of each offering (a Slurm or Ray cluster's nodes: on-prem amortised or the cloud's
    list price; EC2 and Kubernetes), one price throughout an attempt — or, with
    ``live_prices`` set (the service's ``prices`` config), the prices kept from the clouds'
    feeds, an attempt cut where they change."""

    live_prices: LivePrices | None = None

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        if self.live_prices is not None:
            return self.live_prices.price(offering, at)
        return _catalog_price(offering)

    def price_segments(
        self, offering: Offering, start: datetime, end: datetime
    ) -> list[tuple[datetime, datetime, Decimal, str]]:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        if self.live_prices is not None:
            return self.live_prices.segments(offering, start, end)
        return _one_segment(offering, start, end)
