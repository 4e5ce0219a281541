"""Pools that boot with no job (issue 18): a pool's ``min`` and its scheduled ``warm`` windows
boot instances ahead of the jobs, on the sandbox; their idle time — start-up included, until a
job takes them or they are given back — is a charge to the pool's team, exact to the digit,
counted in that team's spend, kept across a restart."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeteer.backends import SandboxBackend, TraceMarket
from budgeteer.backends.warm import PoolStateError
from budgeteer.catalog import Catalog, load_catalog
from budgeteer.clock import ManualClock
from budgeteer.core.policy import Policy
from budgeteer.core.pools import PoolSettings, WarmWindow
from budgeteer.domain.job import Job
from budgeteer.domain.job import JobState as S
from budgeteer.ledger.billing import IDLE_SOURCE, amount_usd, is_idle
from budgeteer.scheduler import Scheduler
from budgeteer.sim.run import Arrival, SimRun, simulate
from budgeteer.store import PoolCharge, SqlStore
from builders import EGRESS, THROUGHPUT, make_job, make_offering
from test_loop_e2e import ARGS, SCRIPT
from test_sandbox_pools import _loop

T0 = datetime(2026, 12, 4, 1, tzinfo=UTC)
PRICE = Decimal("3.0")
BOOT = 120.0
OD = make_offering("od", price=float(PRICE), startup_seconds=BOOT)


def _world(
    tmp_path: Path, pool: PoolSettings, store: SqlStore | None = None
) -> tuple[Scheduler, SqlStore, ManualClock, SandboxBackend]:
    catalog = Catalog((OD,), dict(THROUGHPUT), EGRESS, "test")
    clock = ManualClock(T0)
    store = store or SqlStore(f"sqlite:///{tmp_path / 'b.db'}")
    market = TraceMarket(np.array([False]), 60, T0)
    backend = SandboxBackend(clock, market, tmp_path / "work", pools={"od": pool}, offerings=(OD,))
    return Scheduler(store, backend, catalog, clock, tmp_path / "ckpt"), store, clock, backend


def _team_spend(sched: Scheduler, team: str) -> Decimal:
    records = sched.snapshot().spend
    return sum((r.amount_usd for r in records if r.team == team), Decimal(0))


def test_a_min_pool_boots_before_any_job_and_its_team_pays_until_a_job_takes_it(
    tmp_path: Path,
) -> None:
    pool = PoolSettings("od", 1, 4, 60.0, BOOT, 0.0, (), "ml")
    sched, store, clock, backend = _world(tmp_path, pool)
    sched.cycle()  # nothing queued: the pool boots its one instance
    assert backend.warm_instances() == {}  # booting: not warm before its start-up ends
    clock.advance(BOOT / 2)
    sched.cycle()
    assert backend.warm_instances() == {}  # still booting, and not booted twice
    clock.advance(BOOT / 2)
    sched.cycle()
    assert backend.warm_instances() == {"od": 1}
    assert store.pool_charges() == []  # nothing billed while it still idles

    clock.advance(600)  # ten minutes later a job arrives and starts on it at once
    job = dataclasses.replace(
        make_job("a", hours=0.05, spot=False, team="fraud"),
        submitted_at=clock.now(),
        command=(sys.executable, str(SCRIPT), *ARGS, "--out", str(tmp_path / "a.npy")),
    )
    store.submit([job], at=clock.now())
    taken = clock.now()
    sched.cycle()
    assert backend.warm_starts == {"a.1"}  # no start-up
    [a] = store.attempts("a")
    assert a.started_at == taken
    [charge] = store.pool_charges()
    assert (charge.team, charge.offering_id, charge.start, charge.end) == ("ml", "od", T0, taken)
    assert charge.instance_ids == a.instance_ids  # the instance the pool booted
    assert charge.amount_usd == amount_usd(PRICE, 1, T0, taken) == Decimal("0.60")
    assert charge.price_source.startswith(IDLE_SOURCE)
    assert not [e for e in store.ledger() if is_idle(e)]  # no job paid for the boot
    assert _team_spend(sched, "ml") == charge.amount_usd  # the team's budgets see it

    # a ends: its instance idles, billed to a as any instance an attempt leaves warm — but only
    # up to the pool's idle timeout (60 s): past it, the pool's min keeps it, at the team's cost
    _loop(sched, clock, lambda: store.job("a").state is S.SUCCEEDED, step=5.0)
    clock.advance(300)
    sched.cycle()
    assert backend.warm_instances() == {"od": 1}  # kept; nothing more booted: one is enough
    [a] = store.attempts("a")
    assert a.ended_at is not None
    handed = a.ended_at + timedelta(seconds=60)
    [idle] = [e for e in store.ledger() if is_idle(e)]
    assert (idle.attempt_id, idle.start, idle.end) == (a.id, a.ended_at, handed)
    assert len(store.pool_charges()) == 1  # the team's new stretch has not ended yet

    b = dataclasses.replace(job, id="b", submitted_at=clock.now())
    b = dataclasses.replace(b, command=(*job.command[:-1], str(tmp_path / "b.npy")))
    store.submit([b], at=clock.now())
    sched.cycle()  # b takes the instance: the team's stretch ends there
    [b_attempt] = store.attempts("b")
    assert b_attempt.instance_ids == a.instance_ids
    first, second = store.pool_charges()
    assert (second.team, second.start, second.end) == ("ml", handed, b_attempt.started_at)
    assert second.amount_usd == amount_usd(PRICE, 1, handed, b_attempt.started_at)
    assert _team_spend(sched, "ml") == first.amount_usd + second.amount_usd
    store.close()


def test_a_warm_window_boots_one_start_up_ahead_and_gives_back_after_it(tmp_path: Path) -> None:
    window = WarmWindow("30 1 * * *", 2, 600.0)  # 01:30–01:40, two instances
    pool = PoolSettings("od", 0, 4, 60.0, BOOT, 0.0, (), "ml", (window,))
    sched, store, clock, backend = _world(tmp_path, pool)
    booted_at = None
    states: list[tuple[datetime, int]] = []
    while clock.now() < T0 + timedelta(minutes=50):
        sched.cycle()
        held = backend._pools.held("od")  # booting or warm
        if held and booted_at is None:
            booted_at = clock.now()
        states.append((clock.now(), held))
        clock.advance(60)
    assert booted_at == T0 + timedelta(minutes=28)  # 01:30 less the 2-minute start-up
    assert all(n == 0 for at, n in states if at < booted_at)
    given_back = next(at for at, n in states if at > booted_at and n == 0)
    # the window ends at 01:40; idle since 01:30, past the 60 s timeout: given back then
    assert given_back == T0 + timedelta(minutes=40)
    [charge] = store.pool_charges()  # both instances, one stretch
    assert (charge.team, charge.start, charge.end, charge.instances) == (
        "ml",
        booted_at,
        given_back,
        2,
    )
    assert charge.amount_usd == amount_usd(PRICE, 2, booted_at, given_back) == Decimal("1.20")
    assert _team_spend(sched, "ml") == Decimal("1.20")
    store.close()


def test_booted_instances_survive_a_restart_and_bad_state_is_named(tmp_path: Path) -> None:
    pool = PoolSettings("od", 1, 4, 60.0, BOOT, 0.0, (), "ml")
    sched, store, _, _ = _world(tmp_path, pool)
    sched.cycle()
    kept = json.loads((tmp_path / "work" / "pools.json").read_text())
    [w] = kept["warm"]
    assert (w["job_id"], w["team"], w["since"]) == (
        None,
        "ml",
        (T0 + timedelta(seconds=BOOT)).isoformat(),
    )
    # a new backend on the same workdir takes it back, booting, still the team's
    sched2, _, clock2, backend2 = _world(tmp_path, pool, store)
    clock2.advance(BOOT)
    sched2.cycle()
    assert backend2.warm_instances() == {"od": 1}
    assert backend2._pools.held("od") == 1  # not booted again
    # the pool goes (no longer pooled): the instance is given back, its time the team's
    backend3 = SandboxBackend(
        clock2, TraceMarket(np.array([False]), 60, T0), tmp_path / "work", pools={}, offerings=(OD,)
    )
    assert backend3.warm_instances() == {}
    backend4 = SandboxBackend(
        clock2,
        TraceMarket(np.array([False]), 60, T0),
        tmp_path / "work",
        pools={"other": PoolSettings("other")},
        offerings=(OD,),
    )
    [stretch] = backend4.take_idle()
    assert (stretch.job_id, stretch.team, stretch.start, stretch.end) == (
        None,
        "ml",
        T0,
        T0 + timedelta(seconds=BOOT),
    )
    assert stretch.instance_ids == (w["instance_id"],)
    # a team that is not a string: refused with where and what
    bad = dict(kept, warm=[dict(w, team=7)])
    (tmp_path / "work" / "pools.json").write_text(json.dumps(bad))
    with pytest.raises(PoolStateError, match=r"pools.json: cannot read .*expected a string"):
        _world(tmp_path, pool, store)
    store.close()


def test_a_sandbox_without_the_offering_of_a_booting_pool_is_refused(tmp_path: Path) -> None:
    pool = PoolSettings("gone", 1, 4, 60.0, BOOT, 0.0, (), "ml")
    with pytest.raises(ValueError, match="pool gone: boots for its floor"):
        SandboxBackend(
            ManualClock(T0),
            TraceMarket(np.array([False]), 60, T0),
            tmp_path,
            pools={"gone": pool},
            offerings=(OD,),
        )


# -- the simulator --------------------------------------------------------------------------------
def _simulate(jobs: list[Job], pool: PoolSettings, hours: float, cycle_seconds: float) -> SimRun:
    """``jobs`` on one pooled on-demand offering ``od`` at $2/h (2-minute boot) from 01:00 for
    ``hours``, spot never mattering."""
    od = make_offering("od", price=2.0, startup_seconds=BOOT)
    trace = TraceMarket(np.full(600, True), 60, T0, prices=np.full(600, 2.0), source="trace")
    return simulate(
        [Arrival(j.submitted_at, j) for j in jobs],
        Catalog((od,), dict(THROUGHPUT), EGRESS, "test"),
        trace,
        start=T0,
        end=T0 + timedelta(hours=hours),
        policy=Policy(use_pools=True),
        pools={"od": pool},
        cycle_seconds=cycle_seconds,
    )


def _sim(pool: PoolSettings, arrive_minutes: float) -> SimRun:
    """One 6-minute job (2-minute boot) arriving ``arrive_minutes`` after 01:00, on a pooled
    on-demand offering at $2/h; three simulated hours."""
    job = dataclasses.replace(
        make_job("a", hours=0.1, spot=False, team="fraud"),
        submitted_at=T0 + timedelta(minutes=arrive_minutes),
    )
    # cycles far apart: the window's boot is the kernel's, on time
    return _simulate([job], pool, hours=3, cycle_seconds=600)


def test_the_simulator_boots_for_a_window_on_time_and_the_job_starts_warm() -> None:
    window = WarmWindow("0 2 * * *", 2, 1800.0)  # 02:00–02:30, two instances
    run = _sim(PoolSettings("od", 0, 4, 60.0, BOOT, 0.0, (), "ml", (window,)), 65)
    boot_at = T0 + timedelta(minutes=58)
    assert [(oid, at) for oid, at, _ in run.backend.boots] == [("od", boot_at)] * 2
    [a] = run.store.attempts("a")
    assert run.backend.warm_starts == {"a.1"}  # arrived at 02:05: no start-up
    assert a.ended_at is not None
    assert a.ended_at - a.started_at == pytest.approx(
        timedelta(minutes=6), abs=timedelta(seconds=1)
    )
    charges = run.store.pool_charges()
    assert {c.team for c in charges} == {"ml"}
    # both instances charged to the team from their boot: the one the job took until it took
    # it, the other until the window closed (02:30, past its 60 s timeout)
    per_instance: dict[str, Decimal] = defaultdict(Decimal)
    spans: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for c in charges:
        for iid in c.instance_ids:
            per_instance[iid] += c.amount_usd / c.instances
            spans[iid].append((c.start, c.end))
    [taken] = a.instance_ids
    [other] = set(per_instance) - {taken}
    closes = T0 + timedelta(minutes=90)
    handed = a.ended_at + timedelta(seconds=60)  # a pays for its instance's idle up to the timeout;
    # past it, the open window keeps the instance, at the team's cost, until it closes
    assert spans[taken] == [(boot_at, a.started_at), (handed, closes)]
    [a_idle] = [e for e in run.store.ledger() if is_idle(e)]
    assert (a_idle.start, a_idle.end) == (a.ended_at, handed)
    assert spans[other][0][0] == boot_at
    assert spans[other][-1][1] == closes
    # the simulator's own per-instance stretches and the charges agree to rounding
    stretches = sum((i.amount_usd for i in run.backend.idle), Decimal(0))
    charged = sum((c.amount_usd for c in charges), Decimal(0)) + a_idle.amount_usd
    assert abs(stretches - charged) <= (len(charges) + len(run.backend.idle)) * Decimal("1e-8")
    spans_usd = sum(
        (amount_usd(Decimal(2), 1, x, y) for x, y in [*spans[taken], *spans[other]]), Decimal(0)
    )
    assert abs(charged - a_idle.amount_usd - spans_usd) <= len(charges) * Decimal("1e-8")
    assert spans_usd.quantize(Decimal("0.01")) == Decimal("1.90")  # 7 + 32 + 18 min at $2/h


def test_a_min_pool_in_the_simulator_boots_at_the_start_and_keeps_one() -> None:
    run = _sim(PoolSettings("od", 1, 4, 60.0, BOOT, 0.0, (), "ml"), 30)
    assert [at for _, at, _ in run.backend.boots] == [T0]  # one boot, at the start
    assert run.backend.warm_starts == {"a.1"}
    [a] = run.store.attempts("a")
    assert a.ended_at is not None
    handed = a.ended_at + timedelta(seconds=60)
    # the team's until a took it; a's idle after it up to the timeout; the team's to the end
    charges = [(c.team, c.start, c.end) for c in run.store.pool_charges()]
    assert charges == [("ml", T0, a.started_at), ("ml", handed, T0 + timedelta(hours=3))]
    after = [e for e in run.store.ledger() if is_idle(e)]
    assert [(e.job_id, e.start, e.end) for e in after] == [("a", a.ended_at, handed)]


# -- where a team sees what its pools cost ---------------------------------------------------------
def test_a_pool_charge_shows_in_the_teams_budget_metrics_and_ledger(tmp_path: Path) -> None:
    from api_world import ADMIN, make_world  # noqa: PLC0415

    offering = next(o for o in load_catalog().offerings if o.accelerator == "T4")
    nightly = WarmWindow("0 1 * * *", 2, 1200.0)  # the world starts at 09:00: nothing boots
    pool = PoolSettings(offering.id, 0, 4, 600.0, BOOT, 0.0, (), "growth", (nightly,))
    w = make_world(f"sqlite:///{tmp_path / 'api.db'}", tmp_path, pools={offering.id: pool})
    try:
        rows = w.http.get("/v1/offerings?limit=5000", headers=w.auth(w.growth)).json()
        [view] = [r["pool"] for r in rows["offerings"] if r["id"] == offering.id]
        assert (view["team"], view["warm"]) == (
            "growth",
            [{"at": "0 1 * * *", "instances": 2, "for_seconds": 1200.0}],
        )
        spec = {"id": "growth-monthly", "scope": {"team": "growth"}, "limit_usd": 1000}
        assert w.http.post("/v1/budgets", json=spec, headers=w.auth(ADMIN)).status_code == 201
        now = w.clock.now()
        w.store.add_pool_charge(
            PoolCharge(
                offering.id,
                "growth",
                now,
                now + timedelta(minutes=30),
                Decimal("0.526"),
                Decimal("0.263"),
                f"{IDLE_SOURCE}catalog",
                ("boot-1",),
            )
        )
        w.clock.advance(3600)
        g = w.auth(w.growth)
        status = w.http.get("/v1/budgets/growth-monthly/status", headers=g).json()
        assert status["accrued_usd"] == "0.263000"  # the snapshot's spend book counts it
        assert status["burn_down"][-1]["accrued_usd"] == "0.263000"
        text = w.http.get("/metrics", headers=w.auth(ADMIN)).text
        assert "budgeteer_idle_usd_total 0.263" in text
        spend = [line for line in text.splitlines() if line.startswith("budgeteer_spend_usd_total")]
        assert any('team="growth"' in s and offering.instance_type in s for s in spend), spend
    finally:
        w.store.close()


# -- properties: with floors, every instance's life billed once, and who pays what ------------------
@settings(max_examples=25, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 150), min_size=1, max_size=6),  # minutes after 01:00
    minimum=st.sampled_from([0, 1, 2]),
    window=st.sampled_from([None, 1, 3]),  # instances kept 01:30–02:00, or no window
    timeout=st.sampled_from([0, 5, 20]),  # idle timeout, minutes
    wait=st.sampled_from([0, 20]),  # batch wait, minutes
)
def test_with_floors_each_instance_is_billed_once_and_a_job_pays_at_most_its_timeout(
    arrivals: list[int], minimum: int, window: int | None, timeout: int, wait: int
) -> None:
    jobs = [
        dataclasses.replace(
            make_job(f"j{i}", hours=0.1, spot=False, seq=i, deadline_hours=8, team="fraud"),
            submitted_at=T0 + timedelta(minutes=m),
        )
        for i, m in enumerate(sorted(arrivals))
    ]
    windows = () if window is None else (WarmWindow("30 1 * * *", window, 1800.0),)
    team = "ml" if minimum or windows else None
    pool = PoolSettings("od", minimum, 4, timeout * 60.0, BOOT, wait * 60.0, (), team, windows)
    run = _simulate(jobs, pool, hours=6, cycle_seconds=60)
    assert all(run.store.job(j.id).state is S.SUCCEEDED for j in jobs)
    attempts = run.store.attempts()
    ledger = run.store.ledger()
    charges = run.store.pool_charges()
    assert {c.team for c in charges} <= {"ml"}  # only the pool's team pays for its floor
    # one instance, one job at a time; its whole life — booted or launched — billed once
    life: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for a in attempts:
        assert a.ended_at is not None
        life[a.instance_ids[0]].append((a.started_at, a.ended_at))
    for i in run.backend.idle:
        life[i.instance_id].append((i.start, i.end))
    whole = Decimal(0)
    for spans in life.values():
        spans.sort()
        for (_, a_end), (b_start, _) in itertools.pairwise(spans):
            assert b_start == a_end, spans
        whole += amount_usd(Decimal(2), 1, spans[0][0], spans[-1][1])
    billed = sum((e.amount_usd for e in ledger), Decimal(0)) + sum(
        (c.amount_usd for c in charges), Decimal(0)
    )
    assert abs(billed - whole) <= (len(ledger) + len(charges)) * Decimal("1e-8")
    # a job pays for the idle it leaves only up to the pool's idle timeout
    ended = {a.id: a.ended_at for a in attempts}
    for e in ledger:
        if is_idle(e):
            left = ended[e.attempt_id]
            assert left is not None
            assert left <= e.start
            assert e.end <= left + timedelta(minutes=timeout)
    # the floor held: never fewer instances than min, nor than the window's while it is open
    alive = [(spans[0][0], spans[-1][1]) for spans in life.values()]
    for minute in range(0, 6 * 60, 5):
        t = T0 + timedelta(minutes=minute)
        floor = max(minimum, window or 0) if 30 <= minute < 60 else minimum
        assert sum(a <= t < b for a, b in alive) >= floor, (minute, alive)


# -- a pool only some teams use --------------------------------------------------------------------
def test_only_the_pools_teams_take_its_warm_instances_or_leave_theirs_there() -> None:
    """fraud's a (01:00, 6 min + boot) leaves its instance warm; growth's b (01:10) boots its
    own — the pool is fraud's — and gives it back when it ends; fraud's c (01:12) takes a's."""
    pool = PoolSettings("od", 0, 4, 1800.0, BOOT, 0.0, teams=("fraud",))
    jobs = [
        dataclasses.replace(
            make_job(name, hours=0.1, spot=False, team=team, seq=i),
            submitted_at=T0 + timedelta(minutes=minute),
        )
        for i, (name, team, minute) in enumerate(
            (("a", "fraud", 0), ("b", "growth", 10), ("c", "fraud", 12))
        )
    ]
    run = _simulate(jobs, pool, hours=2, cycle_seconds=60)
    [a], [b], [c] = (run.store.attempts(j) for j in "abc")
    assert run.backend.warm_starts == {"c.1"}
    assert c.instance_ids == a.instance_ids
    assert b.instance_ids != a.instance_ids
    idle_ids = {i.instance_id for i in run.backend.idle}
    assert b.instance_ids[0] not in idle_ids  # growth's instance was not kept
    assert not [e for e in run.store.ledger("b") if is_idle(e)]


