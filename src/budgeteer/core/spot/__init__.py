"""Deadline-aware spot policies ("Can't Be Late", Wu et al., NSDI'24) and their replay."""

from __future__ import annotations

from collections.abc import Callable

from budgeteer.core.spot.decide import Decision, Default, Situation, TableMemo, decide
from budgeteer.core.spot.optimal import optimal_decisions
from budgeteer.core.spot.policies import Greedy, OnDemand, UniformProgress
from budgeteer.core.spot.replay import (
    Decider,
    Market,
    Mode,
    Observation,
    ReplayDecisions,
    RunResult,
    SpotJob,
    replay,
)
from budgeteer.core.spot.rules import RuleSet, WithRules, job_rules
from budgeteer.domain.job import SwitchRule
from budgeteer.errors import SpecError

ONLINE_POLICIES: dict[str, Callable[[], Default | Greedy | OnDemand | UniformProgress]] = {
    "default": Default,
    "greedy": Greedy,
    "uniform-progress": UniformProgress,
    "on-demand": OnDemand,
}
POLICY_NAMES = ("default", "greedy", "uniform-progress", "on-demand", "optimal")


def run_policy(
    market: Market, start: int, job: SpotJob, name: str, rules: RuleSet | None = None
) -> RunResult:
    """Replay ``job`` from ``start`` under the named policy (``optimal`` knows the future; the
    others are prepared on the market up to ``start`` only)."""
    if name == "optimal":
        _, decisions = optimal_decisions(market, start, job)
        return replay(market, start, job, ReplayDecisions(decisions))
    if name not in ONLINE_POLICIES:
        raise SpecError("--policy", f"unknown policy {name!r}; one of {', '.join(POLICY_NAMES)}")
    decider: Decider = ONLINE_POLICIES[name]().prepare(job, market.until(start))
    if rules is not None:
        decider = WithRules(decider, rules)
    return replay(market, start, job, decider)


__all__ = [
    "POLICY_NAMES",
    "Decider",
    "Decision",
    "Market",
    "Mode",
    "Observation",
    "RuleSet",
    "RunResult",
    "Situation",
    "SpotJob",
    "SwitchRule",
    "TableMemo",
    "decide",
    "job_rules",
    "optimal_decisions",
    "replay",
    "run_policy",
]
