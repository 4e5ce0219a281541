"""A backend's pools: the instances attempts left warm on pooled offerings, their idle time
handed out for billing, and both kept (a file for the sandbox, an S3 object for EC2) so a
restarted backend takes them back.

An attempt that ends on a pooled offering, unless the market took it, leaves its instances warm
— idle, still holding the offering's capacity, each with its id (the attempt that takes it next
keeps the id: one instance, one id, however many jobs). An idle instance stops idling when a
launch takes it, when :func:`~budgeteer.core.pools.size_pool` releases it (past the pool's
``idle_timeout``, above its ``min``), when the market takes a warm spot instance, or to make
room for a fresh launch. Each idle stretch becomes an :class:`~budgeteer.backends.base.
IdleTime`, billed by the scheduler to the attempt that left the instance warm; the instances
one attempt left warm are billed together, stretch by stretch, as each of them stops idling —
so no two ledger entries of that attempt start at the same time.

A pool with a floor (its ``min``, a ``warm`` window open or opening within one start-up) boots
the instances it lacks with no job (:meth:`WarmInstances.release` says how many, the backend
boots them and hands them to :meth:`WarmInstances.booted`): each is
warm from when its start-up ends (``since``; not counted nor taken before), and its idle time —
from the boot, start-up included — goes to the pool's ``team`` (an :class:`~budgeteer.backends.
base.IdleTime` with no job) until a job takes it or it is given back.

The warm instances and the stretches not yet handed out are kept in a :class:`StateDoc` —
``pools.json`` in the sandbox's workdir (written whole, then renamed: a crash leaves the old
file or the new one), an S3 object for EC2 (a put replaces it whole). The ids of instances given
back are collected for a backend that must end them itself (:meth:`WarmInstances.
take_released`: EC2 terminates them). Not thread-safe: the backend calls it under its own lock.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol, TypeVar

from budgeteer.backends.base import IdleTime
from budgeteer.core.pools import Demand, PoolSettings, PoolState, size_pool
from budgeteer.domain.offering import Offering
from budgeteer.errors import BudgeteerError


class PoolStateError(BudgeteerError):
    """A backend's kept pool state cannot be read back (where it is and what is wrong named);
    nothing is guessed, so no idle time goes unbilled."""


class StateDoc(Protocol):
    """Where the pools' state is kept: one document, read whole and replaced whole."""

    @property
    def where(self) -> str:
        """Where it is, for messages (a path, an ``s3://`` URL)."""
        ...

    def read(self) -> str | None:
        """The document, or ``None`` when there is none yet."""
        ...

    def write(self, text: str) -> None:
        """Replace the document with ``text`` (all or nothing)."""
        ...


