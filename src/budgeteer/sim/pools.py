"""The simulator's pools (mixed into :class:`~budgeteer.sim.backend.SimBackend`): warm instances
taken, kept and given back on the kernel's time, boots for a pool's floor, and their idle time
billed — per instance in :attr:`SimPools.idle`, and for the ledger through
:meth:`SimPools.take_idle` (to the attempt that left an instance warm, or to the pool's team for
what it booted with no job). See the backend's module docstring."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from functools import partial

from budgeteer.backends.base import IdleTime
from budgeteer.backends.market import PROBE_SECONDS, REVOCABLE, SandboxMarket
from budgeteer.backends.warm import hand_over, stop_idling
from budgeteer.core.pools import Demand, PoolSettings, PoolState, size_pool
from budgeteer.domain.offering import Offering
from budgeteer.ledger.billing import amount_usd
from budgeteer.sim.idle import Idle, IdleStretch, Warm
from budgeteer.sim.kernel import AFTER_CYCLE, Kernel


class SimPools:
    """The pools' side of the simulated backend (its state is the backend's)."""

    kernel: Kernel
    market: SandboxMarket
    _pools: dict[str, Warm]  # by offering id (empty with the policy's pools off)
    _in_use: dict[str, int]  # instances held per offering: busy, idle and booting
    _offerings: dict[str, Offering]
    idle: list[IdleStretch]  # the pools' idle stretches, per instance
    _to_bill: list[IdleTime]  # idle time for the ledger, not yet handed out
    boots: list[tuple[str, datetime, str]]  # (offering id, when, instance id)

    def _schedule_floors(self) -> None:
        """Size each pool with a floor now, and again whenever its floor changes."""
        for oid, pool in self._pools.items():
            if pool.settings.minimum or pool.settings.warm:
                if oid not in self._offerings:
                    raise ValueError(f"pool {oid}: boots for its floor, but is not in offerings")
                self.kernel.schedule(
                    self.kernel.now, partial(self._floor, oid), label=f"floor {oid}"
                )

    def _next_revocation(
        self, offering: Offering, start: datetime, until: datetime
    ) -> datetime | None:
        t = start
        step = timedelta(seconds=PROBE_SECONDS)
        while t <= until:
            if not self.market.available(offering, t):
                return t
            t += step
        return None

    def pool_settings(self) -> dict[str, PoolSettings]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        return {oid: p.settings for oid, p in self._pools.items()}

    def warm_instances(self) -> dict[str, int]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        now = self.kernel.now
        ready = {oid: len(p.ready(now)) for oid, p in self._pools.items()}
        return {oid: n for oid, n in ready.items() if n}

    def warm_data(self) -> dict[str, dict[str, int]]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        now = self.kernel.now
        held = {
            oid: Counter(i.data for i in p.ready(now) if i.data is not None)
            for oid, p in self._pools.items()
        }
        return {oid: dict(c) for oid, c in held.items() if c}

    def take_idle(self) -> list[IdleTime]:
        """See :class:`~budgeteer.backends.base.IdleBilling`: the idle time that ended since
        the last call, for the scheduler to bill into the ledger as the service does."""
        taken, self._to_bill = self._to_bill, []
        return taken

    def release_idle(self) -> None:
        """See :class:`~budgeteer.backends.base.IdleBilling`: the simulation gives instances
        back at the very moment their pool's sizing says; at a cycle's end, a pool with a floor
        boots what it lacks (the market may have taken some)."""
        for oid, pool in self._pools.items():
            if pool.settings.floor(self.kernel.now):
                self._trim(self._offerings[oid])

    def _floor(self, oid: str) -> None:
        """Size a pool with a floor now, and again when its floor next changes."""
        self._trim(self._offerings[oid])
        at = self._pools[oid].settings.next_floor_change(self.kernel.now)
        if at is not None:
            self.kernel.schedule(at, lambda: self._floor(oid), label=f"floor {oid}")

    def _boot(self, offering: Offering, pool: Warm, wanted: int, now: datetime) -> None:
        """Boot up to ``wanted`` instances with no job: as many as the offering's capacity
        leaves room for, none while its market has none; warm after its start-up, their idle
        time the pool's team's."""
        in_use = self._in_use.get(offering.id, 0)
        room = wanted
        if offering.max_instances is not None:
            room = min(wanted, offering.max_instances - in_use)
        if room <= 0 or not self.market.available(offering, now):
            return
        ready = now + timedelta(seconds=offering.startup_seconds)
        team = pool.settings.team
        for _ in range(room):
            iid = f"boot-{offering.id}-{len(self.boots)}"
            self.boots.append((offering.id, now, iid))
            pool.idle.append(Idle(ready, iid, None, 0, now, None, team, now))
        self._in_use[offering.id] = in_use + room
        timeout = pool.settings.idle_timeout_seconds
        self.kernel.schedule(
            ready + timedelta(seconds=timeout),
            lambda: self._trim(offering),
            priority=AFTER_CYCLE,
            label=f"idle {offering.id}",
        )

    def _reusable(
        self,
        offering: Offering,
        instances: int,
        now: datetime,
        data: str | None = None,
        team: str | None = None,
    ) -> tuple[tuple[str, ...], bool] | None:
        """Take ``instances`` warm instances of ``offering``'s pool for a launch (those holding
        the job's dataset ``data`` first, then the most recently idle: the others reach their
        timeout sooner), billing their idle time: their ids and whether they all hold ``data``
        (no download), or ``None`` when the pool has not that many."""
        pool = self._pools.get(offering.id)
        if pool is None or (team is not None and not pool.settings.serves(team)):
            return None
        self._drop_revoked(offering, pool, now)
        ready = pool.ready(now)
        if len(ready) < instances:
            return None
        # stable: among equal keys, the order they came
        ready.sort(key=lambda i: (data is not None and i.data == data, i.since))
        taken = ready[-instances:]
        for idle in taken:
            self._stop_idling(offering, pool, idle, now)
        held = data is not None and all(i.data == data for i in taken)
        return tuple(i.instance_id for i in taken), held

    def _make_room(self, offering: Offering, short: int, now: datetime) -> int:
        """Give back up to ``short`` idle instances (longest idle first) so a fresh launch fits
        the offering's capacity; how many were given back."""
        pool = self._pools.get(offering.id)
        if pool is None:
            return 0
        pool.idle.sort(key=lambda i: i.since)
        freed = pool.idle[:short]
        for idle in freed:
            self._give_back(offering, pool, idle, until=now)
        return len(freed)

    def _trim(self, offering: Offering) -> None:
        """Give back what the pool's sizing releases (idle past the timeout, above its floor)
        and boot what its floor lacks."""
        pool = self._pools[offering.id]
        now = self.kernel.now
        self._drop_revoked(offering, pool, now)
        idle = len(pool.idle)
        busy = self._in_use.get(offering.id, 0) - idle
        plan = size_pool(pool.settings, PoolState(busy, tuple(pool.idle_since)), Demand(), now)
        for since in plan.release:
            self._give_back(offering, pool, pool.first_since(since), until=now)
        self._to_bill += hand_over(pool.idle, pool.settings, offering.id, now)
        if plan.boot:
            self._boot(offering, pool, plan.boot, now)

    def _drop_revoked(self, offering: Offering, pool: Warm, now: datetime) -> None:
        """Warm spot (or lent on-prem) instances the market took back since they went idle."""
        if offering.market not in REVOCABLE:
            return
        for idle in list(pool.idle):
            taken = self._next_revocation(offering, idle.idle_from, now)
            if taken is not None:
                self._give_back(offering, pool, idle, until=taken)

    def _give_back(self, offering: Offering, pool: Warm, idle: Idle, *, until: datetime) -> None:
        self._stop_idling(offering, pool, idle, until)
        self._in_use[offering.id] = self._in_use.get(offering.id, 0) - 1

    def _stop_idling(self, offering: Offering, pool: Warm, idle: Idle, at: datetime) -> None:
        """``idle`` leaves the pool's idle instances at ``at``: its stretch is kept (per
        instance), and the ledger's share — it and every instance the same attempt left warm
        that still idles, billed together up to ``at`` (as the sandbox and EC2 do: one entry
        per stretch, so none shares its attempt and start with another) — queued for
        :meth:`take_idle`."""
        stretch = stop_idling(pool.idle, idle, offering.id, at)
        self._bill_idle(offering, idle.idle_from, at, idle.instance_id)
        if stretch is not None:
            self._to_bill.append(stretch)

    def _bill_idle(
        self, offering: Offering, start: datetime, end: datetime, instance_id: str
    ) -> None:
        for a, b, usd, source in self.market.segments(offering, start, end):
            if b > a:
                self.idle.append(
                    IdleStretch(
                        offering.id, a, b, usd, amount_usd(usd, 1, a, b), source, instance_id
                    )
                )
