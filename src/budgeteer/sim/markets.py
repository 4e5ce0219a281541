"""A scenario's compute world: the bundled catalog filtered, on-prem pools as offerings, and the
market — real traces replayed over the horizon with droughts cut in, zones with their own
trace and price series, pools lent out on a calendar — and, with ``market.history_days``, the
market histories the service starts with."""

from __future__ import annotations

import dataclasses
import fnmatch
from datetime import timedelta
from pathlib import Path

from budgeteer.backends.market import (
    SandboxMarket,
    TraceMarket,
    ZonedMarket,
    replay_market,
)
from budgeteer.catalog import Catalog, load_catalog
from budgeteer.catalog.onprem import pool_calendar, pool_id, pool_offering
from budgeteer.core.spot.estimate import MarketHistory
from budgeteer.domain.offering import Market
from budgeteer.errors import SpecError
from budgeteer.sim.schema import PriceSpec, Scenario
from budgeteer.sim.workload import in_family
from budgeteer.traces import load_price_series, load_trace


def scenario_catalog(scenario: Scenario) -> Catalog:
    full = load_catalog()
    f = scenario.catalog
    offerings = tuple(
        o
        for o in full.offerings
        if (f.providers is None or o.provider in f.providers)
        and (f.regions is None or o.region in f.regions)
        and (f.accelerators is None or any(in_family(o.accelerator, a) for a in f.accelerators))
    )
    if not offerings:
        raise SpecError("catalog", "no offering of the bundled catalog matches these filters")
    pools = tuple(
        pool_offering(full.throughput, p, f"onprem[{i}]") for i, p in enumerate(scenario.onprem)
    )
    return dataclasses.replace(full, offerings=offerings + pools)


def scenario_market(scenario: Scenario, catalog: Catalog) -> SandboxMarket:
    """Each trace from ``offset_hours``, repeated to cover the horizon, droughts cut in; a
    zone's price series rides along on its trace's ticks."""
    m = scenario.market
    default = _replay(scenario, m.trace, None, "market")
    if not m.zones and not scenario.onprem:
        return default
    routes: list[tuple[str, SandboxMarket]] = [
        (pool_id(pool), pool_calendar(pool)) for pool in scenario.onprem
    ]
    for i, zone in enumerate(m.zones):
        where = f"market.zones[{i}]"
        if not any(fnmatch.fnmatchcase(o.id, zone.offerings) for o in catalog.offerings):
            raise SpecError(f"{where}.offerings", f"matches no offering: {zone.offerings!r}")
        routes.append((zone.offerings, _replay(scenario, zone.trace, zone.prices, where)))
    return ZonedMarket(routes, default)


def scenario_histories(
    scenario: Scenario, catalog: Catalog, market: SandboxMarket
) -> tuple[MarketHistory, ...]:
    """With ``market.history_days``, each spot offering's market as the service would have
    recorded it over those days before the start — the periods of the trace that replays it
    (:func:`scenario_market` starts each trace that much earlier, the start's tick unchanged),
    read by :meth:`MarketHistory.recorded` as a ``market_seeds:`` trace is."""
    days = scenario.market.history_days
    if not days:
        return ()
    start = scenario.start - timedelta(days=days)
    periods: dict[TraceMarket, MarketHistory] = {}  # offerings on one trace share its periods
    out: list[MarketHistory] = []
    for offering in catalog.offerings:
        if offering.market is not Market.SPOT:
            continue
        replay = market.market_for(offering) if isinstance(market, ZonedMarket) else market
        if not isinstance(replay, TraceMarket):
            continue
        seen = periods.get(replay)
        if seen is None:
            window = replay.window(start, scenario.start)
            seen = periods[replay] = MarketHistory.recorded("", window, replay.gap_hours)
        out.append(dataclasses.replace(seen, offering_id=offering.id))
    return tuple(out)


def _replay(scenario: Scenario, path: Path, prices: PriceSpec | None, where: str) -> TraceMarket:
    """A trace from ``offset_hours``, repeated over the horizon, droughts cut in; a price
    series (checked to match the trace tick for tick) rides along. With ``history_days`` the
    replay begins that much before the start (the trace repeated backwards where it is
    shorter), so :func:`scenario_histories` can read what came before."""
    trace = load_trace(path)
    gap = trace.gap_seconds
    series = None
    source = f"trace:{trace.name}"
    if prices is not None:
        values, price_gap = load_price_series(prices.file, prices.series)
        if len(values) != len(trace.available):
            raise SpecError(
                f"{where}.prices",
                f"{prices.file.name} has {len(values)} prices; "
                f"the trace has {len(trace.available)} ticks",
            )
        if price_gap is not None and price_gap != gap:
            raise SpecError(
                f"{where}.prices", f"gap_seconds {price_gap} differs from the trace's {gap}"
            )
        series = values
        source = f"prices:{prices.series or prices.file.stem}"
    m = scenario.market
    before = int(m.history_days * 86400 // gap)  # ticks replayed before the start
    return replay_market(
        trace.available,
        gap,
        scenario.start - timedelta(seconds=before * gap),
        source=source,
        prices=series,
        skip_ticks=int(m.offset_hours * 3600 // gap) - before,
        ticks=before + int(scenario.days * 86400 // gap) + 2,
        dry=[
            (
                before + int(d.start_day * 86400 // gap),
                before + int((d.start_day + d.days) * 86400 // gap),
            )
            for d in m.droughts
        ],
    )


def spot_offerings(catalog: Catalog) -> int:
    """How many spot offerings the catalog subset has (for reports)."""
    return sum(o.market is Market.SPOT for o in catalog.offerings)
