"""The policies a simulation compares, by name — all of them settings of the same core.

- ``default`` — everything budgeteer does: tiers, fair share on money, budgets with tier
  thresholds and the P0 reserve, spot when it meets the deadline with margin, switch rules and
  fallbacks, cheaper variants before holds.
- ``on-demand-fifo`` — no spot (nor any capacity that can be taken back, such as an on-prem pool
  lent out on a calendar), first come first served, no budget awareness: what a hand-rolled
  queue in front of on-demand instances does.
- ``spot-greedy-fifo`` — spot whenever an offering exists (no deadline margin, any inflation),
  back to on-demand after one preemption, FIFO, no budget awareness.
- ``priority-quota`` — Kueue-like: priority tiers and fair share between teams, per-team GPU
  quotas (held with reason ``quota``), no money awareness (budgets are not enforced).
- ``default-planner-spot`` (by name only) — ``default`` without the live spot decider: the
  planner alone picks the market, at each launch.
- ``default-no-pools`` (by name only) — ``default`` with the scenario's ``pools`` off: every
  attempt boots its own instances and gives them back when it ends.

The three baselines plan each step of a pipeline to the pipeline's deadline alone (as a queue in
front of Kueue or a cron script does); ``default`` and its variants keep each step's
dependents their time (``Policy.pipeline_reserve``).

The scenario's ``pools`` (warm instances kept between jobs) are fleet settings: every policy
but ``default-no-pools`` uses them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from budgeteer.core.policy import Policy, QueueOrder
from budgeteer.core.spot.rules import RuleSet
from budgeteer.domain.tier import Tier

POLICY_NAMES = ("default", "on-demand-fifo", "spot-greedy-fifo", "priority-quota")
#: Settings of ``default`` with one part turned off, to measure what it brings (by name only,
#: not in ``all``).
VARIANT_NAMES = ("default-planner-spot", "default-no-pools")
SELECTABLE = POLICY_NAMES + VARIANT_NAMES


class UnknownPolicy(ValueError):
    """A policy name that is not one of :data:`POLICY_NAMES`."""


def policy_named(
    name: str, base: Policy | None = None, gpu_quotas: Mapping[str, int] | None = None
) -> Policy:
    """The named policy over ``base`` (team weights and the rest of a scenario's settings);
    ``gpu_quotas`` are the teams' GPU quotas for ``priority-quota``."""
    base = base or Policy()
    if name == "default":
        return base
    if name == "default-planner-spot":
        return dataclasses.replace(base, live_spot=False)
    if name == "default-no-pools":
        return dataclasses.replace(base, use_pools=False)
    if name == "on-demand-fifo":
        return dataclasses.replace(
            base,
            allow_spot=False,
            allow_revocable=False,
            queue_order=QueueOrder.FIFO,
            enforce_budgets=False,
            pipeline_reserve=False,
        )
    if name == "spot-greedy-fifo":
        return dataclasses.replace(
            base,
            queue_order=QueueOrder.FIFO,
            enforce_budgets=False,
            pipeline_reserve=False,
            spot_deadline_sigmas=0.0,
            max_spot_inflation=math.inf,
            spot_rules=tuple((t, RuleSet(max_preemptions=1)) for t in Tier),
        )
    if name == "priority-quota":
        return dataclasses.replace(
            base,
            enforce_budgets=False,
            pipeline_reserve=False,
            team_gpu_quotas=tuple(sorted((gpu_quotas or {}).items())),
        )
    raise UnknownPolicy(f"unknown policy {name!r}; available: {', '.join(SELECTABLE)}")
