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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from budgeteer.core.spot.replay import Decider, Mode, Observation
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecError


@dataclass(frozen=True, slots=True)
class SwitchRule:
    """After ``after_hours`` from the start, while done/total < ``if_progress_below``, use
    ``then``."""

    after_hours: float
    if_progress_below: float
    then: Mode = Mode.ON_DEMAND

    def __post_init__(self) -> None:
        if self.after_hours < 0:
            raise SpecError("after", "must not be negative")
        if not 0 < self.if_progress_below <= 1:
            raise SpecError("if_progress_below", "must be in (0, 1]")
        if self.then is not Mode.ON_DEMAND:
            raise SpecError("then", "a rule can only switch to on_demand")

    def fires(self, obs: Observation) -> bool:
        """True when this rule's condition holds at ``obs``."""
        progress = obs.done_hours / obs.job.work_hours
        return obs.elapsed_hours >= self.after_hours and progress < self.if_progress_below


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Switch rules and a preemption limit for a tier or a job."""

    rules: tuple[SwitchRule, ...] = ()
    max_preemptions: int | None = None


#: Default preemption limits per tier: critical work stops gambling on spot sooner.
DEFAULT_MAX_PREEMPTIONS: Mapping[Tier, int] = {Tier.P0: 2, Tier.P1: 3, Tier.P2: 5, Tier.P3: 10}


def rules_for(tier: Tier, job_rules: RuleSet | None, tier_rules: Mapping[Tier, RuleSet]) -> RuleSet:
    """The rules in force for a job: its own where given, else its tier's, else the default
    preemption limit of its tier."""
    base = tier_rules.get(tier, RuleSet(max_preemptions=DEFAULT_MAX_PREEMPTIONS[tier]))
    if job_rules is None:
        return base
    return RuleSet(
        rules=job_rules.rules or base.rules,
        max_preemptions=(
            job_rules.max_preemptions
            if job_rules.max_preemptions is not None
            else base.max_preemptions
        ),
    )


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
            or any(rule.fires(obs) for rule in self.ruleset.rules)
        ):
            self.fired_at = obs.tick
        if self.fired_at is not None:
            return Mode.ON_DEMAND
        return self.inner.decide(obs)


def parse_rules(
    raw: Sequence[Mapping[str, object]], field: str = "switch_rules"
) -> tuple[SwitchRule, ...]:
    """Rules from spec data like ``[{after: 90m, if_progress_below: 0.5, then: on_demand}]``."""
    from budgeteer.spec.job import parse_duration  # noqa: PLC0415 - the spec layer owns durations

    out = []
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        unknown = set(item) - {"after", "if_progress_below", "then"}
        if unknown:
            raise SpecError(f"{where}.{sorted(unknown)[0]}", "unknown field")
        try:
            after = parse_duration(str(item.get("after", "0s"))).total_seconds() / 3600
        except ValueError as exc:
            raise SpecError(f"{where}.after", str(exc)) from None
        below = item.get("if_progress_below")
        if not isinstance(below, int | float) or isinstance(below, bool):
            raise SpecError(f"{where}.if_progress_below", "must be a number in (0, 1]")
        then = str(item.get("then", "on_demand"))
        if then != Mode.ON_DEMAND.value:
            raise SpecError(f"{where}.then", "a rule can only switch to on_demand")
        try:
            out.append(SwitchRule(after, float(below), Mode.ON_DEMAND))
        except SpecError as exc:
            raise SpecError(f"{where}.{exc.field}", exc.problem) from None
    return tuple(out)
