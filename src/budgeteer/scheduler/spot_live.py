"""The spot decider, live: every cycle, for each running attempt of a job that may use spot,
the pure :func:`~budgeteer.core.spot.decide.decide` — the one the replay benchmark runs — says
whether to stay, bridge to on-demand, or move back to spot.

What it reads, per attempt:

- the job's **remaining work** in hours on this placement: its ETA from the progress reports
  (no ETA yet → no decision); spot and on-demand *siblings* (same provider, region and instance
  type, so the same speed) are the alternatives;
- the **changeover** d: the spot offering's start-up, the job's restart overhead and half its
  checkpoint interval (a preemption's cost; the MDP plans with one changeover, the dearer);
- the **market**: the spot offering's history in the :class:`~budgeteer.scheduler.markets.
  MarketBook` (up or down, since when, the periods seen) → the availability chain; the prices
  in force (the backend's) for spot and on-demand, times the attempt's instances.

Epochs (see :mod:`budgeteer.core.spot.decide`): one per attempt and spot offering, begun again
when that offering's market flips (the estimate moved): C = the work left then, R = the time to
the deadline then. The table is solved once per epoch; each cycle looks it up.

Applied as: a spot attempt told anything but ``spot`` (on-demand, or wait — spot is dearer
than it is worth) is checkpointed and relaunched on on-demand (``bridge_on_demand``: its next
plan has no spot); an on-demand attempt told anything but ``on_demand`` while a sibling spot
offering is up (spot, or wait — the MDP breaks a tie towards waiting) is checkpointed and
relaunched with spot allowed again (``to_spot``). Switch rules and the preemption fallback
keep their meaning: a job they moved to on-demand stays there (latched), and the decider does
not move it back. A job moved back to spot whose plan chose on-demand anyway is not moved
again (no ping-pong).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from budgeteer.core import Policy
from budgeteer.core.progress import Trend
from budgeteer.core.spot.decide import Decision, Situation, TableMemo, decide
from budgeteer.core.spot.estimate import Availability
from budgeteer.core.spot.replay import Mode
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Market, Offering
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.scheduler.markets import MarketBook
from budgeteer.store.base import Attempt

#: Prefix of the decider's causes (events, attempts' exit reasons).
PREFIX = "spot decider"


@dataclass(frozen=True, slots=True)
class _Group:
    on_demand: Offering | None
    spot: tuple[Offering, ...]


@dataclass(frozen=True, slots=True)
class _Epoch:
    key: tuple[int, str, int]  # attempt, spot offering, periods closed when it began
    started: datetime
    work_hours: float
    deadline_hours: float
    availability: Availability
    spot_usd: float
    on_demand_usd: float
    changeover_hours: float


@dataclass(frozen=True, slots=True)
class Move:
    """A decided move: how the attempt ends (``bridge_on_demand`` or ``to_spot``) and why."""

    outcome: AttemptOutcome
    cause: str
    decision: Decision


def changeover_hours(job: Job, spot: Offering) -> float:
    """What one changeover costs the job, in hours: the start-up of a new instance, the job's
    restart overhead, and half a checkpoint interval of work lost — a preemption's cost, the
    dearer of the two kinds (a decided move checkpoints first and loses none)."""
    lost = job.checkpoint_interval_seconds / 2.0
    return (spot.startup_seconds + job.restart_overhead_seconds + lost) / 3600.0


def _group_key(o: Offering) -> tuple[str, str, str]:
    return (o.provider, o.region, o.instance_type)


class LiveSpot:
    """Decisions for running attempts (loop thread only; see the module docstring)."""

    def __init__(
        self,
        book: MarketBook,
        offerings: Mapping[str, Offering],
        policy: Policy,
        price: Callable[[Offering, datetime], float],
    ) -> None:
        self.book = book
        self.offerings = offerings
        self.policy = policy
        self.price = price
        self.memo = TableMemo(size=64)
        self._epochs: dict[int, _Epoch] = {}
        groups: dict[tuple[str, str, str], list[Offering]] = {}
        for o in offerings.values():
            groups.setdefault(_group_key(o), []).append(o)
        self._groups = {
            k: _Group(
                next((o for o in v if o.market is Market.ON_DEMAND), None),
                tuple(o for o in v if o.market is Market.SPOT),
            )
            for k, v in groups.items()
        }

    def forget(self, attempt_id: int) -> None:
        """The attempt ended."""
        self._epochs.pop(attempt_id, None)

    def move(
        self,
        job: Job,
        attempt: Attempt,
        trend: Trend,
        history: Callable[[], Sequence[Attempt]],
        now: datetime,
    ) -> Move | None:
        """The move the decider asks of this running attempt, or ``None`` (stay)."""
        policy = self.policy
        if not (policy.live_spot and policy.allow_spot and job.spot.allowed) or not job.deadline:
            return None
        offering = self.offerings.get(attempt.offering_id)
        eta = trend.eta()
        if offering is None or eta is None or eta <= now or job.deadline <= now:
            return None
        group = self._groups.get(_group_key(offering))
        if group is None or group.on_demand is None or not group.spot:
            return None
        if offering.market is Market.SPOT:
            spot, mode = offering, Mode.SPOT
        elif offering.market is Market.ON_DEMAND:
            up = [o for o in group.spot if self.book.history(o.id).up is True]
            if not up or not self._may_return(job, history()):
                return None
            spot = min(up, key=lambda o: (self.price(o, now), o.id))
            mode = Mode.ON_DEMAND
        else:
            return None
        remaining = (eta - now).total_seconds() / 3600.0
        epoch = self._epoch(job, attempt, spot, group.on_demand, remaining, now)
        market = self.book.history(spot.id)
        d = epoch.changeover_hours
        running = (now - attempt.started_at).total_seconds() / 3600.0
        situation = Situation(
            work_hours=epoch.work_hours,
            deadline_hours=epoch.deadline_hours,
            changeover_hours=d,
            spot_usd_per_hour=epoch.spot_usd,
            on_demand_usd_per_hour=epoch.on_demand_usd,
            elapsed_hours=(now - epoch.started).total_seconds() / 3600.0,
            done_hours=min(max(epoch.work_hours - remaining, 0.0), epoch.work_hours),
            mode=mode,
            changeover_left_hours=max(0.0, d - running),
            spot_up=mode is Mode.SPOT or market.up is True,
            spot_age_hours=market.age_hours(now),
            tick_hours=policy.spot_decision_seconds / 3600.0,
        )
        decision = decide(situation, epoch.availability, self.memo)
        if decision.mode is mode:
            return None
        if mode is Mode.SPOT:  # on-demand, or wait: either way spot is not worth holding
            cause = f"{PREFIX}: {decision.reason}; leave spot for {group.on_demand.id}"
            return Move(AttemptOutcome.BRIDGE_ON_DEMAND, cause, decision)
        # spot, or wait: either way on-demand is not worth holding, and spot is up
        cause = f"{PREFIX}: {decision.reason}; leave on-demand: {spot.id} is up"
        return Move(AttemptOutcome.TO_SPOT, cause, decision)

    def _may_return(self, job: Job, attempts: Sequence[Attempt]) -> bool:
        """Whether an on-demand job may go back to spot: not latched there by a switch rule,
        the late check or the preemption limit, and not already sent back once only for its
        plan to choose on-demand again."""
        outcomes = [a.outcome for a in attempts]
        limit = self.policy.spot_rules_for(job).max_preemptions
        if AttemptOutcome.TO_ON_DEMAND in outcomes:
            return False
        if limit is not None and outcomes.count(AttemptOutcome.PREEMPTED) >= limit:
            return False
        ended = [o for o in outcomes if o is not None]
        return not ended or ended[-1] is not AttemptOutcome.TO_SPOT

    def _epoch(
        self,
        job: Job,
        attempt: Attempt,
        spot: Offering,
        on_demand: Offering,
        remaining: float,
        now: datetime,
    ) -> _Epoch:
        market = self.book.history(spot.id)
        key = (attempt.id, spot.id, len(market.periods))
        epoch = self._epochs.get(attempt.id)
        if epoch is not None and epoch.key == key:
            return epoch
        assert job.deadline is not None
        d = changeover_hours(job, spot)
        tick = self.policy.spot_decision_seconds / 3600.0
        step = max(1, round(max(1, round(d / tick)) / 4)) * tick
        n = attempt.instances
        epoch = _Epoch(
            key,
            now,
            remaining,
            (job.deadline - now).total_seconds() / 3600.0,
            market.estimate(now, step, d),
            self.price(spot, now) * n,
            self.price(on_demand, now) * n,
            d,
        )
        self._epochs[attempt.id] = epoch
        return epoch
