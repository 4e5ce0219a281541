"""Queue order: tier, fair share on money (with entry penalty), slack, age, sequence."""

from __future__ import annotations

import pytest

from budgeteer.core import Policy, plan_cycle
from budgeteer.core.order import decayed_usage
from budgeteer.domain.tier import Tier
from builders import make_job, make_snapshot, spent


def test_tier_comes_first() -> None:
    jobs = [
        make_job("p3", tier=Tier.P3, seq=0),
        make_job("p0", tier=Tier.P0, seq=1),
        make_job("p1", tier=Tier.P1, seq=2),
    ]
    assert plan_cycle(make_snapshot(jobs)).order == ("p0", "p1", "p3")


def test_team_that_spent_less_goes_first() -> None:
    jobs = [make_job("rich-1", team="rich", seq=0), make_job("poor-1", team="poor", seq=1)]
    snap = make_snapshot(jobs, spend=[spent("rich", "500"), spent("poor", "10")])
    assert plan_cycle(snap).order == ("poor-1", "rich-1")


def test_old_spend_decays_with_the_half_life() -> None:
    jobs = [make_job("a-1", team="a", seq=0), make_job("b-1", team="b", seq=1)]
    # a spent 400 four half-lives ago (→ 25), b spent 50 now
    policy = Policy(fair_share_half_life_seconds=3600)
    snap = make_snapshot(jobs, spend=[spent("a", "400", hours_ago=4), spent("b", "50", 0)])
    assert plan_cycle(snap, policy).order == ("a-1", "b-1")


def test_entry_penalty_interleaves_teams_instead_of_letting_one_flood() -> None:
    jobs = [make_job(f"a-{i}", team="a", seq=i, hours=10) for i in range(3)]
    jobs += [make_job(f"b-{i}", team="b", seq=10 + i, hours=10) for i in range(3)]
    order = plan_cycle(make_snapshot(jobs)).order
    assert order == ("a-0", "b-0", "a-1", "b-1", "a-2", "b-2")


def test_team_weights_give_a_bigger_share() -> None:
    jobs = [make_job(f"a-{i}", team="a", seq=i, hours=10) for i in range(4)]
    jobs += [make_job(f"b-{i}", team="b", seq=10 + i, hours=10) for i in range(2)]
    policy = Policy(team_weights=(("a", 2.0),))
    order = plan_cycle(make_snapshot(jobs), policy).order
    # a's usage counts half: after each b job, a gets two
    assert order == ("a-0", "b-0", "a-1", "a-2", "b-1", "a-3")


def test_within_a_team_least_slack_first_then_age_then_sequence() -> None:
    jobs = [
        make_job("loose", deadline_hours=48, seq=0),
        make_job("tight", deadline_hours=12, seq=1),
        make_job("none-old", submitted_hours_ago=3, seq=2),
        make_job("none-new", submitted_hours_ago=1, seq=3),
        make_job("none-new-2", submitted_hours_ago=1, seq=4),
    ]
    assert plan_cycle(make_snapshot(jobs)).order == (
        "tight",
        "loose",
        "none-old",
        "none-new",
        "none-new-2",
    )


def test_ageing_bounds_starvation() -> None:
    jobs = [
        make_job("starved", team="rich", submitted_hours_ago=30, seq=0),
        make_job("fresh", team="poor", seq=1),
    ]
    snap = make_snapshot(jobs, spend=[spent("rich", "1000")])
    assert plan_cycle(snap).order == ("starved", "fresh")
    assert plan_cycle(snap, Policy(starvation_seconds=48 * 3600)).order == ("fresh", "starved")


def test_fair_share_usage_halves_every_half_life() -> None:
    # Slurm's F = 2^(-U/S) decay: spend one half-life old weighs half, two half-lives a quarter
    policy = Policy()
    hours = policy.fair_share_half_life_seconds / 3600
    snap = make_snapshot(
        [make_job("a", team="a"), make_job("b", team="b"), make_job("c", team="c")],
        spend=[
            spent("a", "100", hours_ago=hours),
            spent("b", "100", hours_ago=2 * hours),
            spent("c", "100", hours_ago=0),
        ],
    )
    usage = decayed_usage(snap, policy)
    assert usage["a"] == pytest.approx(50.0)
    assert usage["b"] == pytest.approx(25.0)
    assert usage["c"] == pytest.approx(100.0)
