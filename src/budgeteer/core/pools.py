"""Pool sizing (pure): how many instances a pool should hold now, which idle ones to give back,
and how many to boot ahead of a known burst.

A pool groups the instances of some offerings (an accelerator × market × region, or named
offerings) that the fleet keeps between jobs instead of giving each attempt fresh ones. Its
settings: ``minimum`` instances always kept (warm), ``maximum`` never exceeded by what it holds
(busy and idle: the planner places no more than ``maximum`` instances there at once, see
:func:`pooled_offerings`), and
``idle_timeout_seconds`` — an instance idle longer than that with nothing planned for it is
given back (with ``minimum`` 0 the pool scales to zero). Each cycle :func:`size_pool` reads the
pool's instances (busy, and idle since when) and its demand — instances jobs placed there need
now, and instances known work will need soon (a cron burst, jobs waiting on a dependency) — and
says:

- ``target`` — ``max(busy + needed now, needed soon within the boot lead, floor)``, capped at
  ``maximum``, where the floor is ``minimum`` or, while a scheduled ``warm`` window is open or
  opens within one start-up, that window's instances (a pool warmed ahead of a nightly burst);
- ``boot`` — instances to launch now so that ``target`` is reached (those needed now, and those
  needed soon whose start lies within one start-up of now: scale-up ahead of a burst);
- ``release`` — idle instances to give back, longest idle first: those idle at least
  ``idle_timeout_seconds`` that the target does not need, and always any above ``maximum``.

An idle instance is billed while it idles (the ledger's ``idle`` entries, to the attempt that
left it warm; an instance the pool booted with no job — for its floor — is billed to the pool's
``team`` as a :class:`~budgeteer.store.records.PoolCharge` until a job takes it, and a pool that
boots must name one); this function only says how many — the backends carry it out and the
planner prices reuse against a fresh start.
Batching — which jobs wait to run back to back on a pool's instances — is
:mod:`budgeteer.core.batching`'s, from the :class:`PoolView` each snapshot carries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from budgeteer.domain.cron import CronError, cron_times, parse_cron
from budgeteer.domain.offering import Offering
from budgeteer.domain.tier import Tier
from budgeteer.errors import BudgeteerError


class PoolError(BudgeteerError):
    """Settings that cannot describe a pool (the field named)."""


@dataclass(frozen=True, slots=True)
class WarmWindow:
    """A scheduled floor: from each time ``cron`` fires (five fields, UTC), keep ``instances``
    warm for ``seconds`` — booted one start-up ahead, so they are ready when it fires."""

    cron: str
    instances: int
    seconds: float

    def opens(self, since: datetime, until: datetime) -> bool:
        """Whether the window is open at some time in ``[since, until]``."""
        start = since - timedelta(seconds=self.seconds) + timedelta(microseconds=1)
        end = until + timedelta(microseconds=1)
        return next(cron_times(self.cron, start, end), None) is not None


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """One pool's settings (validated: ``0 ≤ minimum ≤ maximum``, a timeout ``≥ 0``, and a
    ``team`` to pay for what the pool boots with no job when it has a floor)."""

    name: str
    minimum: int = 0
    maximum: int | None = None
    idle_timeout_seconds: float = 600.0
    startup_seconds: float = 120.0  # the lead to boot ahead of known demand
    #: how long a job placed on the pool may wait to run back to back on one of its instances
    #: instead of booting its own (:mod:`budgeteer.core.batching`); 0: never
    batch_wait_seconds: float = 0.0
    #: the wait for the tiers named here instead (``((Tier.P3, 7200.0), …)``: a P3 retrain
    #: waits longer than a P1); P0 never waits
    batch_wait_by_tier: tuple[tuple[Tier, float], ...] = ()
    #: who pays for the instances the pool boots with no job (its ``minimum``, its ``warm``
    #: windows) while they idle; required when it has either
    team: str | None = None
    #: scheduled floors (a nightly burst's instances booted ahead of it)
    warm: tuple[WarmWindow, ...] = ()
    #: the teams whose jobs may use the pool — take its warm instances, wait for them, leave
    #: theirs warm in it (empty: every team); other teams' jobs on the offering boot their own
    #: instances and give them back, as on an offering without a pool
    teams: tuple[str, ...] = ()

    def serves(self, team: str) -> bool:
        """Whether jobs of ``team`` may use the pool."""
        return not self.teams or team in self.teams

    def floor(self, now: datetime) -> int:
        """The instances the pool keeps at ``now`` with no job asking: ``minimum``, or more
        while a ``warm`` window is open or opens within one start-up."""
        lead = now + timedelta(seconds=self.startup_seconds)
        out = self.minimum
        for w in self.warm:
            if w.instances > out and w.opens(now, lead):
                out = w.instances
        return out

    def next_floor_change(self, now: datetime) -> datetime | None:
        """The next time after ``now`` the floor may change: a ``warm`` window's boot (one
        start-up before it fires) or the end of one open now (``None``: never — no windows)."""
        lead = timedelta(seconds=self.startup_seconds)
        tick = timedelta(microseconds=1)
        times: list[datetime] = []
        for w in self.warm:
            start = now + lead + tick
            fire = next(cron_times(w.cron, start, start + timedelta(days=367)), None)
            if fire is not None:
                times.append(fire - lead)
            hold = timedelta(seconds=w.seconds)
            times += [f + hold for f in cron_times(w.cron, now - hold + tick, start)]
        return min((t for t in times if t > now), default=None)

    def batch_wait_for(self, tier: Tier) -> float:
        """How long a job of ``tier`` may wait for a pool instance (0 for P0: never)."""
        if tier is Tier.P0:
            return 0.0
        return dict(self.batch_wait_by_tier).get(tier, self.batch_wait_seconds)

    @property
    def batches(self) -> bool:
        """Whether any tier may wait for a pool instance."""
        return self.batch_wait_seconds > 0 or any(w > 0 for _, w in self.batch_wait_by_tier)

    def __post_init__(self) -> None:
        if self.minimum < 0:
            raise PoolError(f"pools.{self.name}.min: must be ≥ 0, got {self.minimum}")
        if self.maximum is not None and self.maximum < max(self.minimum, 1):
            raise PoolError(
                f"pools.{self.name}.max: must be ≥ min ({self.minimum}) and ≥ 1, got {self.maximum}"
            )
        if not self.idle_timeout_seconds >= 0:  # NaN too
            raise PoolError(
                f"pools.{self.name}.idle_timeout: must be ≥ 0 s, got {self.idle_timeout_seconds}"
            )
        if not self.batch_wait_seconds >= 0:
            raise PoolError(
                f"pools.{self.name}.batch_wait: must be ≥ 0 s, got {self.batch_wait_seconds}"
            )
        for tier, wait in self.batch_wait_by_tier:
            if tier is Tier.P0 or not wait >= 0:
                raise PoolError(
                    f"pools.{self.name}.batch_wait.{tier.name}: "
                    + ("P0 jobs never wait" if tier is Tier.P0 else f"must be ≥ 0 s, got {wait}")
                )
        if not self.startup_seconds >= 0:
            raise PoolError(
                f"pools.{self.name}.startup_seconds: must be ≥ 0, got {self.startup_seconds}"
            )
        for i, w in enumerate(self.warm):
            self._check_window(i, w)
        if (self.minimum or self.warm) and not self.team:
            field = "min" if self.minimum else "warm"
            raise PoolError(
                f"pools.{self.name}.team: required with {field} (the team that pays for the "
                "instances the pool boots with no job)"
            )

    def _check_window(self, i: int, w: WarmWindow) -> None:
        where = f"pools.{self.name}.warm[{i}]"
        try:
            parse_cron(w.cron)
        except CronError as exc:
            raise PoolError(f"{where}.at: {exc}") from None
        if w.instances < 1 or (self.maximum is not None and w.instances > self.maximum):
            cap = "" if self.maximum is None else f" and ≤ max ({self.maximum})"
            raise PoolError(f"{where}.instances: must be ≥ 1{cap}, got {w.instances}")
        if not w.seconds > 0:
            raise PoolError(f"{where}.for: must be > 0 s, got {w.seconds}")


@dataclass(frozen=True, slots=True)
class PoolView:
    """A pooled offering as the planner sees it (in :attr:`~budgeteer.core.Snapshot.pools`):
    its settings, how many of its instances idle warm now, and the datasets they hold
    (``data``: ``(uri, idle instances holding it)``, from the jobs that ran on them). Its busy
    instances are the running allocations on ``settings.name`` (the offering id)."""

    settings: PoolSettings
    idle: int = 0
    data: tuple[tuple[str, int], ...] = ()


def warm_data(
    pools: Sequence[PoolView], team: str | None = None
) -> dict[str, tuple[tuple[str, int], ...]]:
    """For each dataset ``uri`` a warm instance holds: the pooled offerings holding it and on
    how many idle instances (sorted by offering id) — a job with that data placed there on
    no more instances needs no transfer (see :func:`budgeteer.core.fronts.placements`). With
    ``team``, only the pools that team's jobs may use."""
    out: dict[str, list[tuple[str, int]]] = {}
    for view in sorted(pools, key=lambda v: v.settings.name):
        if team is not None and not view.settings.serves(team):
            continue
        for uri, count in view.data:
            if count > 0:
                out.setdefault(uri, []).append((view.settings.name, count))
    return {uri: tuple(held) for uri, held in out.items()}


