"""What the pools did, read back from the store (pure): per pooled offering, its size over time
(instances busy with a job, instances idling warm), the start-ups it saved, and its idle time and
cost — the dashboard's "Pools" section.

Everything comes from what is kept, so a restarted service shows the same: an attempt holds its
instances from its launch to its end (the boot included); an idle stretch is a ledger entry of
the attempt that left the instance warm (:data:`~budgeteer.ledger.billing.IDLE_SOURCE`) or a
charge to the pool's team for one it booted with no job; an
attempt started on a warm instance carries that instance's id (the sandbox keeps ids through
reuse), so a **warm start** is an attempt with an instance id an earlier attempt already had, or
one its pool booted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from budgeteer.ledger.billing import is_idle
from budgeteer.store.base import Attempt, LedgerEntry
from budgeteer.store.records import PoolCharge


@dataclass(frozen=True, slots=True)
class PoolHistory:
    """One pooled offering's record over a window.

    ``steps`` are ``(at, busy, idle)``: from ``at`` until the next step, that many instances ran
    a job and that many idled warm (the first step is the window's start). ``launches`` counts
    attempts started in the window, ``warm_starts`` those of them that booted nothing."""

    offering_id: str
    steps: tuple[tuple[datetime, int, int], ...]
    launches: int
    warm_starts: int
    idle_hours: Decimal
    idle_usd: Decimal


def pool_history(
    offering_ids: Iterable[str],
    attempts: Iterable[Attempt],
    ledger: Iterable[LedgerEntry],
    since: datetime,
    until: datetime,
    charges: Iterable[PoolCharge] = (),
) -> dict[str, PoolHistory]:
    """Each of ``offering_ids``' history over ``[since, until]`` (see :class:`PoolHistory`);
    an attempt still running holds its instances to the end. ``charges``: what the pools
    booted with no job (idle, their teams')."""
    wanted = set(offering_ids)
    by_id: dict[int, Attempt] = {}
    runs: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        by_id[a.id] = a
        if a.offering_id in wanted:
            runs[a.offering_id].append(a)
    # (at, Δbusy, Δidle) per offering
    changes: dict[str, list[tuple[datetime, int, int]]] = defaultdict(list)
    idle_seconds: dict[str, Decimal] = defaultdict(Decimal)
    idle_usd: dict[str, Decimal] = defaultdict(Decimal)
    idle: list[tuple[str, LedgerEntry | PoolCharge]] = []
    for e in ledger:
        owner = by_id.get(e.attempt_id)
        if is_idle(e) and owner is not None and owner.offering_id in wanted:
            idle.append((owner.offering_id, e))
    idle += [(c.offering_id, c) for c in charges if c.offering_id in wanted]
    for oid, x in idle:
        changes[oid] += [(x.start, 0, x.instances), (x.end, 0, -x.instances)]
        start, end = max(x.start, since), min(x.end, until)
        if start < end:  # the window's share (an entry straddling it counted pro rata)
            span = Decimal(str((x.end - x.start).total_seconds()))
            part = Decimal(str((end - start).total_seconds()))
            idle_seconds[oid] += part * x.instances
            idle_usd[oid] += x.amount_usd * part / span
    booted = {iid for _, x in idle if isinstance(x, PoolCharge) for iid in x.instance_ids}
    out: dict[str, PoolHistory] = {}
    for oid in sorted(wanted):
        seen = set(booted)  # an instance a pool booted is warm for the first job too
        launches = warm = 0
        for a in sorted(runs[oid], key=lambda a: (a.started_at, a.id)):
            changes[oid].append((a.started_at, a.instances, 0))
            if a.ended_at is not None:  # one still running holds its instances to the end
                changes[oid].append((a.ended_at, -a.instances, 0))
            if since <= a.started_at < until:
                launches += 1
                warm += bool(seen.intersection(a.instance_ids))
            seen.update(a.instance_ids)
        out[oid] = PoolHistory(
            oid,
            _steps(changes[oid], since, until),
            launches,
            warm,
            (idle_seconds[oid] / 3600).quantize(Decimal("0.0001")),
            idle_usd[oid].quantize(Decimal("0.01")),
        )
    return out


def _steps(
    changes: list[tuple[datetime, int, int]], since: datetime, until: datetime
) -> tuple[tuple[datetime, int, int], ...]:
    """The counts after all changes at each time (up to ``until``), one step per change of
    value; changes before ``since`` make the window's first step."""
    net: dict[datetime, tuple[int, int]] = {}
    for at, db, di in changes:
        when = max(at, since)
        b, i = net.get(when, (0, 0))
        net[when] = (b + db, i + di)
    busy = idle = 0
    steps: list[tuple[datetime, int, int]] = [(since, 0, 0)]
    for when in sorted(net):
        if when > until:
            break
        busy, idle = busy + net[when][0], idle + net[when][1]
        if steps[-1][1:] == (busy, idle):
            continue
        if steps[-1][0] == when:
            steps[-1] = (when, busy, idle)
        else:
            steps.append((when, busy, idle))
    return tuple(steps)