@dataclass(frozen=True, slots=True)
class FileDoc:
    """A :class:`StateDoc` in a local file, replaced by a rename."""

    path: Path

    @property
    def where(self) -> str:
        """The file's path."""
        return str(self.path)

    def read(self) -> str | None:
        """The file's text, or ``None`` when it does not exist."""
        return self.path.read_text() if self.path.exists() else None

    def write(self, text: str) -> None:
        """Write a sibling, then rename it over the file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)


class Idling(Protocol):
    """An idle pooled instance as billing reads it: the attempt whose end left it warm (whose
    ledger pays) or, for one its pool booted with no job (``job_id`` ``None``), the pool's team;
    its id; and until when its idle time has been handed out."""

    since: datetime
    job_id: str | None
    attempt: int
    team: str | None
    instance_id: str
    billed_from: datetime


IdleT = TypeVar("IdleT", bound=Idling)


def stop_idling(idle: list[IdleT], w: IdleT, offering_id: str, at: datetime) -> IdleTime | None:
    """``w`` leaves ``idle`` (an offering's idle instances) at ``at``: it and every instance the
    same attempt left warm that still idles are billed up to ``at`` — the stretch returned, one
    for as many instances, so no two entries of that attempt start at the same time — and the
    others go on from ``at`` (``None``: nothing left to bill)."""
    key = (w.job_id, w.attempt, w.team, w.billed_from)
    group = [v for v in idle if (v.job_id, v.attempt, v.team, v.billed_from) == key]
    idle.remove(w)
    if at <= w.billed_from:
        return None
    ids = tuple(v.instance_id for v in group)
    stretch = IdleTime(offering_id, w.billed_from, at, w.job_id, w.attempt, len(group), w.team, ids)
    for v in group:
        v.billed_from = at
    return stretch


def hand_over(
    idle: list[IdleT], settings: PoolSettings, offering_id: str, now: datetime
) -> list[IdleTime]:
    """The pool's floor keeps ``idle`` (its idle instances) past their idle timeout: an attempt
    pays for the idle time it leaves only up to the pool's ``idle_timeout`` — from then on an
    instance the floor keeps is the pool's ``team``'s. Each instance left by an attempt idle
    that long (and its whole group: they left together) is billed to the attempt up to that
    moment — the stretches returned — and handed to the team (no-op for a pool without a team
    or a floor)."""
    if settings.team is None or not settings.floor(now):
        return []
    timeout = timedelta(seconds=settings.idle_timeout_seconds)
    out: list[IdleTime] = []
    for w in list(idle):
        if w.job_id is None or now - w.since < timeout:
            continue
        at = max(w.since + timeout, w.billed_from)
        key = (w.job_id, w.attempt, w.team, w.billed_from)
        group = [v for v in idle if (v.job_id, v.attempt, v.team, v.billed_from) == key]
        if at > w.billed_from:
            ids = tuple(v.instance_id for v in group)
            out.append(
                IdleTime(offering_id, w.billed_from, at, w.job_id, w.attempt, len(group), None, ids)
            )
        for v in group:
            v.job_id, v.attempt, v.team, v.billed_from = None, 0, settings.team, at
    return out


@dataclass(eq=False, slots=True)
class _Warm:
    """One idle pooled instance: since when (for one the pool booted, when its start-up ends),
    the attempt whose end left it warm (``job_id`` ``None``: booted with no job, paid by the
    pool's ``team``), its id, until when its idle time has been handed out for billing
    (``billed_from``), and the dataset that attempt's job ran with (``data``: still in the
    instance's cache)."""

    since: datetime
    offering: Offering
    job_id: str | None
    attempt: int
    instance_id: str
    billed_from: datetime
    data: str | None = None
    team: str | None = None


class WarmInstances:
    """The pooled offerings' warm instances (see the module docstring). ``settings``: offering
    id → its pool; empty, nothing is kept and nothing is written."""

    def __init__(self, settings: Mapping[str, PoolSettings], doc: StateDoc) -> None:
        self.settings = dict(settings)
        self.doc = doc
        self._warm: dict[str, list[_Warm]] = {}  # idle instances by offering id
        self._idle: list[IdleTime] = []  # idle stretches ended, not yet handed out
        self._released: list[str] = []  # ids of instances given back, not yet handed out

    def counts(self, now: datetime | None = None) -> dict[str, int]:
        """Warm instances by pooled offering (those with any): ready by ``now`` (``None``:
        all, booting or not)."""
        out = {oid: sum(_ready(w, now) for w in idle) for oid, idle in self._warm.items()}
        return {oid: n for oid, n in out.items() if n}

    def data(self, now: datetime | None = None) -> dict[str, dict[str, int]]:
        """By pooled offering, the datasets its warm instances (ready by ``now``) hold and on
        how many."""
        out: dict[str, dict[str, int]] = {}
        for oid, idle in self._warm.items():
            held = Counter(w.data for w in idle if w.data is not None and _ready(w, now))
            if held:
                out[oid] = dict(held)
        return out

    def serves(self, offering_id: str, team: str | None) -> bool:
        """Whether the offering is pooled for jobs of ``team`` (``None``: any team)."""
        settings = self.settings.get(offering_id)
        return settings is not None and (team is None or settings.serves(team))

    def maximum(self, offering_id: str) -> int | None:
        """The most instances the offering's pool may hold at once, busy and warm (``None``:
        not pooled, or no ``max``)."""
        settings = self.settings.get(offering_id)
        return None if settings is None else settings.maximum

    def take_released(self) -> list[str]:
        """The ids of the instances given back since the last call (each handed out once)."""
        taken, self._released = self._released, []
        return taken

    def instance_ids(self) -> dict[str, str]:
        """Every warm instance's id → its offering's id."""
        return {w.instance_id: oid for oid, idle in self._warm.items() for w in idle}

    def lost(self, instance_ids: set[str], now: datetime) -> None:
        """These warm instances are gone (the market or someone else ended them): billed up
        to ``now``, never taken again."""
        for idle in self._warm.values():
            for w in [w for w in idle if w.instance_id in instance_ids]:
                self._end_idle(w, now)
        self.save()

    def held(self, offering_id: str) -> int:
        """Instances of ``offering_id`` idling warm now (booting ones too: they hold its
        capacity)."""
        return len(self._warm.get(offering_id, ()))

    def take_billed(self) -> list[IdleTime]:
        """The idle stretches that ended since the last call (each handed out once)."""
        taken, self._idle = self._idle, []
        self.save()
        return taken

    def take(
        self,
        offering_id: str,
        instances: int,
        now: datetime,
        data: str | None = None,
        team: str | None = None,
    ) -> tuple[str, ...] | None:
        """Take ``instances`` warm instances of the offering for a launch of a job of ``team``
        — those holding the job's dataset ``data`` first, then the most recently idle: their
        ids, or ``None`` when its pool has not that many (or is not the team's)."""
        if not self.serves(offering_id, team):
            return None
        idle = self._warm.get(offering_id, [])
        ready = [w for w in idle if w.since <= now]
        if len(ready) < instances:
            return None
        ready.sort(key=lambda w: (data is not None and w.data == data, w.since))
        taken = ready[-instances:]
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
        self,
        offering: Offering,
        job_id: str,
        attempt: int,
        ids: tuple[str, ...],
        at: datetime,
        data: str | None = None,
        team: str | None = None,
    ) -> None:
        """An attempt of a job of ``team`` ended at ``at``: its instances ``ids`` go warm,
        holding its job's dataset ``data``, if its offering is pooled for that team (the caller
        checks the market did not take them)."""
        if not self.serves(offering.id, team):
            return
        self._warm.setdefault(offering.id, []).extend(
            _Warm(at, offering, job_id, attempt, iid, at, data) for iid in ids
        )
        self.save()

    def release(self, busy: Callable[[str], int], now: datetime) -> dict[str, int]:
        """Give back what each pool's sizing releases (``busy``: an offering's instances
        running attempts now); the instances each pool's floor lacks, by offering id, for the
        backend to boot (and hand to :meth:`booted`)."""
        boots: dict[str, int] = {}
        for oid, settings in self.settings.items():
            idle = self._warm.get(oid, [])
            if not idle and not settings.floor(now):
                continue
            state = PoolState(busy(oid), tuple(w.since for w in idle))
            plan = size_pool(settings, state, Demand(), now)
            for since in plan.release:
                self._give_back(next(w for w in idle if w.since == since), now)
            handed = hand_over(idle, settings, oid, now)
            if handed:
                self._idle += handed
                self.save()
            if plan.boot:
                boots[oid] = plan.boot
        return boots

    def booted(
        self, offering: Offering, ids: tuple[str, ...], now: datetime, ready: datetime
    ) -> None:
        """Instances ``ids`` of a pooled offering booted ``now`` with no job, warm from
        ``ready``: idle from now, their pool's team paying."""
        team = self.settings[offering.id].team
        if ids:
            self._warm.setdefault(offering.id, []).extend(
                _Warm(ready, offering, None, 0, iid, now, None, team) for iid in ids
            )
            self.save()

    def revoked(self, gone: Callable[[Offering], bool], now: datetime) -> None:
        """Give back the warm instances of every offering ``gone`` says the market took."""
        for idle in self._warm.values():
            if idle and gone(idle[0].offering):
                for w in list(idle):
                    self._give_back(w, now)

    def _give_back(self, w: _Warm, at: datetime) -> None:
        self._end_idle(w, at)
        self._released.append(w.instance_id)
        self.save()

    def _end_idle(self, w: _Warm, at: datetime) -> None:
        """``w`` stops idling at ``at`` (see :func:`stop_idling`)."""
        stretch = stop_idling(self._warm[w.offering.id], w, w.offering.id, at)
        if stretch is not None:
            self._idle.append(stretch)

    # -- on disk ----------------------------------------------------------------------------
    def save(self) -> None:
        """Keep the warm instances and the stretches not yet handed out in the document."""
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
                    "data": w.data,
                    "team": w.team,
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
                    "team": i.team,
                    "instance_ids": list(i.instance_ids),
                }
                for i in self._idle
            ],
        }
        self.doc.write(json.dumps(doc))

    def restore(self, offerings: Mapping[str, Offering], now: datetime) -> None:
        """Take back what a previous backend left in the document: its warm instances stay
        warm (their idle time goes on being billed from where it was), and an instance of an
        offering that is no longer pooled is given back ``now`` (billed until then)."""
        if not self.settings:
            return
        try:
            text = self.doc.read()
            if text is None:
                return
            doc = json.loads(text)
            idle = [
                IdleTime(
                    str(i["offering_id"]),
                    datetime.fromisoformat(i["start"]),
                    datetime.fromisoformat(i["end"]),
                    _optional_str(i["job_id"]),
                    int(i["attempt"]),
                    int(i["instances"]),
                    _optional_str(i.get("team")),
                    tuple(_strings(i.get("instance_ids", []))),
                )
                for i in doc["idle"]
            ]
            warm = [
                (
                    str(w["offering_id"]),
                    datetime.fromisoformat(w["since"]),
                    _optional_str(w["job_id"]),
                    int(w["attempt"]),
                    str(w["instance_id"]),
                    datetime.fromisoformat(w["billed_from"]),
                    _optional_str(w.get("data")),
                    _optional_str(w.get("team")),
                )
                for w in doc["warm"]
            ]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PoolStateError(f"{self.doc.where}: cannot read the pools' state: {exc}") from exc
        self._idle = idle
        gone: dict[tuple[str, datetime, str | None, int, str | None], list[str]] = {}
        for oid, since, job_id, attempt, iid, billed, data, team in warm:
            offering = offerings.get(oid)
            if offering is None or oid not in self.settings:
                # no longer pooled: given back now
                gone.setdefault((oid, billed, job_id, attempt, team), []).append(iid)
                self._released.append(iid)
                continue
            self._warm.setdefault(oid, []).append(
                _Warm(since, offering, job_id, attempt, iid, billed, data, team)
            )
        for (oid, billed, job_id, attempt, team), ids in gone.items():
            if now > billed:  # their idle time billed up to now, together
                stretch = IdleTime(oid, billed, now, job_id, attempt, len(ids), team, tuple(ids))
                self._idle.append(stretch)
        self.save()


def _ready(w: _Warm, now: datetime | None) -> bool:
    """Whether ``w`` is warm by ``now`` (``None``: whatever its start-up)."""
    return now is None or w.since <= now


def _strings(value: object) -> list[str]:
    """A kept list of strings."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise TypeError(f"expected a list of strings, got {value!r}")


def _optional_str(value: object) -> str | None:
    """A kept optional string (a file from before a field existed has none)."""
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"expected a string or null, got {value!r}")
