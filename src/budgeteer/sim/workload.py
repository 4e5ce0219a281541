"""The workload generators: a scenario's arrivals, drawn from its seed.

- ``scheduled`` — retrains on a cron schedule per model (full, or incremental when given);
- ``drift`` — drift-triggered retrains as a Poisson process per model; the severity drawn sets
  the tier and the SLA (critical → P0 4 h, major → P1 12 h, minor → P2 48 h by default);
- ``experiments`` — ad-hoc P3 work, Poisson, size uniform in a range;
- ``pipelines`` — ``features → train → validate → package`` on a cron schedule; the validation
  gate fails with a given probability (its run's spend is then waste and ``package`` never runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from budgeteer.catalog import Catalog
from budgeteer.domain.cron import cron_times
from budgeteer.domain.job import Dependency, DependencyCondition, Job, Resources, SpotSettings, Work
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecError
from budgeteer.sim.run import Arrival
from budgeteer.sim.schema import JobShape, Scenario
from budgeteer.spec.job import parse_duration

SEVERITY = {"critical": (Tier.P0, "4h"), "major": (Tier.P1, "12h"), "minor": (Tier.P2, "48h")}


@dataclass(frozen=True, slots=True)
class Drawn:
    """A scenario's arrivals, the validation gates drawn to fail, and each gate's run."""

    arrivals: tuple[Arrival, ...]
    gate_failures: frozenset[str]
    pipeline_runs: dict[str, tuple[str, ...]]


def draw_workload(scenario: Scenario, catalog: Catalog, rng: np.random.Generator) -> Drawn:
    """Every generator's arrivals over the scenario's horizon (see the module docstring)."""
    maker = _Maker(scenario, catalog)
    failures: set[str] = set()
    runs: dict[str, tuple[str, ...]] = {}
    end = scenario.start + timedelta(days=scenario.days)
    for s in scenario.workload.scheduled:
        for at in cron_times(s.cron, scenario.start, end):
            maker.add(at, f"{s.model}-scheduled", s.team, Tier.parse(s.priority), s.sla, s)
    for d in scenario.workload.drift:
        sev = d.severity
        weights = np.array([sev.critical, sev.major, sev.minor])
        lo_at = scenario.start + timedelta(days=d.from_day)
        hi_at = min(end, scenario.start + timedelta(days=d.to_day)) if d.to_day else end
        for at in _poisson(rng, d.per_day, lo_at, hi_at):
            kind = ("critical", "major", "minor")[int(rng.choice(3, p=weights / weights.sum()))]
            tier, sla = SEVERITY[kind]
            maker.add(at, f"{d.model}-drift-{kind}", d.team, tier, sla, d)
    for e in scenario.workload.experiments:
        lo, hi = sorted((e.min_reference_hours, e.max_reference_hours))
        for at in _poisson(rng, e.per_day, scenario.start, end):
            shape = JobShape(
                reference_hours=float(rng.uniform(lo, hi)), accelerators=e.accelerators
            )
            maker.add(at, f"{e.team}-experiment", e.team, Tier.P3, e.sla, shape)
    for p in scenario.workload.pipelines:
        for at in cron_times(p.cron, scenario.start, end):
            ids: list[str] = []
            for step in ("features", "train", "validate", "package"):
                if step not in p.steps:
                    continue
                shape = JobShape(reference_hours=p.steps[step], accelerators=p.accelerators)
                ids.append(
                    maker.add(
                        at,
                        f"{p.name}-{step}",
                        p.team,
                        Tier.parse(p.priority),
                        p.sla,
                        shape,
                        after=ids[-1:],
                    )
                )
                if step == "validate":
                    runs[ids[-1]] = tuple(ids)
                    if rng.random() < p.gate_failure_probability:
                        failures.add(ids[-1])
    return Drawn(tuple(maker.arrivals), frozenset(failures), runs)


def _poisson(
    rng: np.random.Generator, per_day: float, start: datetime, end: datetime
) -> list[datetime]:
    out: list[datetime] = []
    t = 0.0
    horizon = (end - start).total_seconds() / 86400
    while True:
        t += float(rng.exponential(1.0 / per_day))
        if t >= horizon:
            return out
        out.append(start + timedelta(days=t))


class _Maker:
    """Numbered jobs with deadlines from their SLA."""

    def __init__(self, scenario: Scenario, catalog: Catalog) -> None:
        self.scenario = scenario
        self.known = list(catalog.throughput)
        self.arrivals: list[Arrival] = []

    def add(
        self,
        at: datetime,
        stem: str,
        team: str,
        tier: Tier,
        sla: str,
        shape: JobShape,
        after: list[str] | None = None,
    ) -> str:
        seq = len(self.arrivals)
        job_id = f"{stem}-{seq:05d}"
        unknown = [a for a in shape.accelerators if not any(in_family(k, a) for k in self.known)]
        if unknown:
            raise SpecError("workload", f"unknown accelerator {unknown[0]!r} in {stem}")
        job = Job(
            id=job_id,
            name=stem,
            team=team,
            tier=tier,
            resources=Resources(tuple(shape.accelerators), 0.0, 1, 1, shape.workers),
            work=Work(reference_hours=shape.reference_hours),
            submitted_at=at,
            seq=seq,
            deadline=at + parse_duration(sla),
            depends_on=tuple(Dependency(d, DependencyCondition.SUCCESS) for d in after or ()),
            spot=SpotSettings(allowed=shape.spot),
            incremental_reference_hours=shape.incremental_reference_hours,
        )
        self.arrivals.append(Arrival(at, job))
        return job_id


def in_family(accelerator: str, family: str) -> bool:
    """``A100`` names ``A100`` and ``A100-80GB``, not ``A1000``; ``L4`` is not ``L40S``."""
    return accelerator == family or accelerator.startswith(f"{family}-")
