"""Runtime actions (pure): early stop first, then off spot, then more workers for elastic jobs."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from budgeteer.core import Policy
from budgeteer.core.control import ActionKind, Running, runtime_action
from budgeteer.core.progress import Sample, Trend
from budgeteer.domain.job import SpotSettings, SwitchRule
from budgeteer.domain.offering import Market
from builders import NOW, make_job

# submitted at NOW, deadline NOW + 10 h: the margin is 5% of 10 h = 30 min
ON_TIME = (Sample(NOW, 0, 100), Sample(NOW + timedelta(hours=1), 50, 100))  # ETA NOW + 2 h
LATE = (Sample(NOW, 0, 100), Sample(NOW + timedelta(hours=1), 10, 100))  # ETA NOW + 10 h
RULE = SwitchRule(after_hours=1.5, if_progress_below=0.5)


def _run(
    market: Market = Market.SPOT,
    samples: tuple[Sample, ...] = ON_TIME,
    workers: int = 1,
    max_workers: int = 1,
    losses: tuple[float, ...] = (),
    early_stop: tuple[float, int] | None = None,
    rules: tuple[SwitchRule, ...] = (),
) -> Running:
    job = make_job("j", deadline_hours=10, workers=(1, max_workers))
    job = dataclasses.replace(
        job,
        early_stop=early_stop,
        spot=SpotSettings(allowed=True, switch_rules=rules),
    )
    return Running(job, market, workers, NOW, Trend.of(samples), losses)


@pytest.mark.parametrize(
    ("run", "hours", "kind", "workers"),
    [
        pytest.param(_run(), 1, None, None, id="on spot, on time: nothing"),
        pytest.param(_run(samples=LATE), 1, ActionKind.TO_ON_DEMAND, None, id="spot, late"),
        pytest.param(
            _run(samples=LATE, max_workers=8),
            1,
            ActionKind.TO_ON_DEMAND,
            None,
            id="spot first leaves spot even when elastic",
        ),
        pytest.param(
            _run(Market.ON_DEMAND, LATE, workers=2, max_workers=8),
            1,
            ActionKind.SCALE_UP,
            4,
            id="on-demand, late, elastic: twice the workers",
        ),
        pytest.param(
            _run(Market.ON_DEMAND, LATE, workers=6, max_workers=8),
            1,
            ActionKind.SCALE_UP,
            8,
            id="never above max_workers",
        ),
        pytest.param(
            _run(Market.ON_DEMAND, LATE, workers=8, max_workers=8),
            1,
            None,
            None,
            id="late at max workers: nothing left to do",
        ),
        pytest.param(
            _run(Market.ON_DEMAND, LATE),
            1,
            None,
            None,
            id="on-demand, late, not elastic",
        ),
        pytest.param(
            _run(rules=(RULE,), samples=LATE),
            1,
            ActionKind.TO_ON_DEMAND,
            None,
            id="late before the rule's time: the deadline check still moves it",
        ),
        pytest.param(
            _run(losses=(1.0, 0.99, 0.99, 0.99), early_stop=(0.05, 2), samples=LATE),
            1,
            ActionKind.EARLY_STOP,
            None,
            id="a stalled loss wins over a late ETA",
        ),
        pytest.param(
            _run(losses=(1.0, 0.8, 0.6, 0.4), early_stop=(0.05, 2)),
            1,
            None,
            None,
            id="an improving loss goes on",
        ),
    ],
)
def test_runtime_action(
    run: Running, hours: float, kind: ActionKind | None, workers: int | None
) -> None:
    action = runtime_action(run, NOW + timedelta(hours=hours), Policy())
    assert (action.kind if action else None) is kind
    assert (action.workers if action else None) == workers


def test_a_switch_rule_fires_on_spot_only_and_names_itself() -> None:
    # 40% done after 2 h: the ETA (NOW + 5 h) is on time, but the rule says leave spot
    samples = (Sample(NOW, 0, 100), Sample(NOW + timedelta(hours=2), 40, 100))
    action = runtime_action(
        _run(rules=(RULE,), samples=samples), NOW + timedelta(hours=2), Policy()
    )
    assert action is not None
    assert action.kind is ActionKind.TO_ON_DEMAND
    assert action.reason == "switch to on-demand: after 1.5 h under 50% done"
    on_demand = _run(Market.ON_DEMAND, rules=(RULE,), samples=samples)
    assert runtime_action(on_demand, NOW + timedelta(hours=2), Policy()) is None


def test_no_deadline_means_never_late() -> None:
    run = _run(Market.ON_DEMAND, LATE, max_workers=8)
    run = dataclasses.replace(run, job=dataclasses.replace(run.job, deadline=None))
    assert runtime_action(run, NOW + timedelta(hours=1), Policy()) is None