def closed_to(pools: Sequence[PoolView], team: str) -> tuple[str, ...]:
    """The pooled offerings whose warm instances ``team``'s jobs may not take (its ``teams``
    leave it out) while some idle there: priced for that team with their own boot."""
    return tuple(
        sorted(v.settings.name for v in pools if v.idle > 0 and not v.settings.serves(team))
    )


def boots_of(pools: Sequence[PoolView], offering_ids: Sequence[str]) -> dict[str, float]:
    """The boot (start-up seconds) of each of these pooled offerings."""
    wanted = set(offering_ids)
    return {v.settings.name: v.settings.startup_seconds for v in pools if v.settings.name in wanted}


@dataclass(frozen=True, slots=True)
class PoolState:
    """The pool's instances now: ``busy`` running a job, and one idle-since time per idle one."""

    busy: int = 0
    idle_since: tuple[datetime, ...] = ()

    @property
    def size(self) -> int:
        """Instances held (busy and idle)."""
        return self.busy + len(self.idle_since)


@dataclass(frozen=True, slots=True)
class Demand:
    """Instances wanted: ``now`` by jobs placed on the pool this cycle, and ``(at, instances)``
    for known work that will want them at ``at`` (a cron burst, a dependency about to end)."""

    now: int = 0
    soon: tuple[tuple[datetime, int], ...] = ()


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """What :func:`size_pool` decided, and why."""

    target: int
    boot: int
    release: tuple[datetime, ...]  # the idle-since times of the instances to give back
    reason: str


