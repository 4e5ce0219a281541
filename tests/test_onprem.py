"""On-prem pools lent to retraining outside business hours: the calendar, the pool as an
offering the planner prices (capacity, closings as an interruption rate), bad pool specs, and a
job revoked at closing time that still finishes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from budgeteer.backends import CalendarMarket, Closed
from budgeteer.domain.job import JobState as S
from budgeteer.domain.offering import Market
from budgeteer.errors import BudgeteerError, SpecErrors
from budgeteer.sim.run import Arrival, simulate
from budgeteer.sim.scenario import build, load_scenario
from builders import make_job

ROOT = Path(__file__).parents[1]
WEEKDAYS = frozenset(range(5))
BUSINESS = Closed(WEEKDAYS, time(8), time(19))  # lent out 19:00-08:00 and at weekends
MONDAY = datetime(2026, 10, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("at", "is_open"),
    [
        (MONDAY.replace(hour=7, minute=59), True),
        (MONDAY.replace(hour=8), False),
        (MONDAY.replace(hour=18, minute=59), False),
        (MONDAY.replace(hour=19), True),
        (MONDAY + timedelta(days=5, hours=12), True),  # Saturday noon
    ],
)
def test_business_hours_close_the_pool(at: datetime, is_open: bool) -> None:
    assert CalendarMarket([BUSINESS]).is_open(at) is is_open


def test_a_window_past_midnight_and_a_time_zone() -> None:
    # closed 22:00-06:00 New York time on Fridays (into Saturday morning)
    night = CalendarMarket([Closed(frozenset({4}), time(22), time(6))], "America/New_York")
    friday = datetime(2026, 10, 9, tzinfo=UTC)  # EDT = UTC-4
    assert night.is_open(friday.replace(hour=12))
    assert not night.is_open(friday.replace(hour=23) + timedelta(hours=4))  # Fri 23:00 local
    assert not night.is_open(friday + timedelta(days=1, hours=9))  # Sat 05:00 local
    assert night.is_open(friday + timedelta(days=1, hours=10, minutes=1))  # Sat 06:01 local
    assert not night.is_open(friday + timedelta(days=1, hours=3))  # Fri 23:00 local


def test_open_share_and_closings() -> None:
    market = CalendarMarket([BUSINESS])
    assert market.open_share() == pytest.approx((168 - 55) / 168)
    assert market.closings_per_week() == 5


POOL: dict[str, Any] = {
    "name": "rack-a",
    "accelerator": "A100",
    "gpus_per_node": 8,
    "nodes": 2,
    "usd_per_node_hour": 9.5,
    "timezone": "UTC",
    "closed": [{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "08:00", "to": "19:00"}],
}


def _scenario(tmp_path: Path, pool: dict[str, Any]) -> Path:
    doc = yaml.safe_load((ROOT / "scenarios" / "quiet-quarter.yaml").read_text())
    doc["market"]["trace"] = str(ROOT / doc["market"]["trace"].removeprefix("../"))
    doc["market"].pop("zones", None)
    doc["onprem"] = [pool]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_pool_is_an_offering_the_planner_can_price(tmp_path: Path) -> None:
    built = build(load_scenario(_scenario(tmp_path, POOL)))
    [pool] = [o for o in built.catalog.offerings if o.market is Market.ON_PREM]
    assert pool.id == "onprem/rack-a/*/8xA100/on_prem"
    assert (pool.accelerator, pool.accelerators_per_instance, pool.max_instances) == ("A100", 8, 2)
    assert pool.usd_per_hour == 9.5
    assert pool.interruption_per_hour == pytest.approx(5 / 113)  # 5 closings in 113 open hours
    saturday = built.start + timedelta(days=2, hours=12)  # 2026-10-01 is a Thursday
    thursday_noon = built.start + timedelta(hours=12)
    assert built.market.available(pool, saturday)
    assert not built.market.available(pool, thursday_noon)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"accelerator": "Z80"}, "onprem[0].accelerator"),
        ({"timezone": "Mars/Olympus"}, "onprem[0].timezone"),
        ({"closed": [{"days": ["mon"], "from": "8am", "to": "19:00"}]}, "onprem[0].closed[0].from"),
        (
            {"closed": [{"days": ["funday"], "from": "08:00", "to": "19:00"}]},
            "onprem[0].closed[0].days[0]",
        ),
        ({"nodes": 0}, "onprem[0].nodes"),
        (
            {
                "closed": [
                    {
                        "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                        "from": "00:00",
                        "to": "00:00",
                    }
                ]
            },
            "onprem[0].closed",
        ),
    ],
)
def test_bad_pools_name_the_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    path = _scenario(tmp_path, {**POOL, **change})
    with pytest.raises(BudgeteerError) as err:
        build(load_scenario(path))
    if isinstance(err.value, SpecErrors):
        assert field in [e.field for e in err.value.errors]
    else:
        assert str(err.value).startswith(f"{field}:")


def test_a_job_on_the_pool_is_revoked_at_closing_time_and_still_finishes(tmp_path: Path) -> None:
    built = build(load_scenario(_scenario(tmp_path, POOL)))
    pool = next(o for o in built.catalog.offerings if o.market is Market.ON_PREM)
    catalog = dataclasses.replace(built.catalog, offerings=(pool,))  # only the pool
    # Wednesday 2026-10-07 03:00 UTC: 5 h before closing; the job needs 8 A100-hours on 1 GPU
    start = datetime(2026, 10, 7, 3, tzinfo=UTC)
    job = dataclasses.replace(
        make_job("nightly", hours=8, deadline_hours=None, spot=False),
        submitted_at=start,
    )
    run = simulate(
        [Arrival(start, job)], catalog, built.market, start=start, end=start + timedelta(days=2)
    )
    store = run.store
    assert store.job("nightly").state is S.SUCCEEDED
    first, *rest = store.attempts("nightly")
    assert first.ended_at is not None
    # closing time, plus the 30 s the notice gives to checkpoint
    assert start.replace(hour=8) <= first.ended_at <= start.replace(hour=8, second=30)
    assert (first.exit_reason or "").startswith("preempted: on-prem pool (closing time) revoked")
    assert rest
    assert rest[-1].started_at >= start.replace(hour=19)  # back when the pool opened again
    billed = sum(e.amount_usd for e in store.ledger("nightly"))
    hours = sum(
        ((a.ended_at or start) - a.started_at).total_seconds() / 3600
        for a in store.attempts("nightly")
    )
    entries = len(store.ledger("nightly"))  # each rounded half-even to the ledger's 1e-8 USD
    assert abs(float(billed) - 9.5 * hours) <= entries * 0.5e-8 + 1e-9


# -- pools in the service (config `onprem:`, the sandbox) -----------------------------------------
RACK = {
    "name": "rack-ny",
    "accelerator": "A100",
    "gpus_per_node": 8,
    "nodes": 2,
    "usd_per_node_hour": 9.5,
    "timezone": "America/New_York",
    "closed": [{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "08:00", "to": "19:00"}],
}


def _service_config(tmp_path: Path, pools: list[dict[str, Any]]) -> Path:
    path = tmp_path / "budgeteer.yaml"
    path.write_text(yaml.safe_dump({"store": "sqlite:///state.db", "onprem": pools}))
    return path


def test_a_pool_in_the_service_config_is_planned_and_its_calendar_enforced(tmp_path: Path) -> None:
    from budgeteer.backends import SandboxBackend  # noqa: PLC0415
    from budgeteer.backends.base import CapacityUnavailable, LaunchRequest, RunState  # noqa: PLC0415
    from budgeteer.clock import ManualClock  # noqa: PLC0415
    from budgeteer.config import load_config  # noqa: PLC0415
    from budgeteer.service.wiring import build as build_service  # noqa: PLC0415

    cfg, root = load_config(_service_config(tmp_path, [RACK]))
    svc = build_service(cfg, root)
    pool = next(o for o in svc.catalog.offerings if o.provider == "onprem")
    assert pool.id == "onprem/rack-ny/*/8xA100/on_prem"
    assert (pool.market, pool.max_instances, pool.usd_per_hour) == (Market.ON_PREM, 2, 9.5)
    assert pool.interruption_per_hour > 0  # its closings, priced in
    sched = svc.scheduler()
    assert pool.id in {o.id for o in sched.catalog.offerings}
    # the sandbox on the service's market: closed on a weekday at noon New York time
    noon = datetime(2026, 12, 2, 17, tzinfo=UTC)  # Wednesday 12:00 EST
    clock = ManualClock(noon)
    sandbox = SandboxBackend(clock, svc._market(), tmp_path / "work", grace_seconds=5)
    request = LaunchRequest(
        "train", 1, pool, ("python3", "-c", "import time; time.sleep(600)"), tmp_path / "ck"
    )
    with pytest.raises(CapacityUnavailable, match="the pool is closed") as err:
        sandbox.launch(request)
    assert err.value.retry_at == datetime(2026, 12, 3, 0, 0, tzinfo=UTC)  # 19:00 EST: it opens
    clock.advance(8 * 3600)  # 20:00 EST: open
    handle = sandbox.launch(request)
    clock.advance(120)
    sandbox.poll()
    clock.advance(12 * 3600)  # 08:00 EST next day: closed — what runs is revoked
    sandbox.poll()
    clock.advance(10)
    sandbox.poll()
    status = sandbox.status(handle)
    for _ in range(50):
        if status.state.is_final:
            break
        clock.advance(1)
        sandbox.poll()
        status = sandbox.status(handle)
    assert status.state is RunState.PREEMPTED
    assert "the pool closed" in status.reason


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"accelerator": "Z9000"}, "onprem[0].accelerator"),
        ({"timezone": "Mars/Olympus"}, "onprem[0].timezone"),
        ({"nodes": 0}, "onprem[0].nodes"),
        (
            {
                "closed": [
                    {
                        "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                        "from": "00:00",
                        "to": "00:00",
                    }
                ]
            },
            "onprem[0].closed",
        ),
    ],
)
def test_bad_pools_in_the_service_config_are_refused_by_field(
    tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    from budgeteer.config import load_config  # noqa: PLC0415
    from budgeteer.errors import SpecError  # noqa: PLC0415
    from budgeteer.service.wiring import build as build_service  # noqa: PLC0415

    path = _service_config(tmp_path, [{**RACK, **change}])
    with pytest.raises((SpecErrors, SpecError)) as err:
        build_service(*load_config(path))
    found = err.value
    fields = {e.field for e in found.errors} if isinstance(found, SpecErrors) else {found.field}
    assert field in fields
