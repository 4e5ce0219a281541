"""The runtime and cost model against hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from budgeteer.core import Policy, plan_cycle
from budgeteer.core.runtime import evaluate, preemption_moments, scaling_efficiency
from budgeteer.domain.offering import Market
from builders import make_job, make_offering, make_snapshot


def test_on_demand_cost_is_price_times_runtime_plus_startup() -> None:
    # 10 reference hours on one A100 (rel 1.0) at $4/h with a 6-minute start-up:
    # runtime 10 h, billed 10.1 h = $40.40, no spread.
    job = make_job(hours=10)
    offering = make_offering(price=4.0, startup_seconds=360)
    plan = plan_cycle(make_snapshot([job], [offering]))
    p = plan.admissions[0].placement
    assert p.runtime_hours == pytest.approx(10.0)
    assert p.expected_cost_usd == pytest.approx(40.4)
    assert p.cost_std_usd == 0.0
    assert (p.finish - plan.now).total_seconds() == pytest.approx(10.1 * 3600)


def test_relative_throughput_shortens_runtime() -> None:
    # H100 has relative throughput 3.0 in the test table: 12 ref-h take 4 h.
    job = make_job(hours=12, accelerators=("H100",))
    plan = plan_cycle(make_snapshot([job], [make_offering("h100", accelerator="H100", price=9)]))
    assert plan.admissions[0].placement.runtime_hours == pytest.approx(4.0)
    assert plan.admissions[0].placement.expected_cost_usd == pytest.approx(36.0)


def test_spot_inflation_and_spread_follow_the_compound_poisson_model() -> None:
    # λ = 0.3/h, checkpoint every 30 min, 5-minute restart:
    # each interruption costs c/2 + r = 0.25 + 1/12 h, so runtime inflates by 0.1 per hour of work.
    mean, second = preemption_moments(1800, 300)
    assert mean == pytest.approx(0.25 + 1 / 12)
    assert second == pytest.approx(0.25 / 3 + 0.5 / 12 + 1 / 144)
    ev = evaluate(
        np.array([10.0]),
        np.array([1.0]),
        np.array([2.0]),
        np.array([0.0]),
        np.array([0.3]),
        np.array([mean]),
        np.array([second]),
        np.array([0.0]),
        1.0,
    )
    assert ev.runtime_hours[0] == pytest.approx(11.0)
    assert ev.cost_usd[0] == pytest.approx(22.0)
    expected_std = math.sqrt(0.3 * 10 * second)
    assert ev.runtime_std_hours[0] == pytest.approx(expected_std)
    assert ev.finish_hours[0] == pytest.approx(11.0 + expected_std)


def test_more_instances_on_spot_are_interrupted_more_often() -> None:
    job = make_job(hours=16, gpus_per_worker=1, workers=(4, 4))
    spot = make_offering("spot1", price=1.0, market=Market.SPOT, interruption_per_hour=0.2)
    plan = plan_cycle(make_snapshot([job], [spot]))
    p = plan.admissions[0].placement
    assert p.instances == 4
    eff = 0.90**2  # four instances: two doublings across nodes
    base = 16 / (4 * eff)
    assert p.runtime_hours == pytest.approx(base * (1 + 0.8 * (0.25 + 1 / 12)))


def test_scaling_efficiency_loses_a_share_per_doubling() -> None:
    policy = Policy(intra_node_efficiency_per_doubling=0.95, inter_node_efficiency_per_doubling=0.8)
    eff = scaling_efficiency(np.array([1.0, 8.0, 8.0]), np.array([1.0, 1.0, 4.0]), policy)
    assert eff == pytest.approx([1.0, 0.95**3, 0.95**3 * 0.8**2])


def test_egress_is_charged_when_data_lives_elsewhere() -> None:
    job = make_job(hours=1, data=("aws/us-east-1", 100))
    far = make_offering("far", price=1.0, provider="gcp", region="us-central1")
    plan = plan_cycle(make_snapshot([job], [far]))
    assert plan.admissions[0].placement.egress_usd == pytest.approx(9.0)  # 100 GB × $0.09
    # an hour of work, the 100 GB download (at 2,250 GB/h, 2.7 minutes) billed too, and egress
    assert plan.admissions[0].placement.expected_cost_usd == pytest.approx(10.0 + 100 / 2250)


def test_egress_can_make_the_nearby_dearer_offering_cheapest() -> None:
    job = make_job(hours=1, data=("aws/us-east-1", 1000))
    near = make_offering("near", price=5.0)
    far = make_offering("far", price=1.0, provider="gcp", region="us-central1")
    plan = plan_cycle(make_snapshot([job], [near, far]))
    assert plan.admissions[0].placement.offering_id == "near"
