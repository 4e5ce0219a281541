"""Live prices in the service: fetch the clouds' prices for the catalog's offerings
(:mod:`budgeteer.catalog.feeds`), keep them in the store as :class:`PricePoint` s, and price
with them (:class:`StorePrices`: what engines' backends bill and the planner plans with).

An offering available in several zones at one catalog price is one offering; live spot prices
differ by zone, so it takes the **highest** of its zones' quotes (budgets are not overrun by the
zone the launch lands in). A price older than ``max_age`` is still used — the last one known
beats the bundled catalog — but never silently: its source says ``stale``, the service logs a
warning once per offering, and ``/v1/offerings`` shows ``price_stale``.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from budgeteer.catalog.feeds import AZURE_URL, GCP_URL, Http, aws_quotes, azure_quotes, gcp_quotes
from budgeteer.catalog.quotes import GcpShape, Quote
from budgeteer.clock import Clock
from budgeteer.domain.offering import Market, Offering
from budgeteer.store.base import PricePoint, Store

log = logging.getLogger(__name__)

Segment = tuple[datetime, datetime, Decimal, str]
#: Days of live prices read back into memory (and the one in force before them).
KEEP_DAYS = 8


@dataclass(frozen=True, slots=True)
class FeedSummary:
    """What one provider's feeds were asked and answered."""

    regions: list[str]
    quotes: int
    retries: int


@dataclass(frozen=True, slots=True)
class FeedSettings:
    """Where the feeds are (the public APIs by default) and the GCP key."""

    azure_url: str = AZURE_URL
    gcp_url: str = GCP_URL
    gcp_key: str | None = None
    aws_endpoint: str | None = None


def fetch_quotes(
    offerings: Sequence[Offering],
    providers: Sequence[str],
    regions: Sequence[str] | None,
    settings: FeedSettings,
    fetched_at: datetime,
) -> tuple[list[Quote], dict[str, FeedSummary]]:
    """Quotes for ``offerings`` of ``providers`` (in ``regions``, or every region they are
    in), and per provider what was asked (regions, quotes, retries)."""
    quotes: list[Quote] = []
    summary: dict[str, FeedSummary] = {}
    for provider in providers:
        mine = [o for o in offerings if o.provider == provider]
        wanted = sorted({o.region for o in mine if regions is None or o.region in regions})
        got: list[Quote] = []
        retries = 0
        if provider == "azure":
            http = Http("azure-retail")
            for region in wanted:
                got += azure_quotes(http, region, fetched_at, settings.azure_url)
            retries = http.retries
        elif provider == "gcp":
            http = Http("gcp-billing")
            shapes = sorted(
                {
                    GcpShape(
                        o.region,
                        o.instance_type,
                        float(o.vcpus),
                        float(o.memory_gib),
                        o.accelerator,
                        o.accelerators_per_instance,
                    )
                    for o in mine
                    if o.region in wanted and o.vcpus is not None and o.memory_gib is not None
                },
                key=lambda s: (s.region, s.instance_type),
            )
            if shapes:
                got += gcp_quotes(
                    http, settings.gcp_key or "", shapes, fetched_at, settings.gcp_url
                )
            retries = http.retries
        else:
            import boto3  # noqa: PLC0415 - the aws extra

            pricing = boto3.client(
                "pricing", region_name="us-east-1", endpoint_url=settings.aws_endpoint
            )
            for region in wanted:
                ec2 = boto3.client("ec2", region_name=region, endpoint_url=settings.aws_endpoint)
                types = sorted({o.instance_type for o in mine if o.region == region})
                got += aws_quotes(pricing, ec2, region, types, fetched_at)
        quotes += got
        summary[provider] = FeedSummary(wanted, len(got), retries)
    return quotes, summary


def points_for(
    offerings: Iterable[Offering], quotes: Iterable[Quote], at: datetime
) -> list[PricePoint]:
    """Each offering's price from the quotes (its zones' own, else its region's; the highest
    of several zones), as a point at ``at``; offerings without a quote get none."""
    index: dict[tuple[str, str, str, str, Market], Quote] = {}
    for q in quotes:
        index[(q.provider, q.region, q.zone, q.instance_type, q.market)] = q
    points = []
    for o in offerings:
        base = (o.provider, o.region)
        found: list[Quote] = []
        for zone in o.zones or ("",):
            hit = index.get((*base, zone, o.instance_type, o.market))
            hit = hit or index.get((*base, "", o.instance_type, o.market))
            if hit is not None:
                found.append(hit)
        if found:
            best = max(found, key=lambda q: (q.usd_per_hour, q.source))
            points.append(PricePoint(o.id, at, best.usd_per_hour, best.source))
    return points


