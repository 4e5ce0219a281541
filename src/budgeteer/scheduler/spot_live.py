"""The spot decider, live: every cycle, for each running attempt of a job that may use spot,
the pure :func:`~budgeteer.core.spot.decide.decide` — the one the replay benchmark runs — says
whether to stay, bridge to on-demand, or move back to spot.

What it reads, per attempt:

- the job's **remaining work** in hours on this placement: its ETA from the progress reports
  (no ETA yet → no decision); spot and on-demand *siblings* (same provider, region and instance
  type, so the same speed) are the alternatives;
- its **deadline**, less the time the jobs waiting on it need after it: the reserve the plan
  that launched the attempt kept (``Attempt.reserve_hours``; for a queued job, its admission's
  — waived or lengthened when the planner priced it, :mod:`budgeteer.core.candidates`), or,
  for an attempt recorded without one, :func:`~budgeteer.core.reserve.downstream_hours`: a
  pipeline's validate and package steps keep their time;
- the **changeover** d: the spot offering's start-up, the job's restart overhead and half its
  checkpoint interval (a preemption's cost; the MDP plans with one changeover, the dearer);
- the **market**: the spot offering's history in the :class:`~budgeteer.scheduler.markets.
  MarketBook` (up or down, since when, the periods seen) → the availability chain; the prices
  in force (the backend's) for spot and on-demand, times the attempt's instances.

Epochs (see :mod:`budgeteer.core.spot.decide`): one per attempt and spot offering, begun again
when that offering's market has seen a quarter more periods than the epoch's estimate (the
estimate moved; re-solving at every flip was most of a simulation's time): C = the work left
then, R = the time to the deadline then, on a grid of ``spot_decision_seconds`` or R/120,
whichever is coarser; C, R − C and the prices on geometric grids 4% apart (work and the spot
price rounded up, slack and the on-demand price down: never the optimistic side), and the
market's estimate from its closed periods — so that the jobs of one family share a table. The
table is solved once per epoch (or found in the memo); each cycle looks it up.

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

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from budgeteer.core import Placement, Policy
from budgeteer.core.progress import Trend
from budgeteer.core.spot.decide import (
    Decision,
    Situation,
    TableMemo,
    decide,
    estimate_moved,
    step_ticks,
)
from budgeteer.core.spot.estimate import Availability, MarketHistory
from budgeteer.core.spot.replay import Mode
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Market, Offering
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.scheduler.markets import MarketBook
from budgeteer.scheduler.snapshots import off_spot_for_good
from budgeteer.store.base import Attempt
from budgeteer.store.records import SpotDecisionRecord

#: Prefix of the decider's causes (events, attempts' exit reasons).
PREFIX = "spot decider"


@dataclass(frozen=True, slots=True)
class _Group:
    on_demand: Offering | None
    spot: tuple[Offering, ...]


#: The most steps an epoch's table has in the service (a long epoch gets a coarser grid).
MAX_LIVE_STEPS = 120


@dataclass(frozen=True, slots=True)
class _Epoch:
    spot_id: str
    periods: int  # the market's closed periods when it began
    started: datetime
    tick_hours: float
    work_hours: float
    deadline_hours: float
    availability: Availability
    spot_usd: float
    on_demand_usd: float
    changeover_hours: float


@dataclass(frozen=True, slots=True)
class Move:
    """A decided move: how the attempt ends (``bridge_on_demand`` or ``to_spot``), why in
    words (the event's cause), and the record the store keeps of it."""

    outcome: AttemptOutcome
    cause: str
    record: SpotDecisionRecord

    @property
    def decision(self) -> Decision:
        """The decider's answer."""
        return self.record.decision


def changeover_hours(job: Job, spot: Offering, measured_seconds: float | None = None) -> float:
    """What one changeover costs the job, in hours: as measured from its own restarts
    (``measured_seconds``, see :func:`measured_changeover_seconds`) once it has restarted,
    never less than a new instance's start-up; before that, the start-up of a new instance, the
    job's declared restart overhead and half a checkpoint interval of work lost — a
    preemption's cost, the dearer of the two kinds (a decided move checkpoints first and loses
    none)."""
    if measured_seconds is not None:
        return max(measured_seconds, spot.startup_seconds) / 3600.0
    lost = job.checkpoint_interval_seconds / 2.0
    return (spot.startup_seconds + job.restart_overhead_seconds + lost) / 3600.0


def measured_changeover_seconds(
    attempts: Sequence[Attempt], reports: Sequence[tuple[datetime, float]]
) -> float | None:
    """What the job's changeovers have cost it, measured from its attempts and its progress
    reports ``(time, step)``: for each attempt that resumed (every one that ran after the first
    that ran), the time from its start until the job was back at the step it had reached when
    the attempt before it ended — start-up, restart and the work redone, all in one. The step
    reached is the earlier attempt's last report carried on at its own rate to its end; the
    time back is where the resumed attempt's reports cross it (carried back along its rate when
    its first report is already past it). The median of those restarts (the declared parts
    count half a checkpoint interval of lost work: an expected changeover, as this), or
    ``None`` before any.

    Example: reports 3,400 at 9:30 and 4,000 at 9:40 (60 steps a minute), preempted at 9:45
    (4,300 reached); resumed at 10:00, reports 4,000 at 10:10 and 4,600 at 10:20 → back at
    4,300 at 10:15: 900 s."""
    ran = [a for a in attempts if a.ended_at is None or a.ended_at > a.started_at]
    times = sorted(reports)

    def own(a: Attempt) -> list[tuple[datetime, float]]:
        end = a.ended_at
        return [(t, s) for t, s in times if t > a.started_at and (end is None or t <= end)]

    def rate(points: list[tuple[datetime, float]], k: int) -> float:
        """Steps a second between the two points around index ``k``."""
        (t0, s0), (t1, s1) = points[max(k - 1, 0)], points[max(k, 1)]
        return (s1 - s0) / (t1 - t0).total_seconds() if t1 > t0 else 0.0

    seen: list[float] = []
    for before, a in itertools.pairwise(ran):
        was, now = own(before), own(a)
        if not was or before.ended_at is None or len(now) < 2:
            continue
        t_last, reached = was[-1]
        if len(was) >= 2:
            reached += (
                max(0.0, rate(was, len(was) - 1)) * (before.ended_at - t_last).total_seconds()
            )
        if now[-1][1] < reached:
            continue
        k = next(i for i, (_, s) in enumerate(now) if s >= reached)
        r = rate(now, k)
        if r <= 0:
            continue
        back = now[k][0] - timedelta(seconds=(now[k][1] - reached) / r)
        back = min(max(back, a.started_at), now[k][0])
        seen.append((back - a.started_at).total_seconds())
    return statistics.median(seen) if seen else None


#: Grid points per doubling for the epoch's numbers (about 4% apart).
GRID_PER_OCTAVE = 16


def _grid(x: float, up: bool = False) -> float:
    """``x`` on a geometric grid, rounded up or down (0 stays 0)."""
    if x <= 0:
        return 0.0
    k = math.log2(x) * GRID_PER_OCTAVE
    return float(2.0 ** ((math.ceil(k - 1e-9) if up else math.floor(k + 1e-9)) / GRID_PER_OCTAVE))


def _record(
    job_id: str, attempt_id: int | None, at: datetime, action: str, spot: str, d: Decision
) -> SpotDecisionRecord:
    return SpotDecisionRecord(job_id, attempt_id, at, action, spot, d.mode, d.situation, d.netted)


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
        changeover_seconds: Callable[[str], float | None] = lambda job_id: None,
    ) -> None:
        self.book = book
        #: the job's measured changeover (``None``: not measured yet), read when an epoch
        #: begins
        self.changeover_seconds = changeover_seconds
        self.offerings = offerings
        self.policy = policy
        self.price = price
        self.memo = TableMemo(size=512)
        self._epochs: dict[tuple[str, int | str], _Epoch] = {}
        #: hours the jobs waiting on a job need after it (set by the scheduler each cycle): the
        #: reserve of an attempt recorded without the one its plan kept
        self.downstream: Mapping[str, float] = {}
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
        self._epochs.pop(("attempt", attempt_id), None)

    def launched(self, job_id: str) -> None:
        """The job launched: it is no longer queued."""
        self._epochs.pop(("queued", job_id), None)

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
        reserve = attempt.reserve_hours
        if reserve is None:
            reserve = self.downstream.get(job.id, 0.0)
        due = job.deadline - timedelta(hours=reserve)
        if offering is None or eta is None or eta <= now or due <= now:
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
        epoch = self._epoch(
            ("attempt", attempt.id),
            job,
            spot,
            group.on_demand,
            attempt.instances,
            remaining,
            due,
            now,
        )
        market = self.book.history(spot.id)
        running = (now - attempt.started_at).total_seconds() / 3600.0
        decision = self._decide(
            epoch,
            market,
            now,
            mode,
            done=min(max(epoch.work_hours - remaining, 0.0), epoch.work_hours),
            changeover_left=max(0.0, epoch.changeover_hours - running),
            spot_up=mode is Mode.SPOT or market.up is True,
        )
        if decision.mode is mode:
            return None
        if mode is Mode.SPOT:  # on-demand, or wait: either way spot is not worth holding
            cause = f"{PREFIX}: {decision.reason}; leave spot for {group.on_demand.id}"
            outcome = AttemptOutcome.BRIDGE_ON_DEMAND
        else:  # spot, or wait: either way on-demand is not worth holding, and spot is up
            cause = f"{PREFIX}: {decision.reason}; leave on-demand: {spot.id} is up"
            outcome = AttemptOutcome.TO_SPOT
        record = _record(job.id, attempt.id, now, outcome.value, spot.id, decision)
        return Move(outcome, cause, record)

    def queued(
        self, job: Job, placement: Placement, now: datetime, reserve_hours: float
    ) -> SpotDecisionRecord | None:
        """For a job the plan puts on a spot offering that is down, to finish ``reserve_hours``
        before its deadline: the decider's answer when it is to take on-demand now (``None``:
        wait, as the plan does, or nothing to decide)."""
        policy = self.policy
        if not policy.live_spot or placement.market is not Market.SPOT or not job.deadline:
            return None
        spot = self.offerings.get(placement.offering_id)
        group = self._groups.get(_group_key(spot)) if spot is not None else None
        market = self.book.history(placement.offering_id)
        if spot is None or group is None or group.on_demand is None or market.up is not False:
            return None
        due = job.deadline - timedelta(hours=reserve_hours)
        if due <= now:
            return None
        owner = ("queued", job.id)
        epoch = self._epoch(
            owner,
            job,
            spot,
            group.on_demand,
            placement.instances,
            placement.runtime_hours,
            due,
            now,
        )
        decision = self._decide(
            epoch, market, now, Mode.IDLE, done=0.0, changeover_left=0.0, spot_up=False
        )
        if decision.mode is Mode.ON_DEMAND:
            self._epochs.pop(owner, None)
            return _record(job.id, None, now, "take_on_demand", spot.id, decision)
        return None

    def _decide(
        self,
        epoch: _Epoch,
        market: MarketHistory,
        now: datetime,
        mode: Mode,
        *,
        done: float,
        changeover_left: float,
        spot_up: bool,
    ) -> Decision:
        """The decider's answer at this position of ``epoch``."""
        situation = Situation(
            work_hours=epoch.work_hours,
            deadline_hours=epoch.deadline_hours,
            changeover_hours=epoch.changeover_hours,
            spot_usd_per_hour=epoch.spot_usd,
            on_demand_usd_per_hour=epoch.on_demand_usd,
            elapsed_hours=(now - epoch.started).total_seconds() / 3600.0,
            done_hours=done,
            mode=mode,
            changeover_left_hours=changeover_left,
            spot_up=spot_up,
            spot_age_hours=market.age_hours(now),
            tick_hours=epoch.tick_hours,
            last_uptime_hours=market.last_uptime_hours(),
        )
        return decide(situation, epoch.availability, self.memo)

    def _may_return(self, job: Job, attempts: Sequence[Attempt]) -> bool:
        """Whether an on-demand job may go back to spot: not latched there by a switch rule,
        the late check or the preemption limit, and not already sent back once only for its
        plan to choose on-demand again."""
        outcomes = [a.outcome for a in attempts]
        if off_spot_for_good(job, outcomes, self.policy):
            return False
        ended = [o for o in outcomes if o is not None]
        return not ended or ended[-1] is not AttemptOutcome.TO_SPOT

    def _epoch(
        self,
        owner: tuple[str, int | str],
        job: Job,
        spot: Offering,
        on_demand: Offering,
        n: int,
        remaining: float,
        due: datetime,
        now: datetime,
    ) -> _Epoch:
        """The epoch of ``owner`` (a running attempt, or a queued job) on ``spot``, begun again
        when the market's estimate moved."""
        market = self.book.history(spot.id)
        seen = len(market.periods)
        epoch = self._epochs.get(owner)
        if (
            epoch is not None
            and epoch.spot_id == spot.id
            and not estimate_moved(epoch.periods, seen)
        ):
            return epoch
        d = changeover_hours(job, spot, self.changeover_seconds(job.id))
        # on geometric grids (work up, slack down: never optimistic), so that jobs of one
        # family share their tables
        remaining = _grid(remaining, up=True)
        deadline = remaining + _grid(max(0.0, (due - now).total_seconds() / 3600 - remaining))
        tick = max(self.policy.spot_decision_seconds / 3600.0, deadline / MAX_LIVE_STEPS)
        step = step_ticks(d, tick, remaining, max(0.0, deadline - remaining)) * tick
        epoch = _Epoch(
            spot.id,
            seen,
            now,
            tick,
            remaining,
            deadline,
            market.estimate(None, step, d),
            _grid(self.price(spot, now) * n, up=True),
            _grid(self.price(on_demand, now) * n),
            d,
        )
        self._epochs[owner] = epoch
        return epoch
