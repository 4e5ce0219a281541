"""Batching (issue 18, ``core/batching.py``): jobs placed on a pool wait to run back to back on
its instances where that saves a boot and keeps their deadline — table tests of each rule, and
properties over random queues: a waiting job still meets its deadline from the time its
instance frees, waits no longer than its pool allows, and no instance runs two jobs at once."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeteer.core import Allocation, HoldReason, Plan, Snapshot, plan_cycle
from budgeteer.core.policy import Policy
from budgeteer.core.pools import PoolSettings, PoolView, pooled_offerings, warm_data
from budgeteer.domain.job import DataSource, Job
from budgeteer.domain.tier import Tier
from builders import NOW, make_job, make_offering, make_snapshot

T4 = "t4"
BOOT = 120.0
WAIT = 30 * 60.0


def _offering() -> list:  # type: ignore[type-arg]
    return [make_offering(T4, accelerator="T4", price=0.5, startup_seconds=BOOT)]


def _job(name: str, *, ago_min: float = 0.0, seq: int = 0, **kw: object) -> Job:
    """About 12 minutes of T4 work (0.05 reference hours at 0.25), deadline 4 h unless told."""
    kw.setdefault("deadline_hours", 4.0)
    return make_job(
        name,
        hours=0.05,
        accelerators=("T4",),
        spot=False,
        submitted_hours_ago=ago_min / 60,
        seq=seq,
        **kw,  # type: ignore[arg-type]
    )


def _snapshot(
    jobs: list[Job],
    *,
    idle: int = 0,
    wait: float = WAIT,
    running: tuple[Allocation, ...] = (),
    pooled: bool = True,
) -> Snapshot:
    pools = (PoolView(PoolSettings(T4, 0, 8, 0.0, BOOT, wait), idle),) if pooled else ()
    return make_snapshot(jobs, _offering(), running=running, pools=pools)


def _busy(minutes: float, job: str = "r") -> Allocation:
    return Allocation(job, T4, 1, 0.1, NOW + timedelta(minutes=minutes))


def _outcome(plan: Plan) -> dict[str, str]:
    out = {a.job_id: "launch" for a in plan.admissions}
    out |= {h.job_id: f"hold:{h.reason}" for h in plan.holds}
    return out


def _detail(plan: Plan, job: str, key: str) -> datetime:
    [hold] = [h for h in plan.holds if h.job_id == job]
    return datetime.fromisoformat(dict(hold.details)[key])


def test_a_warm_instance_takes_the_job_at_once() -> None:
    plan = plan_cycle(_snapshot([_job("a")], idle=1))
    assert _outcome(plan) == {"a": "launch"}


def test_a_lone_job_waits_for_a_companion_until_its_wait_ends() -> None:
    plan = plan_cycle(_snapshot([_job("a", ago_min=5)]))
    assert _outcome(plan) == {"a": "hold:batched"}
    [hold] = plan.holds
    assert hold.wake_at == NOW + timedelta(minutes=25)  # submitted 5 min ago, waits 30
    assert "share its start-up" in hold.message
    # its wait over, it boots its own
    assert _outcome(plan_cycle(_snapshot([_job("a", ago_min=31)]))) == {"a": "launch"}


def test_two_jobs_run_back_to_back_on_one_instance() -> None:
    a, b = _job("a", ago_min=10, seq=0), _job("b", seq=1)
    plan = plan_cycle(_snapshot([a, b]))
    assert _outcome(plan) == {"a": "launch", "b": "hold:batched"}
    [launched] = plan.admissions
    # b waits for a's instance: free when a's plan ends
    assert _detail(plan, "b", "instance_free_at") == launched.placement.finish


def test_a_job_waits_for_a_running_attempt_on_the_pool() -> None:
    plan = plan_cycle(_snapshot([_job("a")], running=(_busy(10),)))
    assert _outcome(plan) == {"a": "hold:batched"}
    assert _detail(plan, "a", "instance_free_at") == NOW + timedelta(minutes=10)


def test_an_instance_freeing_after_the_wait_does_not_hold_the_job() -> None:
    # submitted 25 min ago, may wait 30: an instance free in 10 min is too late
    plan = plan_cycle(_snapshot([_job("a", ago_min=25)], running=(_busy(10),)))
    assert _outcome(plan) == {"a": "launch"}


def test_a_deadline_that_cannot_absorb_the_wait_launches_now() -> None:
    # 12 min of work (+ margin) due in 20 min: waiting 10 min for the instance would miss it
    plan = plan_cycle(_snapshot([_job("a", deadline_hours=20 / 60)], running=(_busy(10),)))
    assert _outcome(plan) == {"a": "launch"}
    # and a lone job that could not boot at the end of its wait does not wait for a companion
    plan = plan_cycle(_snapshot([_job("a", deadline_hours=40 / 60)]))
    assert _outcome(plan) == {"a": "launch"}


def test_p0_jobs_never_wait() -> None:
    plan = plan_cycle(_snapshot([_job("a", tier=Tier.P0)], running=(_busy(5),)))
    assert _outcome(plan) == {"a": "launch"}


def test_multi_instance_jobs_never_wait() -> None:
    job = dataclasses.replace(
        _job("a"), resources=dataclasses.replace(_job("a").resources, min_workers=2, max_workers=2)
    )
    plan = plan_cycle(_snapshot([job], running=(_busy(5),)))
    assert [a.placement.instances for a in plan.admissions] == [2]


def test_each_tier_waits_as_long_as_its_pool_says_and_unnamed_tiers_never() -> None:
    by_tier = ((Tier.P2, 5 * 60.0), (Tier.P3, 2 * 3600.0))
    pools = (PoolView(PoolSettings(T4, 0, 8, 0.0, BOOT, 0.0, by_tier), 0),)
    jobs = [
        _job("p3", tier=Tier.P3, ago_min=60, seq=0),  # waited an hour of its two: still may
        _job("p2", tier=Tier.P2, ago_min=0, seq=1),  # 5 min: the instance frees in 10, too late
        _job("p1", tier=Tier.P1, ago_min=0, seq=2),  # not named: never waits
    ]
    plan = plan_cycle(make_snapshot(jobs, _offering(), running=(_busy(10),), pools=pools))
    assert _outcome(plan) == {"p3": "hold:batched", "p2": "launch", "p1": "launch"}
    assert _detail(plan, "p3", "instance_free_at") == NOW + timedelta(minutes=10)
    settings = pools[0].settings
    assert settings.batches
    assert [settings.batch_wait_for(t) for t in Tier] == [0.0, 0.0, 300.0, 7200.0]


def test_without_batching_nothing_waits() -> None:
    assert _outcome(plan_cycle(_snapshot([_job("a")], wait=0.0))) == {"a": "launch"}
    assert _outcome(plan_cycle(_snapshot([_job("a")], pooled=False))) == {"a": "launch"}
    # an attempt re-attached after a restart (no expected end) is not waited for
    unknown = Allocation("r", T4, 1, 0.1, None)
    plan = plan_cycle(_snapshot([_job("a", ago_min=31)], running=(unknown,)))
    assert _outcome(plan) == {"a": "launch"}


# -- properties -------------------------------------------------------------------------------

queues = st.lists(
    st.tuples(
        st.floats(0, 45),  # submitted this many minutes ago
        st.floats(0.3, 6),  # deadline, hours from now
        st.sampled_from([Tier.P0, Tier.P1, Tier.P2, Tier.P3]),
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=60, deadline=None)
@given(
    queue=queues,
    running=st.lists(st.floats(0, 60), max_size=3),  # expected ends, minutes from now
    idle=st.integers(0, 2),
)
def test_waiting_jobs_keep_their_deadline_and_share_no_instance(
    queue: list[tuple[float, float, Tier]], running: list[float], idle: int
) -> None:
    jobs = [
        _job(f"j{i}", ago_min=ago, seq=i, deadline_hours=due, tier=tier)
        for i, (ago, due, tier) in enumerate(queue)
    ]
    allocs = tuple(_busy(m, f"r{i}") for i, m in enumerate(running))
    plan = plan_cycle(_snapshot(jobs, idle=idle, running=allocs))
    alone = plan_cycle(_snapshot(jobs, idle=idle, running=allocs, pooled=False))
    placed = {a.job_id: a.placement for a in alone.admissions}
    batched = [h for h in plan.holds if h.reason is HoldReason.BATCHED]
    # batching only delays: every job launched or batched is one the planner would launch
    assert {a.job_id for a in plan.admissions} | {h.job_id for h in batched} == set(placed)
    ends: Counter[datetime] = Counter()  # instances that free at each time
    ends.update(max(NOW, NOW + timedelta(minutes=m)) for m in running)
    ends.update(a.placement.finish for a in plan.admissions)
    behind = []
    by_id = {j.id: j for j in jobs}
    for hold in batched:
        job = by_id[hold.job_id]
        assert job.tier is not Tier.P0
        details = dict(hold.details)
        run = placed[job.id].finish - NOW - timedelta(seconds=BOOT)
        if "instance_free_at" in details:
            free = datetime.fromisoformat(details["instance_free_at"])
            assert NOW <= free <= job.submitted_at + timedelta(seconds=WAIT)
            assert job.deadline is not None
            assert free + run <= job.deadline
            behind.append((free, run))
        else:  # waiting for a companion: it can still boot at the end of its wait and be on time
            until = datetime.fromisoformat(details["wait_until"])
            assert until == job.submitted_at + timedelta(seconds=WAIT) > NOW
            assert job.deadline is not None
            assert until + timedelta(seconds=BOOT) + run <= job.deadline
    # no instance runs two jobs at once: each waiting job takes an instance as it frees (a
    # running attempt's, a launched job's, or one a waiting job before it frees), each once
    for free, run in sorted(behind):
        assert ends[free] > 0, (free, ends)
        ends[free] -= 1
        ends[free + run] += 1


# -- the pool's max bounds what runs there ------------------------------------------------------


def _capped(jobs: list[Job], running: tuple[Allocation, ...], *, other: bool) -> Snapshot:
    """A pool of at most two T4 instances (no batching), and — with ``other`` — a dearer T4
    offering in another zone."""
    pools = (PoolView(PoolSettings(T4, 0, 2, 0.0, BOOT, 0.0), 0),)
    offerings = _offering()
    if other:
        offerings.append(make_offering("t4-b", accelerator="T4", price=0.9, startup_seconds=BOOT))
    return make_snapshot(
        jobs, list(pooled_offerings(tuple(offerings), pools)), running=running, pools=pools
    )


def test_a_full_pool_sends_the_job_elsewhere_or_makes_it_wait() -> None:
    jobs = [_job("a")]
    one = (_busy(20, "r1"),)
    two = (_busy(20, "r1"), _busy(30, "r2"))
    # room in the pool (one of two busy): the cheap pooled offering
    [launch] = plan_cycle(_capped(jobs, one, other=True)).admissions
    assert launch.placement.offering_id == T4
    # the pool at its max: the dearer zone, not a third instance
    [launch] = plan_cycle(_capped(jobs, two, other=True)).admissions
    assert launch.placement.offering_id == "t4-b"
    # nowhere else to go: the job waits for a pool instance to free
    plan = plan_cycle(_capped(jobs, two, other=False))
    assert _outcome(plan) == {"a": "hold:capacity"}


def test_pooled_offerings_price_warm_instances_and_cap_at_max() -> None:
    base = tuple(_offering())
    assert pooled_offerings(base, ()) is base  # no pool: the same tuple (memos keep)
    uncapped = (PoolView(PoolSettings(T4, 0, None, 0.0, BOOT, 0.0), 0),)
    assert pooled_offerings(base, uncapped) is base
    [cold] = pooled_offerings(base, (PoolView(PoolSettings(T4, 0, 3, 0.0, BOOT, 0.0), 0),))
    assert (cold.max_instances, cold.startup_seconds) == (3, BOOT)
    [warm] = pooled_offerings(base, (PoolView(PoolSettings(T4, 0, 3, 0.0, BOOT, 0.0), 1),))
    assert (warm.max_instances, warm.startup_seconds) == (3, 0.0)
    # the venue's own capacity stays the bound when it is the smaller
    small = (dataclasses.replace(base[0], max_instances=2),)
    [both] = pooled_offerings(small, (PoolView(PoolSettings(T4, 0, 3, 0.0, BOOT, 0.0), 0),))
    assert both.max_instances == 2


# -- a warm instance holding the job's data: no egress there --------------------------------

DATA = "s3://fraud/features/2026-12"


def _far_pool(held: tuple[tuple[str, int], ...], *, uri: str | None = DATA) -> Plan:
    """A 500 GB dataset in us-east-1; a pooled T4 in us-west-2 (one warm instance holding
    ``held``), a cheaper T4 beside it that needs no boot either (it would prune the pooled one
    were their egress the same), and a dearer T4 beside the data. Moving the data costs $10,
    the work cents."""
    job = dataclasses.replace(_job("a"), data=DataSource("aws/us-east-1", 500.0, uri))
    pools = (PoolView(PoolSettings(T4, 0, 8, 0.0, BOOT, 0.0), 1, held),)
    offerings = [
        make_offering(T4, accelerator="T4", price=0.5, region="us-west-2", startup_seconds=BOOT),
        make_offering("t4-west", accelerator="T4", price=0.4, region="us-west-2"),
        make_offering("t4-near", accelerator="T4", price=0.9, startup_seconds=BOOT),
    ]
    return plan_cycle(
        make_snapshot([job], list(pooled_offerings(tuple(offerings), pools)), pools=pools)
    )


def test_a_warm_instance_holding_the_jobs_data_is_priced_without_its_egress() -> None:
    # the warm instance holds the dataset: no transfer, the cheaper far pool wins
    [launch] = _far_pool(((DATA, 1),)).admissions
    assert launch.placement.offering_id == T4
    assert launch.placement.egress_usd == 0.0
    # it holds another dataset (or the job names none): the data is moved, the near one wins
    for held, uri in ((("s3://other", 1),), DATA), (((DATA, 1),), None):
        [launch] = _far_pool(held, uri=uri).admissions
        assert launch.placement.offering_id == "t4-near"
    assert warm_data((PoolView(PoolSettings(T4), 1, ((DATA, 1), ("x", 0))),)) == {DATA: ((T4, 1),)}


# -- a pool in another zone: the same instance type, no dearer ---------------------------------


def _two_zones(price_b: float, running: tuple[Allocation, ...]) -> Plan:
    """A pool of one T4 instance in zone a (batch wait 30 min); the same T4 unpooled in zone
    b at ``price_b``."""
    pools = (PoolView(PoolSettings(T4, 0, 1, 0.0, BOOT, WAIT), 0),)
    offerings = [
        make_offering(T4, accelerator="T4", price=0.5, startup_seconds=BOOT),
        make_offering("t4-b", accelerator="T4", price=price_b, startup_seconds=BOOT),
    ]
    offerings[1] = dataclasses.replace(offerings[1], instance_type=offerings[0].instance_type)
    return plan_cycle(
        make_snapshot(
            [_job("a")],
            list(pooled_offerings(tuple(offerings), pools)),
            running=running,
            pools=pools,
        )
    )


def test_a_job_placed_in_another_zone_waits_for_the_pools_instance_there() -> None:
    busy = (_busy(10, "r1"),)  # zone a's one instance frees in 10 minutes: the pool is full
    plan = _two_zones(0.5, busy)
    assert _outcome(plan) == {"a": "hold:batched"}
    [hold] = plan.holds
    assert dict(hold.details)["offering"] == T4
    assert hold.wake_at == NOW + timedelta(minutes=10)
    assert "another zone" in hold.message
    # zone b is cheaper: the job boots there as planned
    [launch] = _two_zones(0.4, busy).admissions
    assert launch.placement.offering_id == "t4-b"
    # zone a's instance frees too late for the wait (40 min > 30): it boots in zone b
    [launch] = _two_zones(0.5, (_busy(40, "r1"),)).admissions
    assert launch.placement.offering_id == "t4-b"


# -- a pool only some teams use ------------------------------------------------------------------


def _team_pool(team: str, *, idle: int = 1, running: tuple[Allocation, ...] = ()) -> Plan:
    """A pooled T4 ($0.50/h) with ``idle`` warm instances that only ``fraud`` may use, and an
    unpooled T4 at $0.47/h beside it; a 12-minute job of ``team``. Warm, the pooled one is the
    cheaper ($0.100 against $0.110 with the other's two-minute boot); with its boot, dearer."""
    pool = PoolSettings(T4, 0, 8, 0.0, BOOT, WAIT, teams=("fraud",))
    pools = (PoolView(pool, idle),)
    offerings = [
        make_offering(T4, accelerator="T4", price=0.5, startup_seconds=BOOT),
        make_offering("t4-cheap", accelerator="T4", price=0.47, startup_seconds=BOOT),
    ]
    return plan_cycle(
        make_snapshot(
            [_job("a", team=team, ago_min=1)],
            list(pooled_offerings(tuple(offerings), pools)),
            running=running,
            pools=pools,
        )
    )


def test_a_pools_warm_instances_are_priced_warm_only_for_its_teams() -> None:
    [launch] = _team_pool("fraud").admissions
    assert launch.placement.offering_id == T4  # its team: no boot, the cheaper
    [launch] = _team_pool("growth").admissions
    assert launch.placement.offering_id == "t4-cheap"  # not its pool: priced with the boot


def _one_pool(jobs: list[Job], running: tuple[Allocation, ...]) -> Plan:
    """The pooled T4 alone, only ``fraud``'s, no instance idle."""
    pool = PoolView(PoolSettings(T4, 0, 8, 0.0, BOOT, WAIT, teams=("fraud",)), 0)
    return plan_cycle(make_snapshot(jobs, _offering(), running=running, pools=(pool,)))


def test_a_job_of_another_team_neither_waits_for_the_pool_nor_frees_an_instance_there() -> None:
    a = _job("a", team="fraud", ago_min=1)
    busy = (_busy(10, "r1"),)  # r1 frees its instance in 10 minutes
    fraud_r1 = dataclasses.replace(_job("r1", team="fraud"), submitted_at=NOW)
    plan = _one_pool([a, fraud_r1], busy)
    assert _outcome(plan)["a"] == "hold:batched"
    assert "when the job there ends" in next(h.message for h in plan.holds if h.job_id == "a")
    # r1 is growth's: its instance goes back when it ends, so a waits for a companion instead
    growth_r1 = dataclasses.replace(fraud_r1, team="growth")
    plan = _one_pool([a, growth_r1], busy)
    assert "waits until" in next(h.message for h in plan.holds if h.job_id == "a")
    # and a growth job there is never held for fraud's pool: it boots its own at once
    plan = _one_pool([dataclasses.replace(a, team="growth"), fraud_r1], busy)
    assert _outcome(plan)["a"] == "launch"


def test_a_warm_instance_holding_the_data_saves_its_download_too() -> None:
    """450 GB beside two warm pools in its own region (no egress anywhere): one holds the
    dataset, the other — $0.05/h cheaper — does not, so the job would wait 12 minutes there for
    its data (at 2,250 GB/h) and pay for them: the pool holding it wins; with downloads left out
    of the plans the cheaper one would."""
    job = dataclasses.replace(
        _job("a", deadline_hours=8.0), data=DataSource("aws/us-east-1", 450.0, DATA)
    )
    job = dataclasses.replace(job, work=dataclasses.replace(job.work, reference_hours=0.25))
    pools = (
        PoolView(PoolSettings(T4, 0, 8, 0.0, BOOT, 0.0), 1, ((DATA, 1),)),
        PoolView(PoolSettings("t4-other", 0, 8, 0.0, BOOT, 0.0), 1),
    )
    offerings = [
        make_offering(T4, accelerator="T4", price=0.5, startup_seconds=BOOT),
        make_offering("t4-other", accelerator="T4", price=0.45, startup_seconds=BOOT),
    ]
    snapshot = make_snapshot([job], list(pooled_offerings(tuple(offerings), pools)), pools=pools)
    [launch] = plan_cycle(snapshot).admissions
    assert launch.placement.offering_id == T4
    assert launch.placement.expected_cost_usd == pytest.approx(0.5)  # 1 h of work, no wait
    [launch] = plan_cycle(snapshot, Policy(data_download_gb_per_hour=0.0)).admissions
    assert launch.placement.offering_id == "t4-other"
