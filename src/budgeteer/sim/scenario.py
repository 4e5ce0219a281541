"""Scenarios: a quarter (or any horizon) of retraining requests, as a validated YAML file.

See ``docs/simulate.md`` for every field. :func:`load_scenario` validates
(:mod:`~budgeteer.sim.schema`); :func:`build` turns a scenario into what
:func:`budgeteer.sim.run.simulate` takes: the catalog subset and the market
(:mod:`~budgeteer.sim.markets`), budgets, the policy base (team weights), GPU quotas, and the
arrivals drawn by the workload generators from the seed (:mod:`~budgeteer.sim.workload`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta

import numpy as np

from budgeteer.backends.market import SandboxMarket
from budgeteer.catalog import Catalog
from budgeteer.core import Policy
from budgeteer.core.pools import PoolSettings
from budgeteer.core.spot.estimate import MarketHistory
from budgeteer.domain.budget import Budget
from budgeteer.sim.markets import (
    scenario_catalog,
    scenario_histories,
    scenario_market,
    spot_offerings,
)
from budgeteer.sim.policies import policy_named
from budgeteer.sim.run import Arrival, SimRun, simulate
from budgeteer.sim.schema import Scenario, load_scenario
from budgeteer.sim.workload import draw_workload
from budgeteer.spec.budget import BudgetSpec, budget_from_spec
from budgeteer.spec.pool import pool_settings

__all__ = ["Built", "Scenario", "build", "load_scenario", "spot_offerings"]


@dataclasses.dataclass(frozen=True)
class Built:
    """A scenario ready to simulate."""

    scenario: Scenario
    catalog: Catalog
    market: SandboxMarket
    budgets: tuple[Budget, ...]
    policy: Policy
    gpu_quotas: dict[str, int]
    arrivals: tuple[Arrival, ...]
    gate_failures: frozenset[str]  # job ids whose validation gate fails
    pipeline_runs: dict[str, tuple[str, ...]]  # a gate's job id → its run's job ids
    pools: dict[str, PoolSettings] = dataclasses.field(default_factory=dict)  # by offering id
    #: the market histories the service starts with (``market.history_days``)
    histories: tuple[MarketHistory, ...] = ()

    def run(self, policy: str, on_day: Callable[[datetime], None] | None = None) -> SimRun:
        """Simulate this scenario under the policy named ``policy`` (see
        :mod:`budgeteer.sim.policies`)."""
        return simulate(
            self.arrivals,
            self.catalog,
            self.market,
            start=self.start,
            end=self.end,
            budgets=self.budgets,
            policy=policy_named(policy, self.policy, self.gpu_quotas),
            fails=self.gate_failures,
            on_day=on_day,
            pools=self.pools,
            histories=self.histories,
        )

    @property
    def start(self) -> datetime:
        """When the simulation starts."""
        return self.scenario.start

    @property
    def end(self) -> datetime:
        """When it ends."""
        return self.scenario.start + timedelta(days=self.scenario.days)


def build(scenario: Scenario, seed: int | None = None) -> Built:
    """The catalog subset, market, budgets, policy and arrivals of ``scenario``."""
    rng = np.random.default_rng(scenario.seed if seed is None else seed)
    catalog = scenario_catalog(scenario)
    market = scenario_market(scenario, catalog)
    budgets = tuple(budget_from_spec(BudgetSpec.model_validate(b)) for b in scenario.budgets)
    policy = Policy(team_weights=tuple((t.name, t.weight) for t in scenario.teams))
    quotas = {t.name: t.gpu_quota for t in scenario.teams if t.gpu_quota is not None}
    drawn = draw_workload(scenario, catalog, rng)
    return Built(
        scenario,
        catalog,
        market,
        budgets,
        policy,
        quotas,
        drawn.arrivals,
        drawn.gate_failures,
        drawn.pipeline_runs,
        pool_settings(scenario.pools, catalog.offerings),
        scenario_histories(scenario, catalog, market),
    )
