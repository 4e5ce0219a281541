"""A scenario's compute world: the bundled catalog filtered, on-prem pools as offerings, and the
market — real traces replayed over the horizon with droughts cut in, zones with their own
trace and price series, pools lent out on a calendar."""

from __future__ import annotations

import dataclasses
import fnmatch
from datetime import time
from pathlib import Path

from budgeteer.backends.market import (
    CalendarMarket,
    Closed,
    SandboxMarket,
    TraceMarket,
    ZonedMarket,
    replay_market,
)
from budgeteer.catalog import Catalog, load_catalog
from budgeteer.domain.offering import Market, Offering, Price
from budgeteer.errors import SpecError
from budgeteer.sim.schema import WEEKDAYS, OnPremSpec, PriceSpec, Scenario
from budgeteer.sim.workload import in_family
from budgeteer.spec.job import resolve_accelerator
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
    pools = tuple(_pool_offering(full, p, i) for i, p in enumerate(scenario.onprem))
    return dataclasses.replace(full, offerings=offerings + pools)


def _calendar(pool: OnPremSpec) -> CalendarMarket:
    return CalendarMarket(
        [
            Closed(
                frozenset(WEEKDAYS.index(d) for d in c.days),
                time.fromisoformat(c.from_),
                time.fromisoformat(c.to),
            )
            for c in pool.closed
        ],
        pool.timezone,
    )


def _pool_offering(full: Catalog, pool: OnPremSpec, i: int) -> Offering:
    """The pool as an offering: on-prem, its nodes the capacity, and the revocations at
    closing time as an interruption rate (closings per open hour) the planner prices in."""
    known = sorted(full.throughput)
    accelerator = resolve_accelerator(pool.accelerator, known)
    if accelerator is None:
        raise SpecError(
            f"onprem[{i}].accelerator",
            f"unknown accelerator {pool.accelerator!r}; known: {', '.join(known)}",
        )
    calendar = _calendar(pool)
    open_hours = calendar.open_share() * 168
    if open_hours <= 0:
        raise SpecError(f"onprem[{i}].closed", "the pool is never open")
    return Offering(
        id=f"onprem/{pool.name}/*/{pool.gpus_per_node}x{accelerator}/on_prem",
        provider="onprem",
        region=pool.name,
        zones=(),
        instance_type=f"{pool.gpus_per_node}x{accelerator}",
        accelerator=accelerator,
        accelerators_per_instance=pool.gpus_per_node,
        vcpus=None,
        memory_gib=None,
        gpu_memory_gib=pool.gpu_memory_gib,
        market=Market.ON_PREM,
        price=Price(pool.usd_per_node_hour, f"onprem:{pool.name}"),
        interruption_per_hour=calendar.closings_per_week() / open_hours,
        startup_seconds=pool.startup_seconds,
        max_instances=pool.nodes,
    )


def scenario_market(scenario: Scenario, catalog: Catalog) -> SandboxMarket:
    """Each trace from ``offset_hours``, repeated to cover the horizon, droughts cut in; a
    zone's price series rides along on its trace's ticks."""
    m = scenario.market
    default = _replay(scenario, m.trace, None, "market")
    if not m.zones and not scenario.onprem:
        return default
    routes: list[tuple[str, SandboxMarket]] = [
        (f"onprem/{pool.name}/*", _calendar(pool)) for pool in scenario.onprem
    ]
    for i, zone in enumerate(m.zones):
        where = f"market.zones[{i}]"
        if not any(fnmatch.fnmatchcase(o.id, zone.offerings) for o in catalog.offerings):
            raise SpecError(f"{where}.offerings", f"matches no offering: {zone.offerings!r}")
        routes.append((zone.offerings, _replay(scenario, zone.trace, zone.prices, where)))
    return ZonedMarket(routes, default)


def _replay(scenario: Scenario, path: Path, prices: PriceSpec | None, where: str) -> TraceMarket:
    """A trace from ``offset_hours``, repeated over the horizon, droughts cut in; a price
    series (checked to match the trace tick for tick) rides along."""
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
    return replay_market(
        trace.available,
        gap,
        scenario.start,
        source=source,
        prices=series,
        skip_ticks=int(m.offset_hours * 3600 // gap),
        ticks=int(scenario.days * 86400 // gap) + 2,
        dry=[
            (int(d.start_day * 86400 // gap), int((d.start_day + d.days) * 86400 // gap))
            for d in m.droughts
        ],
    )


def spot_offerings(catalog: Catalog) -> int:
    """How many spot offerings the catalog subset has (for reports)."""
    return sum(o.market is Market.SPOT for o in catalog.offerings)