def size_pool(settings: PoolSettings, state: PoolState, demand: Demand, now: datetime) -> PoolPlan:
    """The pool's size this cycle (see the module docstring)."""
    lead = now + timedelta(seconds=settings.startup_seconds)
    needed_now = state.busy + demand.now
    needed_soon = max((n for at, n in demand.soon if at <= lead), default=0)
    floor = settings.floor(now)
    wanted = max(needed_now, needed_soon, floor)
    cap = settings.maximum
    target = wanted if cap is None else min(wanted, cap)
    reasons = [f"busy {state.busy}", f"placed now {demand.now}"]
    if needed_soon:
        reasons.append(f"{needed_soon} wanted by {lead:%H:%M:%S}")
    if floor > settings.minimum:
        reasons.append(f"warm window {floor}")
    elif settings.minimum:
        reasons.append(f"min {settings.minimum}")
    if cap is not None and wanted > cap:
        reasons.append(f"capped at max {cap}")
    boot = max(target - state.size, 0)
    idle = sorted(state.idle_since)  # longest idle first
    spare = max(state.size - target, 0)  # instances the target does not need
    timeout = timedelta(seconds=settings.idle_timeout_seconds)
    over_cap = 0 if cap is None else max(state.size - cap, 0)
    release: list[datetime] = []
    for since in idle:
        if len(release) >= spare:
            break
        if len(release) < over_cap or now - since >= timeout:
            release.append(since)
    if release:
        reasons.append(f"release {len(release)} idle ≥ {settings.idle_timeout_seconds:g} s")
    return PoolPlan(target, boot, tuple(release), "; ".join(reasons))


def pooled_offerings(
    offerings: tuple[Offering, ...], pools: Sequence[PoolView]
) -> tuple[Offering, ...]:
    """The offerings as the planner sees them with their pools: one whose pool holds a warm
    instance starts without a boot (``startup_seconds`` 0, so a job goes there when that is
    cheaper, and only then); one whose pool has a ``maximum`` takes at most that many instances
    at once (``max_instances`` capped: the pool grows up to it and a job that finds it full
    goes elsewhere or waits for an instance to free — the place step counts the running ones).
    The tuple is returned unchanged when no pool changes an offering (the core's memos keep)."""
    by_id = {v.settings.name: v for v in pools}
    changed = False
    out: list[Offering] = []
    for o in offerings:
        view = by_id.get(o.id)
        if view is None:
            out.append(o)
            continue
        cap = view.settings.maximum
        limit = o.max_instances
        if cap is not None:
            limit = cap if limit is None else min(cap, limit)
        startup = 0.0 if view.idle > 0 else o.startup_seconds
        if limit == o.max_instances and startup == o.startup_seconds:
            out.append(o)
            continue
        changed = True
        out.append(dataclasses.replace(o, max_instances=limit, startup_seconds=startup))
    return tuple(out) if changed else offerings


def size_pools(
    pools: Sequence[tuple[PoolSettings, PoolState, Demand]], now: datetime
) -> dict[str, PoolPlan]:
    """:func:`size_pool` for each pool, by name."""
    return {s.name: size_pool(s, st, d, now) for s, st, d in pools}
