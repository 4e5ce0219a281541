"""Switch rules, the preemption fallback and bids."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import numpy as np
import pytest

from budgeteer.core import Policy
from budgeteer.core.spot import Market, Mode, SpotJob, replay
from budgeteer.core.spot.bids import bid_for
from budgeteer.core.spot.replay import Observation
from budgeteer.core.spot.rules import RuleSet, WithRules, job_rules, rules_for
from budgeteer.domain.job import SpotSettings, SwitchRule
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecErrors
from budgeteer.spec import JobSpec, job_from_spec
from builders import make_job


class SpotWhenUp:
    def decide(self, obs: Observation) -> Mode:
        return Mode.SPOT if obs.spot_available else Mode.IDLE


def _market(avail: list[int]) -> Market:
    return Market(np.array(avail) >= 1, np.ones(len(avail)), 0.5)


def test_fallback_after_n_preemptions_goes_on_demand_for_good() -> None:
    avail = [1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    job = SpotJob(3, 8, 0.5, 3)
    r = replay(_market(avail), 0, job, WithRules(SpotWhenUp(), RuleSet(max_preemptions=2)))
    assert r.preemptions == 2
    assert r.decisions[-1] == (5, Mode.ON_DEMAND)
    assert all(mode is Mode.ON_DEMAND for tick, mode in r.decisions if tick >= 5)


def test_switch_rule_after_90_minutes_under_half_done() -> None:
    # spot is gone after the first 45 minutes: at 1.5 h the job is under 50% done
    avail = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    job = SpotJob(2, 4, 0.25, 3)
    market = Market(np.array(avail) >= 1, np.ones(len(avail)), 0.25)
    rule = SwitchRule(after_hours=1.5, if_progress_below=0.5)
    r = replay(market, 0, job, WithRules(SpotWhenUp(), RuleSet(rules=(rule,))))
    assert (6, Mode.ON_DEMAND) in r.decisions
    assert r.met_deadline


NOW = datetime(2026, 12, 2, tzinfo=UTC)
BASE = {"name": "a", "team": "t", "priority": "P1", "work": {"reference_hours": 1}}


def test_switch_rules_come_from_the_job_spec() -> None:
    spec = JobSpec.parse(
        {
            **BASE,
            "spot": {
                "max_preemptions": 2,
                "switch_rules": [{"after": "90m", "if_progress_below": 0.5, "then": "on_demand"}],
            },
        }
    )
    job = job_from_spec(spec, job_id="a", now=NOW, seq=0, known_accelerators=["A100"])
    assert job.spot.switch_rules == (SwitchRule(1.5, 0.5),)
    assert job_rules(job, {}) == RuleSet((SwitchRule(1.5, 0.5),), 2)


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"after": "soon", "if_progress_below": 0.5}, "spot.switch_rules[0].after"),
        ({"after": "1h", "if_progress_below": 1.5}, "spot.switch_rules[0].if_progress_below"),
        ({"after": "1h", "if_progress_below": "half"}, "spot.switch_rules[0].if_progress_below"),
        ({"after": "1h", "if_progress_below": 0.5, "then": "spot"}, "spot.switch_rules[0].then"),
        ({"after": "1h", "if_progress_below": 0.5, "when": 1}, "spot.switch_rules[0].when"),
    ],
)
def test_bad_rules_name_the_field(rule: dict[str, object], field: str) -> None:
    with pytest.raises(SpecErrors) as err:
        JobSpec.parse({**BASE, "spot": {"switch_rules": [rule]}})
    assert field in {e.field for e in err.value.errors}


def test_job_rules_override_tier_rules() -> None:
    tier_rules = {Tier.P1: RuleSet((SwitchRule(1, 0.5),), max_preemptions=4)}
    assert rules_for(Tier.P1, None, tier_rules).max_preemptions == 4
    assert rules_for(Tier.P1, RuleSet(max_preemptions=1), tier_rules).max_preemptions == 1
    assert rules_for(Tier.P1, RuleSet(max_preemptions=1), tier_rules).rules == (SwitchRule(1, 0.5),)
    assert rules_for(Tier.P0, None, tier_rules).max_preemptions == 2


def test_bid_is_a_scaled_quantile_capped_at_on_demand() -> None:
    prices = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0])
    avail = np.array([True, True, False, True, True, True, True, False, True, True])
    bid = bid_for(Tier.P3, prices, avail, 1.0, on_demand_usd_per_hour=10.0)
    assert bid.max_usd_per_hour == pytest.approx(2.0)  # 75th percentile × 1.0
    # usable ticks: available and price ≤ 2: 1,1,_,2,2,2,2,_,_,_ → 6 of 10
    assert bid.acquisition_probability == pytest.approx(0.6)
    # usable runs [0,1] and [3..6]: two drops over 5 usable hours (last tick excluded)
    assert bid.interruptions_per_hour == pytest.approx(2 / 6)
    capped = bid_for(Tier.P0, prices, avail, 1.0, on_demand_usd_per_hour=3.0)
    assert capped.max_usd_per_hour == 3.0
    assert capped.capped_at_on_demand


def test_policy_carries_tier_rules_that_jobs_override() -> None:
    policy = Policy(spot_rules=((Tier.P1, RuleSet((SwitchRule(2, 0.3),), 4)),))
    plain = make_job(tier=Tier.P1)
    assert policy.spot_rules_for(plain) == RuleSet((SwitchRule(2, 0.3),), 4)
    own = dataclasses.replace(plain, spot=SpotSettings(max_preemptions=1))
    assert policy.spot_rules_for(own) == RuleSet((SwitchRule(2, 0.3),), 1)
    assert policy.spot_rules_for(make_job(tier=Tier.P3)).max_preemptions == 10
