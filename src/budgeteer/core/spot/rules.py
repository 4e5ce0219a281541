"""Switch rules and the preemption fallback, as data evaluated by the core.

A switch rule reads "after ``after_hours``, if progress is below ``if_progress_below``, run on
``then``": e.g. ``{after: 90m, if_progress_below: 0.5, then: on_demand}`` for a 4 h SLA.
Rules are checked every tick and, once one fires, the job stays on on-demand. The preemption
fallback sends a job to on-demand for the rest of its run once it has been preempted
``max_preemptions`` times. Rules and fallback wrap any policy; the policy's own safety net stays
in force underneath, and a rule can only ask for on-demand (never for a riskier market), so the
deadline guarantee holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from budgeteer.core.spot.replay import Decider, Mode, Observation
from budgeteer.domain.job import Job, SwitchRule
from budgeteer.domain.tier import Tier


def fires(rule: SwitchRule, obs: Observation) -> bool:
    """True when ``rule``'s condition holds at ``obs``."""
    progress = obs.done_hours / obs.job.work_hours
    return obs.elapsed_hours >= rule.after_hours and progress < rule.if_progress_below


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Switch rules and a preemption limit for a tier or a job."""

    rules: tuple[SwitchRule, ...] = ()
    max_preemptions: int | None = None


#: Default preemption limits per tier: critical work stops gambling on spot sooner.
DEFAULT_MAX_PREEMPTIONS: Mapping[Tier, int] = {Tier.P0: 2, Tier.P1: 3, Tier.P2: 5, Tier.P3: 10}


def rules_for(tier: Tier, own: RuleSet | None, tier_rules: Mapping[Tier, RuleSet]) -> RuleSet:
    """The rules in force for a job: its own where given, else its tier's, else the default
    preemption limit of its tier."""
    base = tier_rules.get(tier, RuleSet(max_preemptions=DEFAULT_MAX_PREEMPTIONS[tier]))
    if own is None:
        return base
    return RuleSet(
        rules=own.rules or base.rules,
        max_preemptions=(
            own.max_preemptions if own.max_preemptions is not None else base.max_preemptions
        ),
    )


def job_rules(job: Job, tier_rules: Mapping[Tier, RuleSet]) -> RuleSet:
    """The rules in force for ``job`` (its spot settings over its tier's)."""
    return rules_for(job.tier, RuleSet(job.spot.switch_rules, job.spot.max_preemptions), tier_rules)


@dataclass(slots=True)
class WithRules:
    """A decider wrapped with switch rules and the preemption fallback, for one run.

    Once a rule fires (or the preemption limit is reached) the job stays on on-demand for the
    rest of the run: ``fired_at`` latches the tick, a function of the observations so far.
    """

    inner: Decider
    ruleset: RuleSet
    fired_at: int | None = None

    def decide(self, obs: Observation) -> Mode:
        """On-demand once a rule has fired or the preemption limit is reached, else the policy."""
        limit = self.ruleset.max_preemptions
        if self.fired_at is None and (
            (limit is not None and obs.preemptions >= limit)
            or any(fires(rule, obs) for rule in self.ruleset.rules)
        ):
            self.fired_at = obs.tick
        if self.fired_at is not None:
            return Mode.ON_DEMAND
        return self.inner.decide(obs)