def test_a_pools_teams_are_declared_by_name() -> None:
    from budgeteer.spec.pool import PoolSpec, pool_settings  # noqa: PLC0415

    spec = PoolSpec.model_validate({"offerings": "od", "teams": ["fraud", "risk", "fraud"]})
    [settings] = pool_settings([spec], [OD]).values()
    assert settings.teams == ("fraud", "risk")
    assert settings.serves("risk")
    assert not settings.serves("growth")
    assert PoolSettings("od").serves("anyone")  # no teams: every team's
    with pytest.raises(ValueError, match="teams"):
        PoolSpec.model_validate({"offerings": "od", "teams": ["no spaces"]})


def test_the_sandboxs_warm_instances_serve_only_the_pools_teams(tmp_path: Path) -> None:
    from budgeteer.backends.warm import FileDoc, WarmInstances  # noqa: PLC0415

    pool = PoolSettings("od", 0, 4, 600.0, BOOT, 0.0, teams=("fraud",))
    warm = WarmInstances({"od": pool}, FileDoc(tmp_path / "pools.json"))
    warm.left(OD, "g", 1, ("i-g",), T0, None, "growth")
    assert warm.counts() == {}  # growth's instance is not kept: the pool is fraud's
    warm.left(OD, "f", 1, ("i-f",), T0, None, "fraud")
    assert warm.counts() == {"od": 1}
    later = T0 + timedelta(minutes=1)
    assert warm.take("od", 1, later, None, "growth") is None
    assert warm.take("od", 1, later, None, "fraud") == ("i-f",)


