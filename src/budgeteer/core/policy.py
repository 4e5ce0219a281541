"""Scheduling policy: the knobs of the decision core, as one frozen record."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from budgeteer.core.spot.rules import RuleSet, job_rules
from budgeteer.domain.job import Job
from budgeteer.domain.tier import Tier


class QueueOrder(StrEnum):
    """``fair_share``: tier, then fair share on money, slack, age (``order.py``); ``fifo``:
    submission order only, whatever the tier (a baseline)."""

    FAIR_SHARE = "fair_share"
    FIFO = "fifo"


class SolverChoice(StrEnum):
    """How placements are chosen jointly: ``auto`` uses the MILP when the problem is small
    enough and the greedy fallback otherwise; ``milp`` and ``greedy`` force one."""

    AUTO = "auto"
    MILP = "milp"
    GREEDY = "greedy"


@dataclass(frozen=True, slots=True)
class Policy:
    """Everything the core's decisions depend on besides the snapshot.

    Multi-GPU scaling: each doubling of GPUs inside one instance keeps
    ``intra_node_efficiency_per_doubling`` of linear speed-up; each doubling of instances keeps
    ``inter_node_efficiency_per_doubling``. Spot plans must meet the deadline with
    ``spot_deadline_sigmas`` standard deviations of runtime to spare, and are not considered when
    expected preemption overhead would inflate runtime by more than ``max_spot_inflation``.
    ``spot_rules`` gives switch rules and preemption limits per tier (jobs may override them).
    A running job whose ETA passes its deadline minus ``deadline_margin_fraction`` of the time
    from submission to deadline is behind schedule.

    The baselines the simulator compares against are policies too: ``allow_spot`` False never
    plans spot; ``allow_revocable`` False plans no capacity that can be taken back (spot or an
    on-prem pool lent out on a calendar: any offering with an interruption rate);
    ``queue_order`` FIFO ignores tiers and fair share; ``enforce_budgets`` False
    admits without looking at money; ``team_gpu_quotas`` (and ``default_team_gpu_quota``) cap the
    GPUs a team holds at once, Kueue-style (held with reason ``quota``).

    ``run_late_jobs``: a job that can no longer meet its deadline (and whose
    ``on_deadline_miss`` is ``run``) is planned late against a fresh deadline — for one no plan
    finishes in time, the fastest plan's time plus ``late_slack_fraction`` — and ordered after
    the on-time jobs of its tier; off, such jobs are held as infeasible.

    ``live_spot``: the spot decider (:mod:`budgeteer.core.spot.decide`) watches every running
    job that may use spot, every cycle, on a grid of ``spot_decision_seconds``: it bridges a
    spot job to on-demand when its slack can no longer absorb what spot may cost, and moves an
    on-demand job back to spot when spot is up and worth the changeover. Off (the simulator's
    ``default-planner-spot``), the market is the planner's choice at launch alone.

    ``use_pools``: offerings declared in ``pools`` keep an ended attempt's instances warm for
    the next job (:mod:`budgeteer.core.pools`); off (the simulator's ``default-no-pools``), every
    attempt boots its own and gives them back when it ends.

    ``pipeline_reserve``: a job others wait on is planned to finish early enough for them
    (:mod:`budgeteer.core.reserve`), not merely by the deadline they share; off (the
    simulator's baselines), each step is planned to the pipeline's deadline alone.

    ``data_download_gb_per_hour``: how fast a job's dataset (``data.size_gb``) reaches a fresh
    instance — a start-up its placement bills and its finish waits for, except on a warm
    instance that holds it already (:mod:`budgeteer.core.data_moves`); 2,250 GB/h is 5 Gbit/s,
    0 leaves downloads out of the plans.
    """

    intra_node_efficiency_per_doubling: float = 0.97
    inter_node_efficiency_per_doubling: float = 0.90
    spot_deadline_sigmas: float = 1.0
    max_spot_inflation: float = 1.5
    fair_share_half_life_seconds: float = 7 * 24 * 3600.0
    team_weights: tuple[tuple[str, float], ...] = ()
    starvation_seconds: float = 24 * 3600.0
    max_front: int = 6
    solver: SolverChoice = SolverChoice.AUTO
    milp_max_variables: int = 4000
    milp_time_limit_seconds: float = 2.0
    spot_rules: tuple[tuple[Tier, RuleSet], ...] = ()
    deadline_margin_fraction: float = 0.05
    allow_spot: bool = True
    allow_revocable: bool = True
    queue_order: QueueOrder = QueueOrder.FAIR_SHARE
    enforce_budgets: bool = True
    team_gpu_quotas: tuple[tuple[str, int], ...] = ()
    default_team_gpu_quota: int | None = None
    run_late_jobs: bool = True
    late_slack_fraction: float = 0.25
    live_spot: bool = True
    spot_decision_seconds: float = 600.0
    use_pools: bool = True
    data_download_gb_per_hour: float = 2250.0
    pipeline_reserve: bool = True

    def spot_rules_for(self, job: Job) -> RuleSet:
        """Switch rules and preemption limit for ``job``: its own over its tier's."""
        return job_rules(job, dict(self.spot_rules))

    def gpu_quota(self, team: str) -> int | None:
        """GPUs ``team`` may hold at once (``None``: no quota)."""
        return dict(self.team_gpu_quotas).get(team, self.default_team_gpu_quota)

    def team_weight(self, team: str) -> float:
        """The fair-share weight of ``team`` (1.0 unless configured)."""
        return dict(self.team_weights).get(team, 1.0)
