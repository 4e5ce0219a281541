"""Pools on the sandbox, end to end (issue 18): two short training jobs submitted together run
back to back on one warm instance — one start-up — each with the model of a separate run; the
ledger splits the instance's time exactly between them and bills the idle time after them to
the attempt that left the instance warm."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from budgeteer.backends import Handle, LaunchRequest, SandboxBackend, TraceMarket
from budgeteer.backends.base import CapacityUnavailable
from budgeteer.backends.warm import PoolStateError
from budgeteer.catalog import Catalog, load_catalog
from budgeteer.clock import ManualClock
from budgeteer.config import load_config
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.job import Job
from budgeteer.domain.job import JobState as S
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.ledger.billing import IDLE_SOURCE, amount_usd, is_idle
from budgeteer.ledger.pools import pool_history
from budgeteer.scheduler import Scheduler
from budgeteer.service.wiring import build as build_service
from budgeteer.store import SqlStore
from budgeteer.store.base import LedgerEntry
from builders import EGRESS, THROUGHPUT, make_job, make_offering
from test_loop_e2e import ARGS, SCRIPT, _baseline

T0 = datetime(2026, 12, 4, 1, tzinfo=UTC)
PRICE = Decimal("3.0")
BOOT = 120.0


def _loop(sched: Scheduler, clock: ManualClock, until: Callable[[], bool], step: float) -> None:
    for _ in range(4000):
        sched.cycle()
        if until():
            return
        clock.advance(step)
        time.sleep(0.01)
    raise AssertionError("the loop did not get there")


def _world(
    tmp_path: Path, batch_wait: float, idle_timeout: float = 60.0
) -> tuple[Scheduler, SqlStore, ManualClock, SandboxBackend]:
    od = make_offering("od", price=float(PRICE), startup_seconds=BOOT)
    catalog = Catalog((od,), dict(THROUGHPUT), EGRESS, "test")
    clock = ManualClock(T0)
    store = SqlStore(f"sqlite:///{tmp_path / 'b.db'}")
    market = TraceMarket(np.array([False]), 60, T0)
    pools = {"od": PoolSettings("od", 0, 4, idle_timeout, BOOT, batch_wait)}
    backend = SandboxBackend(clock, market, tmp_path / "work", pools=pools)
    return Scheduler(store, backend, catalog, clock, tmp_path / "ckpt"), store, clock, backend


def _jobs(tmp_path: Path) -> list[Job]:
    return [
        dataclasses.replace(
            make_job(name, hours=0.05, spot=False, seq=i),
            submitted_at=T0,
            command=(sys.executable, str(SCRIPT), *ARGS, "--out", str(tmp_path / f"{name}.npy")),
        )
        for i, name in enumerate(("a", "b"))
    ]


def test_two_short_jobs_share_one_warm_instance(tmp_path: Path) -> None:
    baseline = _baseline(tmp_path)
    sched, store, clock, backend = _world(tmp_path, batch_wait=1800)
    store.submit(_jobs(tmp_path), at=T0)

    sched.cycle()
    assert store.job("a").state is S.PROVISIONING  # a boots the instance
    assert store.job("b").state is S.HELD  # b waits to run after it, on the same instance
    b_cause = store.events("b")[-1].cause
    assert b_cause.startswith("batched: runs on od"), b_cause

    _loop(sched, clock, lambda: store.job("b").state.is_terminal, step=5.0)
    assert store.job("a").state is store.job("b").state is S.SUCCEEDED
    [a], [b] = store.attempts("a"), store.attempts("b")
    assert a.ended_at is not None
    assert b.ended_at is not None
    assert b.started_at == a.ended_at  # the moment a ended, b took its instance
    assert backend.warm_starts == {"b.1"}  # one start-up for the two
    b_running = next(e.at for e in store.events("b") if e.to_state is S.RUNNING)
    assert b_running - b.started_at < timedelta(seconds=BOOT)  # no boot before b ran
    for name in "ab":  # each trained the model a separate run trains
        assert np.array_equal(np.load(baseline), np.load(tmp_path / f"{name}.npy"))

    # b ended; the instance idles until the pool's timeout (60 s), then is given back
    _loop(sched, clock, lambda: backend.warm_instances() == {}, step=5.0)
    released = clock.now()
    ledger = store.ledger()
    idle = [e for e in ledger if is_idle(e)]
    assert [(e.job_id, e.attempt_id, e.start) for e in idle] == [("b", b.id, b.ended_at)]
    assert idle[0].end == released
    assert released - b.ended_at >= timedelta(seconds=60)
    assert idle[0].price_source.startswith("idle in pool: ")
    assert idle[0].amount_usd == amount_usd(PRICE, 1, b.ended_at, released)
    # each attempt billed its own time; with the idle, the one instance's whole life, exactly
    for attempt in (a, b):
        own = [e for e in ledger if e.attempt_id == attempt.id and not is_idle(e)]
        billed = sum((e.amount_usd for e in own), Decimal(0))
        assert attempt.ended_at is not None
        expected = amount_usd(PRICE, 1, attempt.started_at, attempt.ended_at)
        assert abs(billed - expected) <= len(own) * Decimal("0.5e-8")
    total = sum((e.amount_usd for e in ledger), Decimal(0))
    whole = amount_usd(PRICE, 1, a.started_at, released)
    assert abs(total - whole) <= len(ledger) * Decimal("0.5e-8")
    # one instance, one id: b ran on a's; the dashboard's history reads the pool back from it
    assert b.instance_ids == a.instance_ids
    history = pool_history(["od"], store.attempts(), ledger, T0, released + timedelta(hours=1))
    h = history["od"]
    assert (h.launches, h.warm_starts) == (2, 1)
    assert [s[1:] for s in h.steps] == [(1, 0), (0, 1), (0, 0)]  # never two at once
    assert [s[0] for s in h.steps] == [a.started_at, b.ended_at, released]
    assert h.idle_usd == idle[0].amount_usd.quantize(Decimal("0.01"))
    assert h.idle_hours == (Decimal((released - b.ended_at).total_seconds()) / 3600).quantize(
        Decimal("0.0001")
    )
    store.close()


def test_without_a_batch_wait_each_job_boots_its_own(tmp_path: Path) -> None:
    sched, store, clock, backend = _world(tmp_path, batch_wait=0, idle_timeout=0)
    store.submit(_jobs(tmp_path), at=T0)
    sched.cycle()
    assert store.job("a").state is store.job("b").state is S.PROVISIONING
    _loop(sched, clock, lambda: all(store.job(j).state.is_terminal for j in "ab"), step=5.0)
    assert backend.warm_starts == set()
    assert not [e for e in store.ledger() if is_idle(e)]  # given back the moment each ended
    store.close()


# -- pools in the service's config (`pools:`, the sandbox) ----------------------------------------
def _config(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "budgeteer.yaml"
    path.write_text(yaml.safe_dump({"store": "sqlite:///state.db", **doc}))
    return path


def test_pools_in_the_config_reach_the_sandbox(tmp_path: Path) -> None:
    pool = {"offerings": "aws/us-east-1/*/g4dn.xlarge/*", "max": 4, "batch_wait": "20m"}
    svc = build_service(*load_config(_config(tmp_path, {"pools": [pool]})))
    sched = svc.scheduler()
    assert isinstance(sched.backend, SandboxBackend)
    settings = sched.backend.pool_settings()
    assert settings
    assert all("g4dn.xlarge" in oid for oid in settings)
    first = next(iter(settings.values()))
    assert (first.maximum, first.batch_wait_seconds, first.idle_timeout_seconds) == (4, 1200, 600)
    # the planner sees them: each cycle's snapshot carries the pools that batch
    assert {v.settings.name for v in sched.snapshot().pools} == set(settings)


@pytest.mark.parametrize(
    ("doc", "field", "problem"),
    [
        ({"pools": [{"offerings": "onprem/*"}]}, "pools[0].offerings", "matches no offering"),
        ({"pools": [{"offerings": "*", "min": 3, "max": 1}]}, "pools[0]", "above max (1)"),
        ({"pools": [{"offerings": "*", "idle_timeout": "-1m"}]}, "pools[0].idle_timeout", "-1m"),
        ({"pools": [{"offerings": "*", "batch_wait": "later"}]}, "pools[0].batch_wait", "later"),
        ({"pools": [{"offerings": "*", "colour": "red"}]}, "pools[0].colour", "unknown field"),
        ({"pools": [{"offerings": "*", "min": 1}]}, "pools[0]", "team: required with min"),
        (
            {
                "pools": [
                    {
                        "offerings": "*",
                        "team": "ml",
                        "warm": [{"at": "0 2 * *", "instances": 1, "for": "1h"}],
                    }
                ]
            },
            "pools[0].warm[0].at",
            "expected 5 fields",
        ),
        (
            {
                "pools": [
                    {
                        "offerings": "*",
                        "team": "ml",
                        "warm": [{"at": "0 2 * * *", "instances": 0, "for": "1h"}],
                    }
                ]
            },
            "pools[0].warm[0].instances",
            "greater than or equal to 1",
        ),
        (
            {
                "pools": [
                    {
                        "offerings": "*",
                        "team": "ml",
                        "max": 2,
                        "warm": [{"at": "0 2 * * *", "instances": 3, "for": "1h"}],
                    }
                ]
            },
            "pools[0]",
            "warm[0].instances (3) is above max (2)",
        ),
        (
            {
                "pools": [
                    {
                        "offerings": "*",
                        "team": "ml",
                        "warm": [{"at": "0 2 * * *", "instances": 1, "for": "-5m"}],
                    }
                ]
            },
            "pools[0].warm[0].for",
            "-5m",
        ),
        (
            {"pools": [{"offerings": "*", "min": 1, "team": "no spaces"}]},
            "pools[0].team",
            "pattern",
        ),
        (
            {"pools": [{"offerings": "*", "batch_wait": {"P0": "5m"}}]},
            "pools[0].batch_wait",
            "P0 jobs never wait",
        ),
        ({"pools": [{"offerings": "*", "batch_wait": {"P7": "5m"}}]}, "pools[0].batch_wait", "P7"),
        (
            {"pools": [{"offerings": "*", "batch_wait": {"P2": "soon"}}]},
            "pools[0].batch_wait",
            "soon",
        ),
        (
            {
                "pools": [{"offerings": "*", "min": 1, "team": "ml"}],
                "backend": {
                    "kind": "ray",
                    "address": "http://127.0.0.1:8265",
                    "placements": {"aws/us-east-1/*/g4dn.xlarge/on_demand": "gpu"},
                },
            },
            "",
            "pools[0].min: on ray the cluster keeps and removes its nodes",
        ),
        (
            {
                "pools": [{"offerings": "*", "teams": ["ml"]}],
                "backend": {
                    "kind": "ray",
                    "address": "http://127.0.0.1:8265",
                    "placements": {"aws/us-east-1/*/g4dn.xlarge/on_demand": "gpu"},
                },
            },
            "",
            "pools[0].teams: on ray the cluster keeps and removes its nodes",
        ),
        (
            {
                "pools": [{"offerings": "*", "idle_timeout": "5m"}],
                "backend": {
                    "kind": "slurm",
                    "placements": {"aws/us-east-1/*/g4dn.xlarge/on_demand": {"partition": "a"}},
                },
            },
            "",
            "pools[0].idle_timeout: on slurm the cluster keeps and removes its nodes",
        ),
    ],
)
def test_bad_pools_in_the_config_are_refused_by_field(
    tmp_path: Path, doc: dict[str, Any], field: str, problem: str
) -> None:
    with pytest.raises((SpecErrors, SpecError)) as err:
        build_service(*load_config(_config(tmp_path, doc))).scheduler()
    found = err.value.errors if isinstance(err.value, SpecErrors) else (err.value,)
    assert any(field in e.field and problem in e.problem for e in found), found


def test_idle_spend_shows_in_the_metrics(tmp_path: Path) -> None:
    from api_world import ADMIN, bill, job_spec, make_world  # noqa: PLC0415

    w = make_world(f"sqlite:///{tmp_path / 'api.db'}", tmp_path)
    try:
        job_id = w.http.post("/v1/jobs", json=job_spec(), headers=w.auth(w.growth)).json()["id"]
        bill(w, job_id, "2.00")
        [attempt] = w.store.attempts(job_id)
        start = w.clock.now() + timedelta(hours=1)
        w.store.add_ledger_entry(
            LedgerEntry(
                attempt.id,
                job_id,
                start,
                start + timedelta(minutes=15),
                Decimal("2.00"),
                Decimal("0.50"),
                f"{IDLE_SOURCE}catalog",
            )
        )
        text = w.http.get("/metrics", headers=w.auth(ADMIN)).text
        assert "budgeteer_idle_usd_total 0.5" in text
    finally:
        w.store.close()


def test_pools_show_under_offerings_and_in_the_metrics(tmp_path: Path) -> None:
    from api_world import ADMIN, job_spec, make_world  # noqa: PLC0415

    t4 = [o.id for o in load_catalog().offerings if o.accelerator == "T4"]
    pools = {oid: PoolSettings(oid, 0, 3, 600.0, BOOT, 900.0, team="growth") for oid in t4}
    w = make_world(f"sqlite:///{tmp_path / 'api.db'}", tmp_path, pools=pools)
    try:
        spec = job_spec(resources={"accelerators": ["T4"]}, spot={"allowed": False})
        job_id = w.http.post("/v1/jobs", json=spec, headers=w.auth(w.growth)).json()["id"]
        _loop(w.sched, w.clock, lambda: w.store.job(job_id).state.is_terminal, step=60.0)
        [attempt] = w.store.attempts(job_id)
        od = attempt.offering_id
        view = w.http.get(f"/v1/jobs/{job_id}", headers=w.auth(w.growth)).json()
        assert view["placement"]["instance_ids"] == list(attempt.instance_ids) == [f"{job_id}.1-0"]
        rows = w.http.get("/v1/offerings?limit=5000", headers=w.auth(w.growth)).json()
        pooled = {r["id"]: r["pool"] for r in rows["offerings"] if r["pool"]}
        assert set(pooled) == set(t4)
        assert {k: v for k, v in pooled.items() if v["warm_instances"]} == {
            od: {
                "min": 0,
                "max": 3,
                "idle_timeout_seconds": 600.0,
                "batch_wait_seconds": 900.0,
                "batch_wait_seconds_by_tier": {},
                "warm_instances": 1,  # the job's instance, idle since it ended
                "warm_data": {},  # its job named no dataset
                "team": "growth",
                "warm": [],
            }
        }
        text = w.http.get("/metrics", headers=w.auth(ADMIN)).text
        assert f'budgeteer_pool_warm_instances{{offering="{od}"}} 1.0' in text
        # the dashboard: a row per pool, the job's offering with one warm instance and its
        # size over the day (one busy, then one idle)
        page = w.http.get("/", headers=w.auth(w.growth)).text
        assert page.count('<tr data-pool="') == len(t4)
        row = page.split(f'<tr data-pool="{od}">')[1].split("</tr>")[0]
        cells = [c.split(">")[-1] for c in row.split("</td>")[:-1]]
        assert cells[1:6] == ["3", "0", "1", "1", "0"]  # max, busy, warm, launches, warm starts
        assert 'class="pool-size"' in page
        assert 'class="busy"' in page
    finally:
        w.store.close()


# -- the sandbox's pool on its own: instances of one attempt, a restart ---------------------------
def _pooled_sandbox(tmp_path: Path, clock: ManualClock, timeout: float) -> SandboxBackend:
    od = make_offering("od", price=float(PRICE), startup_seconds=BOOT)
    return SandboxBackend(
        clock,
        TraceMarket(np.array([False]), 60, T0),
        tmp_path / "work",
        pools={"od": PoolSettings("od", 0, 4, timeout, BOOT, 0.0)},
        offerings=(od,),
    )


def _run(
    backend: SandboxBackend, clock: ManualClock, job: str, instances: int, data: str | None = None
) -> Handle:
    od = make_offering("od", price=float(PRICE), startup_seconds=BOOT)
    request = LaunchRequest(
        job,
        1,
        od,
        (sys.executable, "-c", "0"),
        Path("/tmp") / job,
        instances=instances,
        data_uri=data,
    )
    handle = backend.launch(request)
    for _ in range(2000):
        if backend.status(handle).state.is_final:
            return handle
        clock.advance(1)
        time.sleep(0.01)
    raise AssertionError(f"{job} did not finish")


def test_the_instances_one_attempt_left_warm_are_billed_together_then_apart(
    tmp_path: Path,
) -> None:
    clock = ManualClock(T0)
    backend = _pooled_sandbox(tmp_path, clock, timeout=600.0)
    first = _run(backend, clock, "a", 2)  # ends: two instances warm
    left = clock.now()
    assert backend.warm_instances() == {"od": 2}
    clock.advance(60)
    second = _run(backend, clock, "b", 1)  # takes one of them at once, no boot
    taken = second.launched_at
    assert set(second.instance_ids) < set(first.instance_ids)
    clock.advance(900)  # past the timeout: the other goes back
    backend.release_idle()
    released = clock.now()
    stretches = [(i.job_id, i.start, i.end, i.instances) for i in backend.take_idle()]
    # both idle from a's end until b took one; then the other alone until it went back; then
    # b's own instance, idle since b ended (the same moment, both past the timeout)
    assert stretches[:2] == [("a", left, taken, 2), ("a", taken, released, 1)]
    assert {s[0] for s in stretches[2:]} == {"b"}
    assert backend.warm_instances() == {}


def test_a_restarted_sandbox_keeps_its_warm_instances(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    backend = _pooled_sandbox(tmp_path, clock, timeout=3600.0)
    first = _run(backend, clock, "a", 1)
    left = clock.now()
    clock.advance(300)
    # the service stops; a new sandbox on the same workdir takes the instance back, still warm
    again = _pooled_sandbox(tmp_path, clock, timeout=3600.0)
    assert again.warm_instances() == {"od": 1}
    assert again.take_idle() == []  # nothing given back: nothing billed yet
    second = _run(again, clock, "b", 1)
    assert second.instance_ids == first.instance_ids  # the same instance, no boot
    [stretch] = again.take_idle()
    assert (stretch.job_id, stretch.start, stretch.end) == ("a", left, second.launched_at)
    # a restart with the pool gone from the config gives the instance b left back, billed
    clock.advance(120)
    gone_at = clock.now()
    unpooled = SandboxBackend(
        clock,
        TraceMarket(np.array([False]), 60, T0),
        tmp_path / "work",
        pools={"other": PoolSettings("other")},
        offerings=(),
    )
    [stretch] = unpooled.take_idle()
    assert (stretch.job_id, stretch.end) == ("b", gone_at)
    assert unpooled.warm_instances() == {}


def test_an_unreadable_pools_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "pools.json").write_text('{"warm": [{"since": "yesterday"}]}')
    with pytest.raises(PoolStateError, match=r"pools\.json: cannot read the pools' state"):
        _pooled_sandbox(tmp_path, ManualClock(T0), timeout=60.0)
    warm = {
        "since": T0.isoformat(),
        "offering_id": "od",
        "job_id": "a",
        "attempt": 1,
        "instance_id": "a.1-0",
        "billed_from": T0.isoformat(),
    }
    (tmp_path / "work" / "pools.json").write_text(json.dumps({"warm": [warm], "idle": []}))
    assert _pooled_sandbox(tmp_path, ManualClock(T0), timeout=60.0).warm_data() == {}  # older
    (tmp_path / "work" / "pools.json").write_text(
        json.dumps({"warm": [warm | {"data": ["s3://x"]}], "idle": []})
    )
    with pytest.raises(PoolStateError, match=r"expected a string or null, got \['s3://x'\]"):
        _pooled_sandbox(tmp_path, ManualClock(T0), timeout=60.0)


def test_the_sandbox_holds_to_a_pools_max_itself(tmp_path: Path) -> None:
    """The planner plans within a pool's ``max``; a launch beyond it (a planner bug, a second
    scheduler) is refused by the backend, with the reason, and a warm instance is given back
    to make room for a fresh launch within it."""
    clock = ManualClock(T0)
    od = make_offering("od", price=float(PRICE), startup_seconds=BOOT)  # no capacity limit
    backend = SandboxBackend(
        clock,
        TraceMarket(np.array([False]), 60, T0),
        tmp_path / "work",
        pools={"od": PoolSettings("od", 0, 2, 3600.0, BOOT, 0.0)},
        offerings=(od,),
    )

    def request(job: str, instances: int, seconds: float = 60) -> LaunchRequest:
        sleep = (sys.executable, "-c", f"import time; time.sleep({seconds})")
        return LaunchRequest(job, 1, od, sleep, tmp_path / job, instances=instances)

    with pytest.raises(
        CapacityUnavailable, match=r"0 of 2 instances are in use, 3 asked for \(the pool's max\)"
    ):
        backend.launch(request("wide", 3))
    running = backend.launch(request("a", 2, seconds=2))  # ends by itself: leaves both warm
    with pytest.raises(CapacityUnavailable, match=r"2 of 2 instances are in use"):
        backend.launch(request("b", 1))
    for _ in range(2000):
        if backend.status(running).state.is_final:
            break
        clock.advance(1)
        time.sleep(0.01)
    assert backend.warm_instances() == {"od": 2}  # both warm, the pool full
    # a one-instance job takes one warm; a two-instance one then needs a fresh boot beside it:
    # room is made by giving the other warm instance back, within the max
    taken = backend.launch(request("c", 1))
    assert taken.launched_at == clock.now()
    assert backend.warm_instances() == {"od": 1}
    with pytest.raises(CapacityUnavailable, match=r"1 of 2 instances are in use"):
        backend.launch(request("d", 2))
    assert backend.warm_instances() == {"od": 1}  # a refused launch gives nothing back
    fresh = backend.launch(request("e", 1))  # the warm one, within the max
    assert backend.warm_instances() == {}
    assert fresh.launched_at == clock.now()
    for handle in (taken, fresh):
        backend.stop(handle, "done")


def test_what_a_job_leaves_in_its_instances_cache_the_next_job_there_finds(tmp_path: Path) -> None:
    """``BUDGETEER_CACHE_DIR`` is the instance's disk: a dataset the first job downloaded is
    there for the next job on the same warm instance, and not on another instance."""
    clock = ManualClock(T0)
    backend = _pooled_sandbox(tmp_path, clock, timeout=3600.0)
    od = make_offering("od", price=float(PRICE), startup_seconds=BOOT)
    code = (
        "import os, pathlib, sys; d = pathlib.Path(os.environ['BUDGETEER_CACHE_DIR']);"
        " f = d / 'dataset'; print('found' if f.exists() else 'downloaded', d.parent.name);"
        " f.write_text('rows')"
    )

    def run(job: str, instances: int = 1) -> tuple[Handle, str]:
        out = tmp_path / f"{job}.log"
        request = LaunchRequest(
            job,
            1,
            od,
            ("/bin/sh", "-c", f'{sys.executable} -c "{code}" >> {out}'),
            tmp_path / job,
            instances=instances,
        )
        handle = backend.launch(request)
        for _ in range(2000):
            if backend.status(handle).state.is_final:
                return handle, out.read_text()
            clock.advance(1)
            time.sleep(0.01)
        raise AssertionError(f"{job} did not finish")

    first, said = run("a")
    assert said.split() == ["downloaded", first.instance_ids[0]]
    second, said = run("b")  # on a's warm instance: the dataset is there
    assert second.instance_ids == first.instance_ids
    assert said.split() == ["found", first.instance_ids[0]]
    pair, said = run("c", 2)  # two fresh instances (one warm is not two): each its own disk
    assert not set(pair.instance_ids) & set(first.instance_ids)
    assert sorted(said.splitlines()) == sorted(f"downloaded {i}" for i in pair.instance_ids)


def test_a_job_takes_the_warm_instance_that_holds_its_data(tmp_path: Path) -> None:
    """Each warm instance remembers the dataset its last job named (``data.uri``); a launch
    naming it takes that instance rather than the most recently idle one, and a restarted
    sandbox still knows which holds what."""
    clock = ManualClock(T0)
    backend = _pooled_sandbox(tmp_path, clock, timeout=3600.0)
    od = make_offering("od", price=float(PRICE), startup_seconds=BOOT)
    fraud, recs = (  # at once: two fresh instances
        backend.launch(
            LaunchRequest(job, 1, od, (sys.executable, "-c", "0"), tmp_path / job, data_uri=uri)
        )
        for job, uri in (("a", "s3://fraud"), ("b", "s3://recs"))
    )
    for _ in range(2000):
        if all(backend.status(h).state.is_final for h in (fraud, recs)):
            break
        clock.advance(1)
        time.sleep(0.01)
    assert fraud.instance_ids != recs.instance_ids
    assert backend.warm_data() == {"od": {"s3://fraud": 1, "s3://recs": 1}}
    again = _pooled_sandbox(tmp_path, clock, timeout=3600.0)  # a restart: still known
    assert again.warm_data() == backend.warm_data()
    # neither is idle longer than the other; the job's data is on fraud's
    second = _run(again, clock, "c", 1, data="s3://fraud")
    assert second.instance_ids == fraud.instance_ids
    assert again.warm_data() == {"od": {"s3://fraud": 1, "s3://recs": 1}}  # c left it too
    # a job naming no data takes the most recently idle (c's, just ended) and leaves none
    third = _run(again, clock, "d", 1)
    assert third.instance_ids == fraud.instance_ids
    assert again.warm_data() == {"od": {"s3://recs": 1}}
