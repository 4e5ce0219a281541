"""Step 2 — nominate: every job's cost/time Pareto front of feasible placements.

A placement is (offering × workers), packed onto whole instances. Jobs that ask for the same
resources share one set of placements (a *shape*), pruned once per cycle to those not dominated
for *any* job of the shape; each job is then evaluated against the survivors in one vectorised
pass and keeps the cheapest ``Policy.max_front`` points of its front that meet its deadline and
its own cost cap. The full variant and, when the job offers one, the incremental variant get a
front each.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from budgeteer.core.fronts import (
    Front,
    FrontCache,
    Priced,
    empty_front,
    placements,
    priced_fronts,
)
from budgeteer.core.infeasible import infeasible_message, no_offering_message
from budgeteer.core.outcomes import Variant
from budgeteer.core.policy import Policy
from budgeteer.core.pools import closed_to, warm_data
from budgeteer.core.reserve import downstream_hours, successors
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.job import DeadlineMiss, Job

__all__ = ["Candidates", "Front", "FrontCache", "nominate"]


@dataclass(frozen=True, slots=True)
class Candidates:
    """Everything the later steps need to know about placing one job."""

    job: Job
    full: Front
    incremental: Front | None
    infeasible: str | None = None
    details: tuple[tuple[str, str], ...] = ()
    late: str | None = None  # planned late: why, and the finish it is planned for
    due: datetime | None = None  # the fresh deadline a late job is planned for
    expired: bool = False  # the deadline passed and the job asked to be cancelled then
    reserve_hours: float = 0.0  # planned to finish this long before its deadline (dependents)
    reserve_why: str | None = None  # the reserve priced: why it was waived or lengthened

    @property
    def cheapest_usd(self) -> float:
        """Cost of the cheapest feasible plan, either variant (``inf`` if none)."""
        best = float(self.full.cost_usd[0]) if self.full.size else math.inf
        if self.incremental is not None and self.incremental.size:
            best = min(best, float(self.incremental.cost_usd[0]))
        return best


def _shape_key(
    job: Job, held: Mapping[str, tuple[tuple[str, int], ...]], closed: tuple[str, ...] = ()
) -> tuple[object, ...]:
    """What a job's placements depend on; ``held``: the warm pools its team may use holding
    each dataset (:func:`~budgeteer.core.pools.warm_data`) — a job whose data a warm instance
    holds is priced there without its egress, so its placements there are kept apart;
    ``closed``: the pooled offerings with warm instances its team may not take
    (:func:`~budgeteer.core.pools.closed_to`: priced with their boot); last, the spot
    offerings the job is planned without."""
    r = job.resources
    uri = job.data.uri if job.data else None
    return (
        r.accelerators,
        r.min_gpu_memory_gib,
        r.gpus_per_worker,
        r.min_workers,
        r.max_workers,
        job.spot.allowed,
        job.data.location if job.data else None,
        bool(job.work.steps_per_hour_on),
        held.get(uri, ()) if uri is not None else (),
        closed,
        job.spot.avoid,
    )


def nominate(
    snapshot: Snapshot, jobs: Sequence[Job], policy: Policy, cache: FrontCache | None = None
) -> dict[str, Candidates]:
    """Candidates for every job in ``jobs`` (by job id), fronts cheapest first; ``cache``
    carries the memos of earlier calls over the same world (see :class:`FrontCache`).

    A job that can no longer meet its deadline is not held for ever. With ``on_deadline_miss:
    run`` (and ``Policy.run_late_jobs``) it is planned *late*, against a fresh deadline: a job
    whose deadline has passed gets its original window again from now (deadline − submission,
    at least an hour); a job no plan can finish in time gets the fastest plan's time plus
    ``Policy.late_slack_fraction``. Its candidates say so (``late``); the metrics still count
    the original deadline as missed. With ``on_deadline_miss: cancel`` a passed deadline marks
    the job ``expired`` (the loop cancels it).

    A job others wait on is planned to finish its *reserve* before its deadline (with
    ``Policy.pipeline_reserve``; :mod:`budgeteer.core.reserve`), so that a pipeline's later steps
    keep their time: earlier than that when the jobs waiting on it need more time for their
    cheapest plans and giving it to them costs the job less than it saves them; to its own
    deadline when no plan can finish by then, or when the reserve would cost the job more than
    it saves them (priced both ways). ``reserve_hours`` says how long before its deadline;
    ``reserve_why`` why, when pricing moved it.
    """
    now = snapshot.now
    run_late = policy.run_late_jobs
    due: dict[str, datetime] = {}  # the deadline each late job is planned for
    late: dict[str, str] = {}
    for job in jobs:
        if (
            run_late
            and job.deadline is not None
            and job.deadline <= now
            and job.on_deadline_miss is DeadlineMiss.RUN
        ):
            due[job.id] = now + max(job.deadline - job.submitted_at, _MIN_LATE_WINDOW)
            late[job.id] = (
                f"late: the deadline {job.deadline:%Y-%m-%d %H:%M} UTC has passed; planned to "
                f"finish by {due[job.id]:%Y-%m-%d %H:%M} UTC"
            )
    reserve = downstream_hours(snapshot.jobs) if policy.pipeline_reserve else {}
    reserved: dict[str, float] = {}
    for job in jobs:
        hours = reserve.get(job.id, 0.0)
        if job.id in due or job.deadline is None or hours <= 0.0:
            continue
        point = job.deadline - timedelta(hours=hours)
        if point > now:
            due[job.id] = point
            reserved[job.id] = hours
    cache = cache if cache is not None else FrontCache()
    out, fastest = _nominate(snapshot, jobs, policy, due, late, cache)
    # no plan finishes before the dependents' time begins: planned to its own deadline
    short = [j for j in jobs if j.id in reserved and out[j.id].infeasible is not None]
    for job in short:
        del due[job.id], reserved[job.id]
    if short:
        more, quickest = _nominate(snapshot, short, policy, due, late, cache)
        out.update(more)
        fastest.update(quickest)

    def price(some: Sequence[Job], dues: Mapping[str, datetime]) -> _Priced:
        return _nominate(snapshot, some, policy, dues, late, cache)

    # the reserve priced: longer when the dependents' cheapest plans need more time and it
    # pays, then waived when what it saves them is less than it costs the job
    pricing = _Pricing(now, successors(snapshot.jobs) if reserved else {}, reserve, price)
    for job_id, (hours, plan, quick, why) in _longer_pays(pricing, jobs, reserved, out).items():
        deadline = plan.job.deadline
        assert deadline is not None
        due[job_id], reserved[job_id] = deadline - timedelta(hours=hours), hours
        out[job_id], fastest[job_id] = replace(plan, reserve_why=why), quick
    for job_id, (plain, quick, why) in _not_worth_it(pricing, jobs, reserved, out).items():
        del due[job_id], reserved[job_id]
        out[job_id], fastest[job_id] = replace(plain, reserve_why=why), quick
    for job_id, hours in reserved.items():
        out[job_id] = replace(out[job_id], reserve_hours=hours)
    again: list[Job] = []
    for job in jobs if run_late else ():
        c = out[job.id]
        deadline = due.get(job.id, job.deadline)
        if c.infeasible is None or deadline is None or job.on_deadline_miss is DeadlineMiss.CANCEL:
            continue
        hours = fastest.get(job.id, math.inf)
        if math.isfinite(hours) and now + timedelta(hours=hours) > deadline:
            due[job.id] = now + timedelta(hours=hours * (1.0 + policy.late_slack_fraction))
            late[job.id] = (
                f"late: no plan meets the deadline {job.deadline:%Y-%m-%d %H:%M} UTC (the "
                f"fastest finishes in {hours:.1f} h); planned to finish by "
                f"{due[job.id]:%Y-%m-%d %H:%M} UTC"
            )
            again.append(job)
    if again:
        out.update(_nominate(snapshot, again, policy, due, late, cache)[0])
    return out


#: The shortest fresh window a late job is planned for.
_MIN_LATE_WINDOW = timedelta(hours=1)
#: Plans this close in cost (dollars) are the same plan.
_SAME_USD = 1e-6


def _cheapest(c: Candidates) -> tuple[float, float]:
    """Cost and finish (hours from now) of the cheapest plan, either variant (``inf`` if none)."""
    best = (math.inf, math.inf)
    for front in (c.full, c.incremental):
        if front is not None and front.size and float(front.cost_usd[0]) < best[0]:
            best = (float(front.cost_usd[0]), float(front.finish_hours[0]))
    return best


#: candidates per job and each job's fastest finish (what :func:`_nominate` returns)
_Priced = tuple[dict[str, Candidates], dict[str, float]]
#: candidates for some jobs planned to the given deadlines (the others to their own)
_Price = Callable[[Sequence[Job], Mapping[str, datetime]], _Priced]


@dataclass(frozen=True, slots=True)
class _Pricing:
    """What pricing a reserve reads: the time, the jobs waiting on each job (on its success),
    the dependency graph's reserves, and ``price`` — candidates for some jobs planned to the
    given deadlines (the others to their own)."""

    now: datetime
    after: Mapping[str, list[Job]]
    reserve: Mapping[str, float]
    price: _Price
    # what :meth:`within` found, by job and hours (lengthening and waiving a reserve ask
    # for some dependents' prices again)
    known: dict[tuple[str, float], float] = field(default_factory=dict, compare=False, repr=False)

    def within(self, job: Job, hours: float) -> float:
        """The cost of ``job``'s cheapest plan that finishes within ``hours`` (``inf`` when
        none does, or ``hours`` is not positive)."""
        if hours <= 0.0:
            return math.inf
        usd = self.known.get((job.id, hours))
        if usd is None:
            due = {job.id: self.now + timedelta(hours=hours)}
            usd = self.known[(job.id, hours)] = self.price([job], due)[0][job.id].cheapest_usd
        return usd


def _not_worth_it(
    pricing: _Pricing,
    jobs: Sequence[Job],
    reserved: Mapping[str, float],
    out: Mapping[str, Candidates],
) -> dict[str, tuple[Candidates, float, str]]:
    """The reserved jobs whose reserve costs them more than it saves the jobs waiting on them,
    each with its candidates and fastest finish without the reserve, and why.

    Keeping the reserve, a job may need a dearer plan than the cheapest that meets its own
    deadline (a fast GPU, or on-demand for spot). Without it, its direct dependents start
    later: each is priced for the time left to it after the job's cheapest plan (less its own
    dependents' reserve) and for the time the reserve keeps for it; the differences, summed,
    are what the reserve saves them (``inf`` when one of them could not finish at all). The
    reserve is dropped when it costs the job more than that."""
    held = [j for j in jobs if j.id in reserved and j.deadline is not None]
    if not held:
        return {}
    now, reserve = pricing.now, pricing.reserve
    plain, quickest = pricing.price(held, {})
    dropped: dict[str, tuple[Candidates, float, str]] = {}
    for job in held:
        assert job.deadline is not None
        cost, finish = _cheapest(plain[job.id])
        extra = out[job.id].cheapest_usd - cost
        if not math.isfinite(cost) or extra <= _SAME_USD:
            continue  # the cheapest plan meets the reserve too (or nothing does)
        left = (job.deadline - now).total_seconds() / 3600.0 - finish
        saved = 0.0
        for d in pricing.after.get(job.id, ()):
            later = reserve.get(d.id, 0.0)
            kept = reserved[job.id] - later  # what the reserve keeps for d
            squeezed = left - later  # what d would have after the cheapest plan
            if squeezed <= 0.0:
                saved = math.inf
                break
            tight = pricing.within(d, squeezed)
            loose = pricing.within(d, max(kept, squeezed))
            if math.isfinite(tight):
                saved += tight - loose
            elif math.isfinite(loose):
                saved = math.inf  # d can finish with the reserve only
                break
        if extra > saved:
            why = (
                f"planned to its deadline: finishing {reserved[job.id]:.1f} h before it for the "
                f"jobs waiting on it would cost ${extra:,.2f} more and save them ${saved:,.2f}"
            )
            dropped[job.id] = (plain[job.id], quickest[job.id], why)
    return dropped


def _longer_pays(
    pricing: _Pricing,
    jobs: Sequence[Job],
    reserved: Mapping[str, float],
    out: Mapping[str, Candidates],
) -> dict[str, tuple[float, Candidates, float, str]]:
    """The reserved jobs that should finish earlier than their reserve, because the jobs
    waiting on them need more time for their cheapest plans than it keeps and giving it costs
    less than it saves them; each with the longer reserve, its candidates and fastest finish
    then, and why.

    The reserve counts each dependent at reference speed on its minimum workers; its cheapest
    plans may be slower (a cheaper GPU, fewer of them), and squeezed into the reserve it pays
    for a fast one. So each direct dependent's cheapest plans with all the time up to the
    job's deadline (less the dependent's own reserve) are read, and each that is cheaper than
    what the reserve leaves it proposes a reserve long enough for it (its finish plus the
    dependent's own reserve). Each proposal is priced whole: the job's cheapest plan finishing
    that long before its deadline, plus each direct dependent's cheapest plan within the time
    the proposal keeps for it. The cheapest total wins when it is below keeping the reserve
    (the shorter of equals)."""
    now, reserve, price = pricing.now, pricing.reserve, pricing.price
    found: dict[str, tuple[float, Candidates, float, str]] = {}
    for job in jobs:
        deps = pricing.after.get(job.id, ())
        if job.id not in reserved or job.deadline is None or not deps:
            continue
        deadline, kept = job.deadline, reserved[job.id]
        left = (deadline - now).total_seconds() / 3600.0

        def dependents_usd(hours: float, deps: Sequence[Job] = deps) -> float:
            """The direct dependents' cheapest plans, the job finishing ``hours`` early."""
            return sum(pricing.within(d, hours - reserve.get(d.id, 0.0)) for d in deps)

        # each dependent's cheapest plan in what the reserve keeps for it (priced once)
        now_usd = [pricing.within(d, kept - reserve.get(d.id, 0.0)) for d in deps]
        lengths: set[float] = set()
        for d, squeezed in zip(deps, now_usd, strict=True):
            later = reserve.get(d.id, 0.0)
            roomy = price([d], {d.id: now + timedelta(hours=left - later)})[0][d.id]
            for front in (roomy.full, roomy.incremental):
                if front is None:
                    continue
                for usd, hours in zip(front.cost_usd, front.finish_hours, strict=True):
                    if float(usd) < squeezed - _SAME_USD and float(hours) + later > kept:
                        lengths.add(float(hours) + later)
        if not lengths:
            continue
        own, theirs = out[job.id].cheapest_usd, sum(now_usd)
        best: tuple[float, float, Candidates, float, float] | None = None
        for hours in sorted(lengths):
            if hours >= left:
                break
            plans, quickest = price([job], {job.id: deadline - timedelta(hours=hours)})
            usd = plans[job.id].cheapest_usd
            bound = (best[0] if best else own + theirs) - _SAME_USD
            if not usd < bound:
                continue  # the dependents' plans (never negative) could only add to it
            total = usd + dependents_usd(hours)
            if math.isfinite(total) and total < bound:
                best = (total, hours, plans[job.id], quickest[job.id], usd)
        if best is not None:
            total, hours, plan, quick, usd = best
            if math.isfinite(theirs):
                gain = f"saves them ${theirs - (total - usd):,.2f}"
            else:
                gain = f"lets them finish at all (not in {kept:.1f} h)"
            why = (
                f"not {kept:.1f} h: their cheapest plans need that long, which {gain} for "
                f"${usd - own:,.2f} more"
            )
            found[job.id] = (hours, plan, quick, why)
    return found


def _nominate(
    snapshot: Snapshot,
    jobs: Sequence[Job],
    policy: Policy,
    due: Mapping[str, datetime],
    late: Mapping[str, str],
    cache: FrontCache,
) -> tuple[dict[str, Candidates], dict[str, float]]:
    """Candidates per job and each job's fastest finish in hours (``inf`` when unknown);
    ``due`` overrides the deadlines of the jobs planned ``late``."""
    throughput = dict(snapshot.throughput)
    shapes: dict[tuple[object, ...], list[Job]] = defaultdict(list)
    views = snapshot.pools
    by_team: dict[str, tuple[dict[str, tuple[tuple[str, int], ...]], tuple[str, ...]]] = {}
    for job in jobs:
        if job.team not in by_team:  # what its team may use of the pools
            by_team[job.team] = (warm_data(views, job.team), closed_to(views, job.team))
        shapes[_shape_key(job, *by_team[job.team])].append(job)
    out: dict[str, Candidates] = {}
    fastest_of: dict[str, float] = {}
    for key, shaped in shapes.items():
        configs = placements(snapshot, key, shaped[0], policy, cache)
        passed = [
            j
            for j in shaped
            if j.id not in due and j.deadline is not None and j.deadline <= snapshot.now
        ]
        for job in passed:  # no plan can help any more: say so without pricing every placement
            assert job.deadline is not None
            expired = job.on_deadline_miss is DeadlineMiss.CANCEL
            out[job.id] = Candidates(
                job,
                empty_front(configs, Variant.FULL),
                None,
                f"deadline {job.deadline:%Y-%m-%d %H:%M} UTC has passed",
                (("deadline", job.deadline.isoformat()),),
                expired=expired,
            )
        members = [j for j in shaped if j.id not in out]
        if not members:
            continue
        if len(configs) == 0:
            for job in members:
                out[job.id] = Candidates(
                    job, empty_front(configs, Variant.FULL), None, no_offering_message(job)
                )
            continue
        full = priced_fronts(
            snapshot, members, key, configs, throughput, policy, Variant.FULL, due, cache
        )
        incr_jobs = [j for j in members if j.incremental_reference_hours is not None]
        incr: dict[str, Priced] = {}
        if incr_jobs:
            priced = priced_fronts(
                snapshot,
                incr_jobs,
                key,
                configs,
                throughput,
                policy,
                Variant.INCREMENTAL,
                due,
                cache,
            )
            incr = {j.id: p for j, p in zip(incr_jobs, priced, strict=True)}
        for job, p in zip(members, full, strict=True):
            ip = incr.get(job.id)
            inc = ip.front if ip is not None else None
            fastest_of[job.id] = min(p.fastest, ip.fastest if ip is not None else math.inf)
            message: str | None = None
            details: tuple[tuple[str, str], ...] = ()
            if p.front.size == 0 and (inc is None or inc.size == 0):
                message, details = infeasible_message(
                    snapshot,
                    job,
                    due.get(job.id, job.deadline),
                    configs,
                    p.fastest,
                    p.fastest_col,
                    p.cheapest,
                )
            out[job.id] = Candidates(
                job,
                p.front,
                inc,
                message,
                details,
                late.get(job.id),
                due.get(job.id) if job.id in late else None,
            )
    return out, fastest_of