# -- data already on a warm instance: no download ---------------------------------------------------
def test_in_the_simulator_a_warm_instance_holding_the_data_skips_the_download() -> None:
    """Three 6-minute jobs back to back on one pooled instance, each reading 450 GB (12 minutes
    at 2,250 GB/h): a boots and downloads; b, with the same dataset, starts on a's warm
    instance with neither; c, with another dataset, on the same instance downloads its own."""
    from budgeteer.domain.job import DataSource  # noqa: PLC0415

    pool = PoolSettings("od", 0, 1, 3600.0, BOOT, 0.0)
    plan = (("a", "s3://d/clicks", 0), ("b", "s3://d/clicks", 25), ("c", "s3://d/views", 40))
    jobs = [
        dataclasses.replace(
            make_job(name, hours=0.1, spot=False, seq=i),
            submitted_at=T0 + timedelta(minutes=minute),
            data=DataSource("aws/us-east-1", 450.0, uri),
        )
        for i, (name, uri, minute) in enumerate(plan)
    ]
    run = _simulate(jobs, pool, hours=3, cycle_seconds=60)
    [a], [b], [c] = (run.store.attempts(j) for j in "abc")
    assert run.backend.warm_starts == {"b.1", "c.1"}
    assert a.instance_ids == b.instance_ids == c.instance_ids
    minutes = [
        round((x.ended_at - x.started_at).total_seconds() / 60)  # type: ignore[operator]
        for x in (a, b, c)
    ]
    assert minutes == [2 + 12 + 6, 6, 12 + 6]  # boot + download + work; work; download + work
