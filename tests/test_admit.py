"""Admission against budgets: tier thresholds, reserve, cheaper plans first, backfill, wake-up."""

from __future__ import annotations

from decimal import Decimal

import pytest

from budgeteer.core import Allocation, HoldReason, WakeOn, plan_cycle
from budgeteer.domain.job import JobState
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from builders import make_budget, make_job, make_offering, make_snapshot, spent

# One A100 on-demand at $10/h: a job of N reference hours costs $10·N.
OFFER = [make_offering(price=10.0)]


@pytest.mark.parametrize(
    ("tier", "spent_usd", "admitted"),
    [
        (Tier.P3, "590", True),  # 590 + 100 = 690 ≤ 700 (70%)
        (Tier.P3, "610", False),  # 710 > 700
        (Tier.P2, "690", True),  # 790 ≤ 800
        (Tier.P2, "710", False),
        (Tier.P1, "840", True),  # 940 ≤ 950
        (Tier.P1, "860", False),
        (Tier.P0, "890", True),  # 990 ≤ 1000
        (Tier.P0, "910", False),  # no reserve configured
    ],
)
def test_tier_thresholds(tier: Tier, spent_usd: str, admitted: bool) -> None:
    snap = make_snapshot(
        [make_job(tier=tier, hours=10)], OFFER, [make_budget()], [spent("growth", spent_usd)]
    )
    plan = plan_cycle(snap)
    assert bool(plan.admissions) is admitted
    if not admitted:
        hold = plan.holds[0]
        assert hold.reason is HoldReason.BUDGET
        assert WakeOn.BUDGET_PERIOD_RESET in hold.wake_on
        assert hold.wake_at is not None
        assert hold.wake_at.isoformat() == "2027-01-01T00:00:00+00:00"


def test_p0_may_use_the_emergency_reserve_and_is_flagged() -> None:
    snap = make_snapshot(
        [make_job(tier=Tier.P0, hours=10)],
        OFFER,
        [make_budget(reserve="200")],
        [spent("growth", "950")],
    )
    plan = plan_cycle(snap)
    assert plan.admissions[0].uses_reserve
    assert plan.budgets[0].projected_usd == Decimal("1050.00")


def test_committed_cost_of_running_jobs_counts() -> None:
    running = make_job("running", state=JobState.RUNNING)
    snap = make_snapshot(
        [running, make_job("new", tier=Tier.P3, hours=10)],
        OFFER,
        [make_budget()],
        [spent("growth", "100")],
        running=[Allocation("running", "a100", 1, 550.0)],
    )
    plan = plan_cycle(snap)
    assert plan.hold("new") is not None  # 100 + 550 + 100 > 700
    assert plan.budgets[0].committed_usd == Decimal("550.00")


def test_cheaper_spot_plan_is_used_before_holding() -> None:
    offers = [
        make_offering("od", price=10.0),
        make_offering("spot", price=3.0, market=Market.SPOT, interruption_per_hour=0.1),
    ]
    snap = make_snapshot(
        [make_job(tier=Tier.P3, hours=10)], offers, [make_budget()], [spent("growth", "600")]
    )
    plan = plan_cycle(snap)
    assert plan.admissions[0].placement.market is Market.SPOT


def test_incremental_variant_is_tried_before_holding() -> None:
    job = make_job(tier=Tier.P3, hours=10, incremental_hours=2)
    snap = make_snapshot([job], OFFER, [make_budget()], [spent("growth", "650")])
    plan = plan_cycle(snap)
    placement = plan.admissions[0].placement
    assert placement.variant.value == "incremental"
    assert placement.expected_cost_usd == pytest.approx(20.0)


def test_full_variant_is_preferred_when_it_fits() -> None:
    job = make_job(tier=Tier.P3, hours=10, incremental_hours=2)
    plan = plan_cycle(make_snapshot([job], OFFER, [make_budget()]))
    assert plan.admissions[0].placement.variant.value == "full"


def test_a_big_job_that_does_not_fit_does_not_block_a_small_one() -> None:
    jobs = [
        make_job("big", tier=Tier.P3, hours=30, seq=0),
        make_job("small", tier=Tier.P3, hours=5, seq=1),
    ]
    snap = make_snapshot(jobs, OFFER, [make_budget()], [spent("growth", "600")])
    plan = plan_cycle(snap)
    assert [a.job_id for a in plan.admissions] == ["small"]
    assert plan.hold("big") is not None
    assert plan.hold("big").reason is HoldReason.BUDGET


def test_higher_tiers_consume_budget_before_lower_ones() -> None:
    jobs = [
        make_job("p3", tier=Tier.P3, hours=20, seq=0),
        make_job("p1", tier=Tier.P1, hours=20, seq=1),
    ]
    snap = make_snapshot(jobs, OFFER, [make_budget()], [spent("growth", "400")])
    plan = plan_cycle(snap)
    # P1 first: 400 + 200 = 600 ≤ 950; then P3: 600 + 200 = 800 > 700
    assert [a.job_id for a in plan.admissions] == ["p1"]
    assert plan.hold("p3") is not None


def test_every_covering_budget_must_allow_the_job() -> None:
    org = make_budget("org", team=None, limit="100000")
    team = make_budget("team", limit="100")
    snap = make_snapshot([make_job(hours=10)], OFFER, [org, team])
    plan = plan_cycle(snap)
    hold = plan.holds[0]
    assert dict(hold.details)["budget_id"] == "team"
    assert [b.held_jobs for b in plan.budgets] == [0, 1]


def test_spend_outside_the_period_does_not_count() -> None:
    snap = make_snapshot(
        [make_job(tier=Tier.P3, hours=10)],
        OFFER,
        [make_budget()],
        [spent("growth", "5000", hours_ago=24 * 40)],
    )
    plan = plan_cycle(snap)
    assert plan.admissions
    assert plan.budgets[0].accrued_usd == Decimal(0)


def test_job_budget_cap_excludes_dearer_plans() -> None:
    offers = [
        make_offering("slow", accelerator="T4", price=1.0),
        make_offering("fast", accelerator="H100", price=20.0),
    ]
    job = make_job(hours=12, deadline_hours=10, budget_usd=50)
    plan = plan_cycle(make_snapshot([job], offers))
    hold = plan.holds[0]
    assert hold.reason is HoldReason.INFEASIBLE
    assert "budget_usd is $50.00" in hold.message