class StorePrices:
    """Prices from the store's live points, the catalog's where an offering has none (see the
    module docstring). Cheap to ask often: the points are read once per ``reread_seconds``."""

    def __init__(
        self, store: Store, clock: Clock, max_age: timedelta, reread_seconds: float = 60.0
    ) -> None:
        self.store = store
        self.clock = clock
        self.max_age = max_age
        self.reread_seconds = reread_seconds
        self._lock = threading.Lock()
        self._points: dict[str, list[PricePoint]] = {}
        self._read_at: datetime | None = None
        self._warned: set[str] = set()

    def _all(self) -> dict[str, list[PricePoint]]:
        now = self.clock.now()
        with self._lock:
            if (
                self._read_at is None
                or (now - self._read_at).total_seconds() >= self.reread_seconds
            ):
                by: dict[str, list[PricePoint]] = {}
                # the recent week and a day (bids read a week; an attempt is billed as it runs)
                for p in self.store.price_points(since=now - timedelta(days=KEEP_DAYS)):
                    by.setdefault(p.offering_id, []).append(p)
                self._points, self._read_at = by, now
            return self._points

    def refreshed(self) -> None:
        """New points were written: read them at the next ask."""
        with self._lock:
            self._read_at = None

    def point(self, offering: Offering, at: datetime) -> PricePoint | None:
        """The point in force at ``at`` (the first one for a time before any)."""
        points = self._all().get(offering.id)
        if not points:
            return None
        before = [p for p in points if p.at <= at]
        return before[-1] if before else points[0]

    def recent(self, offering: Offering, since: datetime) -> list[tuple[datetime, Decimal]]:
        """The live prices kept since ``since`` (oldest first)."""
        return [(p.at, p.usd_per_hour) for p in self._all().get(offering.id, []) if p.at >= since]

    def stale(self, point: PricePoint, at: datetime) -> bool:
        """Whether ``point`` is older than ``max_age`` at ``at``."""
        return at - point.at > self.max_age

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """The live price in force at ``at`` and its source (``stale`` when old), else the
        catalog's."""
        point = self.point(offering, at)
        if point is None:
            return Decimal(repr(offering.usd_per_hour)), offering.price.source
        if self.stale(point, at):
            if offering.id not in self._warned:
                self._warned.add(offering.id)
                log.warning(
                    "the live price of %s is %.1f h old (max %.1f h): still planning and billing "
                    "with it; is the price refresher running?",
                    offering.id,
                    (at - point.at).total_seconds() / 3600,
                    self.max_age.total_seconds() / 3600,
                )
            return (
                point.usd_per_hour,
                f"{point.source} (stale since {point.at + self.max_age:%Y-%m-%d %H:%M})",
            )
        return point.usd_per_hour, point.source

    def segments(self, offering: Offering, start: datetime, end: datetime) -> list[Segment]:
        """``[start, end)`` cut where a live price changes (each piece at its price)."""
        if end <= start:
            return []
        points = self._all().get(offering.id)
        if not points:
            price, source = self.price(offering, start)
            return [(start, end, price, source)]
        cuts = [start] + [p.at for p in points if start < p.at < end] + [end]
        out: list[Segment] = []
        for a, b in itertools.pairwise(cuts):
            price, source = self.price(offering, a)
            out.append((a, b, price, source))
        return out


class PriceRefresher:
    """Every ``every_seconds``, fetch the offerings' prices and keep them (a thread in
    ``serve``); a failed round is logged and tried at the next, the last prices stay."""

    def __init__(
        self,
        store: Store,
        offerings: Sequence[Offering],
        fetch: Callable[[datetime], list[Quote]],
        clock: Clock,
        every_seconds: float,
        on_refresh: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.offerings = tuple(offerings)
        self.fetch = fetch
        self.clock = clock
        self.every_seconds = every_seconds
        self.on_refresh = on_refresh
        self.rounds = 0
        self.failures = 0
        self._stop = threading.Event()

    def refresh_once(self) -> int:
        """One round: the points added (0 when the feeds failed)."""
        now = self.clock.now()
        try:
            quotes = self.fetch(now)
        except Exception as exc:  # a feed down must not stop the service
            self.failures += 1
            log.warning("price refresh failed: %s", exc)
            return 0
        added = self.store.add_prices(points_for(self.offerings, quotes, now))
        self.rounds += 1
        self.on_refresh()
        log.info("price refresh: %d quotes, %d prices kept", len(quotes), added)
        return added

    def run(self) -> None:
        """Refresh until :meth:`stop`."""
        while not self._stop.is_set():
            self.refresh_once()
            self._stop.wait(self.every_seconds)

    def stop(self) -> None:
        """End :meth:`run` (at its next wait)."""
        self._stop.set()
