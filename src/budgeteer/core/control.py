"""Runtime actions for a running attempt (pure): stop early, leave spot, or scale out.

The supervisor calls :func:`runtime_action` at each cycle for every running attempt with what
it has observed (progress samples, losses); the answer is data, applied by the supervisor as
checkpoint → stop → relaunch (or stop for good). In order of precedence:

1. **early stop** — the job asked for it (``early_stop = (δ, k)``) and its loss has not improved
   by δ over the last k reports: stop, release the rest of its budget;
2. **to on-demand** — on spot, a switch rule fires (``after 1.5 h under 50% done``), or the ETA
   passes the deadline less the margin: relaunch on on-demand, where nothing revokes it;
3. **scale up** — not on spot (or spot not allowed), behind schedule, and the job is elastic with
   room (``max_workers`` above its current workers): relaunch with twice the workers (at most
   ``max_workers``); the planner then places the larger shape.

Example: a P1 job on spot with a 6 h deadline, 20% done after 2 h and a rule ``after 1.5 h
under 50%`` → ``TO_ON_DEMAND``; the same job on on-demand with workers 2 of max 8, ETA past the
deadline → ``SCALE_UP`` to 4 workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from budgeteer.core.policy import Policy
from budgeteer.core.progress import Trend, loss_stalled, rule_fires
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Market

#: Prefixes of the stop reasons, so the store's attempt records say which action ended them.
SWITCH_PREFIX = "switch to on-demand"
SCALE_PREFIX = "scale up to"
EARLY_STOP_PREFIX = "early stop"


class ActionKind(StrEnum):
    """What the supervisor does to a running attempt."""

    EARLY_STOP = "early_stop"
    TO_ON_DEMAND = "to_on_demand"
    SCALE_UP = "scale_up"


@dataclass(frozen=True, slots=True)
class RuntimeAction:
    """An action with its reason (the event's cause); ``workers`` for a scale-up."""

    kind: ActionKind
    reason: str
    workers: int | None = None


@dataclass(frozen=True, slots=True)
class Running:
    """What the supervisor knows of one running attempt."""

    job: Job
    market: Market
    workers: int
    started_at: datetime
    trend: Trend  # the progress seen (the latest sample, the smoothed step rate)
    losses: Sequence[float]


def runtime_action(run: Running, now: datetime, policy: Policy) -> RuntimeAction | None:
    """The action to take on ``run`` now, or ``None`` (see the module docstring)."""
    job = run.job
    if job.early_stop and loss_stalled(run.losses, *job.early_stop):
        delta, patience = job.early_stop
        return RuntimeAction(
            ActionKind.EARLY_STOP,
            f"{EARLY_STOP_PREFIX}: loss improved less than {delta} over the last "
            f"{patience} reports",
        )
    if run.market is Market.SPOT:
        rule = rule_fires(policy.spot_rules_for(job).rules, run.started_at, now, run.trend.last)
        if rule is not None:
            return RuntimeAction(
                ActionKind.TO_ON_DEMAND,
                f"{SWITCH_PREFIX}: after {rule.after_hours:g} h under "
                f"{rule.if_progress_below:.0%} done",
            )
    late = _late(run, policy)
    if late is None:
        return None
    if run.market is Market.SPOT:
        return RuntimeAction(ActionKind.TO_ON_DEMAND, f"{SWITCH_PREFIX}: {late}")
    if job.resources.max_workers > run.workers:
        workers = min(job.resources.max_workers, 2 * run.workers)
        return RuntimeAction(
            ActionKind.SCALE_UP, f"{SCALE_PREFIX} {workers} workers: {late}", workers
        )
    return None


def _late(run: Running, policy: Policy) -> str | None:
    """Why the job is behind schedule, or ``None`` when it is not (or has no deadline, or was
    started after its deadline had passed: it runs late at best effort, and leaving spot would
    only cost more)."""
    deadline = run.job.deadline
    if deadline is None or deadline <= run.started_at:
        return None
    margin = (deadline - run.job.submitted_at) * policy.deadline_margin_fraction
    if not run.trend.behind(deadline, margin):
        return None
    finish = run.trend.eta()
    assert finish is not None  # behind needs an ETA
    return f"ETA {finish:%H:%M} is past the deadline {deadline:%H:%M} less margin"
