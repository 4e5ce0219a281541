"""The sandbox's pools: the instances attempts left warm on pooled offerings, their idle time
handed out for billing, and both kept on disk so a restarted sandbox takes them back.

An attempt that ends on a pooled offering, unless the market took it, leaves its instances warm
— idle, still holding the offering's capacity, each with its id (the attempt that takes it next
keeps the id: one instance, one id, however many jobs). An idle instance stops idling when a
launch takes it, when :func:`~budgeteer.core.pools.size_pool` releases it (past the pool's
``idle_timeout``, above its ``min``), when the market takes a warm spot instance, or to make
room for a fresh launch. Each idle stretch becomes an :class:`~budgeteer.backends.base.
IdleTime`, billed by the scheduler to the attempt that left the instance warm; the instances
one attempt left warm are billed together, stretch by stretch, as each of them stops idling —
so no two ledger entries of that attempt start at the same time.

The warm instances and the stretches not yet handed out are kept in ``pools.json`` (written
whole, then renamed: a crash leaves the old file or the new one). Not thread-safe: the sandbox
calls it under its own lock.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from budgeteer.backends.base import IdleTime
from budgeteer.core.pools import Demand, PoolSettings, PoolState, size_pool
from budgeteer.domain.offering import Offering
from budgeteer.errors import BudgeteerError


class SandboxStateError(BudgeteerError):
    """The sandbox's kept state (``workdir``) cannot be read back (the file and what is
    wrong named); nothing is guessed, so no idle time goes unbilled."""


@dataclass(eq=False, slots=True)
class _Warm:
    """One idle pooled instance: since when, the attempt whose end left it warm, its id, and
    until when its idle time has been handed out for billing (``billed_from``)."""

    since: datetime
    offering: Offering
    job_id: str
    attempt: int
    instance_id: str
    billed_from: datetime


class WarmInstances:
    """The pooled offerings' warm instances (see the module docstring). ``settings``: offering
    id → its pool; empty, nothing is kept and nothing is written."""

    def __init__(self, settings: Mapping[str, PoolSettings], path: Path) -> None:
        self.settings = dict(settings)
        self.path = path
        self._warm: dict[str, list[_Warm]] = {}  # idle instances by offering id
        self._idle: list[IdleTime] = []  # idle stretches ended, not yet handed out

    def counts(self) -> dict[str, int]:
        """Warm instances by pooled offering (those with any)."""
        return {oid: len(w) for oid, w in self._warm.items() if w}

    def maximum(self, offering_id: str) -> int | None:
        """The most instances the offering's pool may hold at once, busy and warm (``None``:
        not pooled, or no ``max``)."""
        settings = self.settings.get(offering_id)
        return None if settings is None else settings.maximum

    def held(self, offering_id: str) -> int:
        """Instances of ``offering_id`` idling warm now."""
        return len(self._warm.get(offering_id, ()))

    def take_billed(self) -> list[IdleTime]:
        """The idle stretches that ended since the last call (each handed out once)."""
        taken, self._idle = self._idle, []
        self.save()
        return taken

    def take(self, offering_id: str, instances: int, now: datetime) -> tuple[str, ...] | None:
        """Take ``instances`` warm instances of the offering for a launch (the most recently
        idle): their ids, or ``None`` when its pool has not that many."""
        idle = self._warm.get(offering_id, [])
        if len(idle) < instances:
            return None
        idle.sort(key=lambda w: w.since)
        taken = idle[-instances:]
        for w in taken:
            self._end_idle(w, now)
        self.save()
        return tuple(w.instance_id for w in taken)

    def make_room(self, offering_id: str, short: int, now: datetime) -> None:
        """Give back up to ``short`` idle instances of the offering, longest idle first."""
        idle = self._warm.get(offering_id, [])
        for w in sorted(idle, key=lambda w: w.since)[: max(short, 0)]:
            self._give_back(w, now)

    def left(
        self, offering: Offering, job_id: str, attempt: int, ids: tuple[str, ...], at: datetime
    ) -> None:
        """An attempt ended at ``at``: its instances ``ids`` go warm, if its offering is
        pooled (the caller checks the market did not take them)."""
        if offering.id not in self.settings:
            return
        self._warm.setdefault(offering.id, []).extend(
            _Warm(at, offering, job_id, attempt, iid, at) for iid in ids
        )
        self.save()

    def release(self, busy: Callable[[str], int], now: datetime) -> None:
        """Give back what each pool's sizing releases (``busy``: an offering's instances
        running attempts now)."""
        for oid, idle in self._warm.items():
            if idle:
                state = PoolState(busy(oid), tuple(w.since for w in idle))
                plan = size_pool(self.settings[oid], state, Demand(), now)
                for since in plan.release:
                    self._give_back(next(w for w in idle if w.since == since), now)

    def revoked(self, gone: Callable[[Offering], bool], now: datetime) -> None:
        """Give back the warm instances of every offering ``gone`` says the market took."""
        for idle in self._warm.values():
            if idle and gone(idle[0].offering):
                for w in list(idle):
                    self._give_back(w, now)

    def _give_back(self, w: _Warm, at: datetime) -> None:
        self._end_idle(w, at)
        self.save()

    def _end_idle(self, w: _Warm, at: datetime) -> None:
        """``w`` stops idling at ``at``: it and every instance the same attempt left warm that
        still idles are billed up to ``at`` (one stretch, as many instances); the others go on
        from ``at``."""
        group = [
            v
            for v in self._warm[w.offering.id]
            if (v.job_id, v.attempt, v.billed_from) == (w.job_id, w.attempt, w.billed_from)
        ]
        self._warm[w.offering.id].remove(w)
        if at > w.billed_from:
            self._idle.append(
                IdleTime(w.offering.id, w.billed_from, at, w.job_id, w.attempt, len(group))
            )
            for v in group:
                v.billed_from = at

    # -- on disk ----------------------------------------------------------------------------
    def save(self) -> None:
        """Keep the warm instances and the stretches not yet handed out in ``path``."""
        if not self.settings:
            return
        doc = {
            "warm": [
                {
                    "since": w.since.isoformat(),
                    "offering_id": w.offering.id,
                    "job_id": w.job_id,
                    "attempt": w.attempt,
                    "instance_id": w.instance_id,
                    "billed_from": w.billed_from.isoformat(),
                }
                for idle in self._warm.values()
                for w in idle
            ],
            "idle": [
                {
                    "offering_id": i.offering_id,
                    "start": i.start.isoformat(),
                    "end": i.end.isoformat(),
                    "job_id": i.job_id,
                    "attempt": i.attempt,
                    "instances": i.instances,
                }
                for i in self._idle
            ],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.path)

    def restore(self, offerings: Mapping[str, Offering], now: datetime) -> None:
        """Take back what a previous sandbox left in ``path``: its warm instances stay warm
        (their idle time goes on being billed from where it was), and an instance of an
        offering that is no longer pooled is given back ``now`` (billed until then)."""
        if not self.settings or not self.path.exists():
            return
        try:
            doc = json.loads(self.path.read_text())
            idle = [
                IdleTime(
                    str(i["offering_id"]),
                    datetime.fromisoformat(i["start"]),
                    datetime.fromisoformat(i["end"]),
                    str(i["job_id"]),
                    int(i["attempt"]),
                    int(i["instances"]),
                )
                for i in doc["idle"]
            ]
            warm = [
                (
                    str(w["offering_id"]),
                    datetime.fromisoformat(w["since"]),
                    str(w["job_id"]),
                    int(w["attempt"]),
                    str(w["instance_id"]),
                    datetime.fromisoformat(w["billed_from"]),
                )
                for w in doc["warm"]
            ]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SandboxStateError(f"{self.path}: cannot read the pools' state: {exc}") from exc
        self._idle = idle
        gone: Counter[tuple[str, datetime, str, int]] = Counter()
        for oid, since, job_id, attempt, iid, billed in warm:
            offering = offerings.get(oid)
            if offering is None or oid not in self.settings:
                gone[oid, billed, job_id, attempt] += 1  # no longer pooled: given back now
                continue
            self._warm.setdefault(oid, []).append(
                _Warm(since, offering, job_id, attempt, iid, billed)
            )
        for (oid, billed, job_id, attempt), n in gone.items():
            if now > billed:  # their idle time billed up to now, together
                self._idle.append(IdleTime(oid, billed, now, job_id, attempt, n))
        self.save()
