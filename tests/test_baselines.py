"""The baseline policies are settings of the same core: each knob does what it says."""

from __future__ import annotations

import dataclasses

import pytest

from budgeteer.core import HoldReason, plan_cycle
from budgeteer.core.policy import Policy, QueueOrder
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from budgeteer.sim.policies import POLICY_NAMES, UnknownPolicy, policy_named
from builders import make_budget, make_job, make_offering, make_snapshot

SPOT = make_offering("spot", price=1.0, market=Market.SPOT, interruption_per_hour=0.05)
OD = make_offering("od", price=3.0)


def test_fifo_ignores_tiers_and_fair_share() -> None:
    jobs = [
        make_job("p3-first", tier=Tier.P3, submitted_hours_ago=3, seq=0),
        make_job("p0-later", tier=Tier.P0, submitted_hours_ago=1, seq=1),
    ]
    snap = make_snapshot(jobs, [OD])
    assert plan_cycle(snap, Policy()).order == ("p0-later", "p3-first")
    fifo = plan_cycle(snap, Policy(queue_order=QueueOrder.FIFO))
    assert fifo.order == ("p3-first", "p0-later")


def test_allow_spot_false_never_places_on_spot() -> None:
    snap = make_snapshot([make_job("j", hours=2)], [SPOT, OD])
    assert plan_cycle(snap).admissions[0].placement.market is Market.SPOT
    assert (
        plan_cycle(snap, Policy(allow_spot=False)).admissions[0].placement.market
        is Market.ON_DEMAND
    )


def test_without_budget_enforcement_over_budget_work_is_admitted() -> None:
    snap = make_snapshot(
        [make_job("big", hours=100, tier=Tier.P3, spot=False)],
        [OD],
        budgets=[make_budget(limit="10")],
    )
    assert plan_cycle(snap).holds[0].reason is HoldReason.BUDGET
    assert [a.job_id for a in plan_cycle(snap, Policy(enforce_budgets=False)).admissions] == ["big"]


def test_gpu_quotas_hold_what_would_pass_the_team_quota() -> None:
    eight = make_offering("eight", gpus=8, price=24.0)
    jobs = [
        make_job("a", workers=(8, 8), seq=0, spot=False),
        make_job("b", workers=(8, 8), seq=1, spot=False),
        make_job("other", team="search", workers=(8, 8), seq=2, spot=False),
    ]
    plan = plan_cycle(make_snapshot(jobs, [eight]), Policy(team_gpu_quotas=(("growth", 8),)))
    assert sorted(a.job_id for a in plan.admissions) == ["a", "other"]  # search has no quota
    [hold] = plan.holds
    assert (hold.job_id, hold.reason) == ("b", HoldReason.QUOTA)
    assert "holds 8 of its 8 GPUs" in hold.message


def test_policies_by_name() -> None:
    assert policy_named("default") == Policy()
    od = policy_named("on-demand-fifo")
    assert (od.allow_spot, od.queue_order, od.enforce_budgets) == (False, QueueOrder.FIFO, False)
    greedy = policy_named("spot-greedy-fifo")
    assert greedy.spot_rules_for(make_job("j")).max_preemptions == 1
    quota = policy_named("priority-quota", gpu_quotas={"growth": 16})
    assert quota.gpu_quota("growth") == 16
    assert not quota.enforce_budgets
    assert set(POLICY_NAMES) == {"default", "on-demand-fifo", "spot-greedy-fifo", "priority-quota"}
    with pytest.raises(UnknownPolicy, match="available: default"):
        policy_named("cheapest")
    assert dataclasses.replace(policy_named("default"), allow_spot=False) == policy_named(
        "default", Policy(allow_spot=False)
    )
