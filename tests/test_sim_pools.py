"""Pools in the simulator (issue 18): an ended attempt's instances stay warm on a pooled
offering; the next job there starts on them with no start-up; idle time is billed exactly and
given back after the idle timeout; pools off, every attempt boots its own."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeteer.backends import TraceMarket
from budgeteer.catalog import Catalog
from budgeteer.core.policy import Policy
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.job import Job
from budgeteer.domain.job import JobState as S
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.ledger.billing import amount_usd, is_idle
from budgeteer.sim.run import Arrival, SimRun, simulate
from budgeteer.sim.scenario import build
from budgeteer.sim.schema import load_scenario
from budgeteer.spec.pool import PoolSpec, pool_settings
from builders import EGRESS, THROUGHPUT, make_job, make_offering

T0 = datetime(2026, 12, 4, 1, tzinfo=UTC)
OD = "od"


def _catalog(market: Market = Market.ON_DEMAND) -> Catalog:
    od = make_offering(OD, price=2.0, market=market, startup_seconds=120)
    return Catalog((od,), dict(THROUGHPUT), EGRESS, "test")


def _job(name: str, minutes_after: float, seq: int) -> Job:
    job = make_job(name, hours=0.1, spot=False, seq=seq)
    return dataclasses.replace(job, submitted_at=T0 + timedelta(minutes=minutes_after))


def _run(
    gap_minutes: float,
    *,
    pools: bool = True,
    timeout_minutes: float = 10,
    up: list[bool] | None = None,
    market: Market = Market.ON_DEMAND,
) -> SimRun:
    """Job a at T0 (6 min of work + 2 min boot), job b ``gap_minutes`` after a ends."""
    a = _job("a", 0, 0)
    b = _job("b", 8 + gap_minutes, 1)
    if market is Market.SPOT:
        a, b = (
            dataclasses.replace(j, spot=dataclasses.replace(j.spot, allowed=True)) for j in (a, b)
        )
    avail = np.array(up if up is not None else [True] * 500)
    trace = TraceMarket(avail, 60, T0, prices=np.full(len(avail), 2.0), source="trace")
    settings = {OD: PoolSettings(OD, 0, 4, timeout_minutes * 60, 120)}
    return simulate(
        [Arrival(j.submitted_at, j) for j in (a, b)],
        _catalog(market),
        trace,
        start=T0,
        end=T0 + timedelta(hours=3),
        policy=Policy(use_pools=pools),
        pools=settings,
        cycle_seconds=60,
    )


def _total(run: SimRun) -> Decimal:
    """What the ledger billed — the attempts and, as in the service, the pools' idle time —
    after checking that its idle part is the simulator's own per-instance idle stretches, to
    rounding, each billed to an attempt that had ended by then."""
    ledger = run.store.ledger()
    idle = [e for e in ledger if is_idle(e)]
    ended = {a.id: a.ended_at for a in run.store.attempts()}
    for e in idle:
        end = ended[e.attempt_id]
        assert end is not None
        assert end <= e.start  # the attempt that left the instance warm pays
    billed = sum((e.amount_usd for e in idle), Decimal(0))
    stretches = sum((i.amount_usd for i in run.backend.idle), Decimal(0))
    assert abs(billed - stretches) <= (len(idle) + len(run.backend.idle)) * Decimal("0.5e-8")
    return sum((e.amount_usd for e in ledger), Decimal(0))


def test_the_next_job_starts_on_the_warm_instance_and_the_idle_time_is_billed() -> None:
    run = _run(gap_minutes=3)
    store = run.store
    assert store.job("a").state is store.job("b").state is S.SUCCEEDED
    [a], [b] = store.attempts("a"), store.attempts("b")
    assert a.ended_at is not None
    assert b.ended_at is not None
    assert run.backend.warm_starts == {"b.1"}
    # b ran its 6 minutes of work with no boot before it
    assert (b.ended_at - b.started_at) == pytest.approx(
        timedelta(minutes=6), abs=timedelta(seconds=1)
    )
    between, after = run.backend.idle
    assert (between.start, between.end) == (a.ended_at, b.started_at)  # exactly the gap
    assert between.amount_usd == amount_usd(Decimal(2), 1, between.start, between.end)
    # after b, idle for the timeout, then given back
    assert (after.start, after.end) == (b.ended_at, b.ended_at + timedelta(minutes=10))
    # the one instance was billed from a's launch until it was given back, no gap nor overlap
    entries = len(run.store.ledger())  # each rounded to 1e-8 USD
    whole = amount_usd(Decimal(2), 1, a.started_at, after.end)
    assert abs(_total(run) - whole) <= entries * Decimal("0.5e-8")
    assert _total(run).quantize(Decimal("0.01")) == whole.quantize(Decimal("0.01"))


def test_an_instance_idle_past_its_timeout_is_given_back() -> None:
    run = _run(gap_minutes=25, timeout_minutes=10)
    [a], [b] = run.store.attempts("a"), run.store.attempts("b")
    assert run.backend.warm_starts == set()  # b booted a fresh instance
    idle, _after_b = run.backend.idle
    assert a.ended_at is not None
    assert (idle.start, idle.end) == (a.ended_at, a.ended_at + timedelta(minutes=10))
    assert b.ended_at is not None
    assert b.ended_at - b.started_at == pytest.approx(
        timedelta(minutes=8), abs=timedelta(seconds=1)
    )


def test_without_pools_every_attempt_boots_its_own() -> None:
    run = _run(gap_minutes=3, pools=False)
    assert run.backend.warm_starts == set()
    assert run.backend.idle == []
    [b] = run.store.attempts("b")
    assert b.ended_at is not None
    assert b.ended_at - b.started_at == pytest.approx(
        timedelta(minutes=8), abs=timedelta(seconds=1)
    )


def test_a_warm_spot_instance_the_market_takes_is_billed_until_it_goes() -> None:
    # spot up for the first 9 minutes, down for 2, then up: a ends at 8 min (idle from then),
    # the market takes the warm instance at 9 min; b (arriving at 11) boots a fresh one
    up = [True] * 9 + [False] * 2 + [True] * 500
    run = _run(gap_minutes=3, up=up, market=Market.SPOT)
    [a] = run.store.attempts("a")
    assert a.ended_at is not None
    assert run.backend.warm_starts == set()
    taken = [i for i in run.backend.idle if i.start == a.ended_at]
    assert [i.end for i in taken] == [T0 + timedelta(minutes=9)]


def _batched(batch_wait_minutes: float) -> SimRun:
    """Two 6-minute jobs a minute apart on a pool that gives idle instances back at once and
    lets a job wait ``batch_wait_minutes`` to run back to back."""
    jobs = [_job("a", 0, 0), _job("b", 1, 1)]
    avail = np.ones(500, dtype=bool)
    trace = TraceMarket(avail, 60, T0, prices=np.full(500, 2.0), source="trace")
    settings = {OD: PoolSettings(OD, 0, 4, 0.0, 120, batch_wait_minutes * 60)}
    return simulate(
        [Arrival(j.submitted_at, j) for j in jobs],
        _catalog(),
        trace,
        start=T0,
        end=T0 + timedelta(hours=2),
        pools=settings,
        cycle_seconds=60,
    )


def test_two_short_jobs_run_back_to_back_on_one_instance() -> None:
    run = _batched(30)
    store = run.store
    assert store.job("a").state is store.job("b").state is S.SUCCEEDED
    [a], [b] = store.attempts("a"), store.attempts("b")
    assert a.ended_at is not None
    assert b.ended_at is not None
    # a waited for a companion; b's arrival launched it (one boot); b ran on its instance
    # the moment a ended, with no boot of its own
    assert a.started_at == T0 + timedelta(minutes=1)
    assert b.started_at == a.ended_at
    assert run.backend.warm_starts == {"b.1"}
    assert b.ended_at - b.started_at == pytest.approx(
        timedelta(minutes=6), abs=timedelta(seconds=1)
    )
    held = [e for e in store.events("b") if "batched" in (e.cause or "")]
    assert held, store.events("b")
    # each job billed its own time; the one instance billed from a's launch to b's end, exactly
    assert all(i.end == i.start for i in run.backend.idle)  # given back the moment b ended
    for attempt in (a, b):  # billed in pieces, each rounded to 1e-8 USD
        entries = store.ledger(attempt.job_id)
        billed = sum((e.amount_usd for e in entries), Decimal(0))
        own = amount_usd(Decimal(2), 1, attempt.started_at, attempt.ended_at)
        assert abs(billed - own) <= len(entries) * Decimal("0.5e-8")
    whole = amount_usd(Decimal(2), 1, a.started_at, b.ended_at)
    assert _total(run).quantize(Decimal("0.01")) == whole.quantize(Decimal("0.01"))


def test_without_a_batch_wait_each_job_boots_its_own() -> None:
    run = _batched(0)
    [a], [b] = run.store.attempts("a"), run.store.attempts("b")
    assert (a.started_at, b.started_at) == (T0, T0 + timedelta(minutes=1))
    assert run.backend.warm_starts == set()


def test_pool_declarations_are_checked() -> None:
    offerings = _catalog().offerings
    with pytest.raises(SpecError, match=r"pools\[0\]\.offerings: matches no offering"):
        pool_settings([PoolSpec(offerings="gcp/*")], offerings)
    got = pool_settings([PoolSpec(offerings="o*", max=3, idle_timeout="5m")], offerings)
    assert got[OD] == PoolSettings(OD, 0, 3, 300.0, 120.0)
    got = pool_settings([PoolSpec(offerings="o*", idle_timeout="0s", batch_wait="20m")], offerings)
    assert got[OD] == PoolSettings(OD, 0, None, 0.0, 120.0, 1200.0)
    by_tier = PoolSpec(offerings="o*", batch_wait={"p3": "2h", "P1": "90s"})
    got = pool_settings([by_tier], offerings)
    assert got[OD].batch_wait_by_tier == ((Tier.P1, 90.0), (Tier.P3, 7200.0))
    assert got[OD].batch_wait_seconds == 0.0  # P2, not named, never waits


@pytest.mark.parametrize(
    ("pool", "field", "problem"),
    [
        ("{offerings: '*g4dn.xlarge*', min: 3, max: 2}", "pools[0]", "min (3) is above max (2)"),
        ("{offerings: '*g4dn.xlarge*', idle_timeout: -5m}", "pools[0].idle_timeout", "duration"),
        ("{offerings: '*g4dn.xlarge*', min: -1}", "pools[0].min", "0"),
        ("{offerings: '*g4dn.xlarge*', batch_wait: soon}", "pools[0].batch_wait", "duration"),
        ("{offerings: '*g4dn.xlarge*', batch_wait: -1m}", "pools[0].batch_wait", "duration"),
        ("{offerings: '*g4dn.xlarge*', colour: red}", "pools[0].colour", "unknown field"),
        ("{offerings: 'gcp/*'}", "pools[0].offerings", "matches no offering"),
    ],
)
def test_a_scenario_with_a_bad_pool_names_it(
    tmp_path: Path, pool: str, field: str, problem: str
) -> None:
    bundled = Path(__file__).parent.parent / "scenarios" / "short-burst.yaml"
    text = bundled.read_text().replace("../tests/", f"{bundled.parent.parent}/tests/")
    start = text.index("  - {offerings:")
    end = text.index("\n", start)
    path = tmp_path / "bad.yaml"
    path.write_text(text[:start] + f"  - {pool}" + text[end:])
    with pytest.raises((SpecError, SpecErrors)) as err:
        build(load_scenario(path))
    found = err.value.errors if isinstance(err.value, SpecErrors) else (err.value,)
    assert any(e.field == field and problem in e.problem for e in found), found


def test_idle_goes_to_the_ledger_stretch_by_stretch_and_to_the_end_of_the_simulation() -> None:
    """A two-instance job leaves both warm; a one-instance job takes one; the simulation ends
    with the other still idle. The ledger (as the service bills it) has the two together, then
    the one left, up to the end — nothing lost to an entry sharing its attempt and start."""
    a = dataclasses.replace(make_job("a", hours=0.2, spot=False, workers=(2, 2)), submitted_at=T0)
    b = dataclasses.replace(_job("b", 30, 1), submitted_at=T0 + timedelta(minutes=30))
    end = T0 + timedelta(hours=2)
    run = simulate(
        [Arrival(j.submitted_at, j) for j in (a, b)],
        _catalog(),
        TraceMarket(np.ones(500, bool), 60, T0, prices=np.full(500, 2.0), source="trace"),
        start=T0,
        end=end,
        pools={OD: PoolSettings(OD, 0, 4, 3600 * 5, 120)},
        cycle_seconds=60,
    )
    [att_a], [att_b] = run.store.attempts("a"), run.store.attempts("b")
    assert att_a.instances == 2
    assert att_a.ended_at is not None
    assert att_b.instance_ids[0] in att_a.instance_ids  # b took one of a's warm instances
    idle = sorted(
        ((e.start, e.end, e.instances) for e in run.store.ledger("a") if is_idle(e)),
    )
    assert idle == [(att_a.ended_at, att_b.started_at, 2), (att_b.started_at, end, 1)]
    _total(run)  # the ledger's idle is the simulator's own stretches


# -- properties: one instance, one job at a time; its whole life billed once --------------------


@settings(max_examples=25, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 90), min_size=1, max_size=6),  # minutes after T0
    timeout=st.sampled_from([0, 5, 20]),  # idle timeout, minutes
    wait=st.sampled_from([0, 20]),  # batch wait, minutes
    maximum=st.sampled_from([1, 2, None]),
)
def test_each_instance_runs_one_job_at_a_time_and_is_billed_once_to_the_cent(
    arrivals: list[int], timeout: int, wait: int, maximum: int | None
) -> None:
    jobs = [
        dataclasses.replace(
            make_job(f"j{i}", hours=0.1, spot=False, seq=i, deadline_hours=8),
            submitted_at=T0 + timedelta(minutes=m),
        )
        for i, m in enumerate(sorted(arrivals))
    ]
    avail = np.ones(600, dtype=bool)
    trace = TraceMarket(avail, 60, T0, prices=np.full(600, 2.0), source="trace")
    pool = {OD: PoolSettings(OD, 0, maximum, timeout * 60.0, 120, wait * 60.0)}
    run = simulate(
        [Arrival(j.submitted_at, j) for j in jobs],
        _catalog(),
        trace,
        start=T0,
        end=T0 + timedelta(hours=6),
        pools=pool,
        cycle_seconds=60,
    )
    attempts = run.store.attempts()
    assert all(run.store.job(j.id).state is S.SUCCEEDED for j in jobs)
    # each instance's life: the attempts that ran on it and the stretches it idled, by its id
    life: dict[str, list[tuple[datetime, datetime, str]]] = defaultdict(list)
    for a in attempts:
        assert a.ended_at is not None
        assert len(a.instance_ids) == a.instances == 1
        life[a.instance_ids[0]].append((a.started_at, a.ended_at, a.job_id))
    for i in run.backend.idle:
        assert i.instance_id in life  # idle only after a job left it warm
        life[i.instance_id].append((i.start, i.end, "idle"))
    # one instance per boot: a warm start ran on an instance an earlier attempt had
    assert len(life) == len(attempts) - len(run.backend.warm_starts)
    whole = Decimal(0)
    for spans in life.values():
        spans.sort()
        for (_, end, _), (start, _, _) in itertools.pairwise(spans):
            assert start == end, spans  # no two at once, and no unbilled gap between
        whole += amount_usd(Decimal(2), 1, spans[0][0], spans[-1][1])
    pieces = len(run.store.ledger())  # each rounded to 1e-8 USD
    assert abs(_total(run) - whole) <= pieces * Decimal("0.5e-8")
    assert _total(run).quantize(Decimal("0.01")) == whole.quantize(Decimal("0.01"))
    if maximum is not None:  # the pool never held more than its max at once
        edges = sorted(
            [(s[0], 1) for spans in life.values() for s in spans[:1]]
            + [(s[1], -1) for spans in life.values() for s in spans[-1:]],
            key=lambda e: (e[0], e[1]),
        )
        held = peak = 0
        for _, step in edges:
            held += step
            peak = max(peak, held)
        assert peak <= maximum
