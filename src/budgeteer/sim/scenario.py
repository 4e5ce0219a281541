"""Scenarios: a quarter (or any horizon) of retraining requests, as a validated YAML file.

See ``docs/simulate.md`` for every field. :func:`load_scenario` validates (unknown fields
rejected, every error naming its field and the file); :func:`build` turns a scenario into what
:func:`budgeteer.sim.run.simulate` takes: the catalog subset, the market (a real trace repeated
over the horizon, with droughts cut into it), budgets, the policy base (team weights), GPU
quotas, and the arrivals drawn by the workload generators from the seed:

- ``scheduled`` — retrains on a cron schedule per model (full, or incremental when given);
- ``drift`` — drift-triggered retrains as a Poisson process per model; the severity drawn sets
  the tier and the SLA (critical → P0 4 h, major → P1 12 h, minor → P2 48 h by default);
- ``experiments`` — ad-hoc P3 work, Poisson, size uniform in a range;
- ``pipelines`` — ``features → train → validate → package`` on a cron schedule; the validation
  gate fails with a given probability (its run's spend is then waste and ``package`` never runs).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from budgeteer.backends.market import (
    CalendarMarket,
    Closed,
    SandboxMarket,
    TraceMarket,
    ZonedMarket,
)
from budgeteer.catalog import Catalog, load_catalog
from budgeteer.core import Policy
from budgeteer.domain.budget import Budget
from budgeteer.domain.job import Dependency, DependencyCondition, Job, Resources, SpotSettings, Work
from budgeteer.domain.offering import Market, Offering, Price
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecError
from budgeteer.sim.cron import CronError, cron_times, parse_cron
from budgeteer.sim.policies import policy_named
from budgeteer.sim.run import Arrival, SimRun, simulate
from budgeteer.spec.budget import BudgetSpec, budget_from_spec
from budgeteer.spec.errors import spec_errors
from budgeteer.spec.files import read_document
from budgeteer.spec.job import parse_duration, resolve_accelerator
from budgeteer.traces import load_price_series, load_trace

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1)]
Priority = Literal["P0", "P1", "P2", "P3"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _duration(value: str) -> str:
    parse_duration(value)
    return value


def _cron(value: str) -> str:
    try:
        parse_cron(value)
    except CronError as exc:
        raise ValueError(str(exc)) from None
    return value


class CatalogFilter(_Strict):
    """Which offerings of the bundled catalog take part (all when a list is absent)."""

    providers: list[str] | None = None
    regions: list[str] | None = None
    accelerators: list[str] | None = None


class Drought(_Strict):
    """Spot capacity gone everywhere for ``days`` from ``start_day`` (0 = the first day)."""

    start_day: Annotated[float, Field(ge=0)]
    days: Positive


class PriceSpec(_Strict):
    """A spot price series on the zone trace's timeline: ``file`` (JSON), and ``series``, the
    key of the series in a file that holds several (``v100_spot_prices.json``)."""

    file: Path
    series: str | None = None


class ZoneSpec(_Strict):
    """The spot offerings whose id matches ``offerings`` (a glob, e.g.
    ``aws/us-east-1/use1-az1/p3.2xlarge/spot``) follow their own availability trace and,
    with ``prices``, are billed at its price series."""

    offerings: Annotated[str, Field(min_length=1, max_length=512)]
    trace: Path
    prices: PriceSpec | None = None


class MarketSpec(_Strict):
    """Spot availability: a real trace, repeated to cover the horizon, from ``offset_hours``;
    ``zones`` give groups of spot offerings a trace (and price series) of their own."""

    trace: Path
    offset_hours: Annotated[float, Field(ge=0)] = 0.0
    droughts: list[Drought] = Field(default_factory=list)
    zones: list[ZoneSpec] = Field(default_factory=list, max_length=256)


Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
Clock = Annotated[str, StringConstraints(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")]


class ClosedSpec(_Strict):
    """When the pool is not lent out: on ``days`` from ``from`` to ``to`` (``HH:MM`` local;
    ``to`` at or before ``from`` runs past midnight)."""

    days: Annotated[list[Weekday], Field(min_length=1)]
    from_: Clock = Field(alias="from")
    to: Clock


class OnPremSpec(_Strict):
    """An on-prem GPU pool lent to retraining outside its ``closed`` hours: ``nodes``
    instances of ``gpus_per_node`` × ``accelerator``, billed at ``usd_per_node_hour`` (an
    amortised cost: hardware, power, operations). What runs there is revoked at closing time,
    with the same notice as spot."""

    name: Name
    accelerator: str
    gpus_per_node: Annotated[int, Field(ge=1, le=16)] = 8
    gpu_memory_gib: Positive = 40.0
    nodes: Annotated[int, Field(ge=1, le=10_000)]
    usd_per_node_hour: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    timezone: str = "UTC"
    closed: list[ClosedSpec] = Field(default_factory=list)
    startup_seconds: Annotated[float, Field(ge=0, le=3600)] = 60.0

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value


class TeamSpec(_Strict):
    """A team: its fair-share weight and, for ``priority-quota``, its GPU quota."""

    name: Name
    weight: Positive = 1.0
    gpu_quota: Annotated[int, Field(ge=0)] | None = None


class JobShape(_Strict):
    """What one run needs."""

    reference_hours: Positive
    incremental_reference_hours: Positive | None = None
    accelerators: list[str] = Field(default_factory=list)
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    spot: bool = True


class Scheduled(JobShape):
    """A model retrained on a cron schedule."""

    model: Name
    team: Name
    cron: str
    priority: Priority = "P1"
    sla: str = "8h"

    _cron = field_validator("cron")(_cron)
    _sla = field_validator("sla")(_duration)


class Severity(_Strict):
    """Probability of each drift severity (they need not sum to 1: normalised)."""

    critical: Probability = 0.2
    major: Probability = 0.5
    minor: Probability = 0.3


class DriftSpec(JobShape):
    """Drift-triggered retrains of a model: Poisson arrivals, severity → tier and SLA; only
    between ``from_day`` and ``to_day`` when given (a storm)."""

    model: Name
    team: Name
    per_day: Positive
    severity: Severity = Field(default_factory=Severity)
    from_day: Annotated[float, Field(ge=0)] = 0.0
    to_day: Positive | None = None


class Experiments(_Strict):
    """Ad-hoc P3 experiments of a team: Poisson arrivals, size uniform in [min, max]."""

    team: Name
    per_day: Positive
    min_reference_hours: Positive = 1.0
    max_reference_hours: Positive = 20.0
    accelerators: list[str] = Field(default_factory=list)
    sla: str = "7d"

    _sla = field_validator("sla")(_duration)


Step = Literal["features", "train", "validate", "package"]
DEFAULT_STEPS: dict[Step, float] = {"features": 1.0, "train": 6.0, "validate": 0.5, "package": 0.2}


class PipelineSpec(_Strict):
    """features → train → validate → package on a schedule, with a failing validation gate."""

    name: Name
    team: Name
    cron: str
    priority: Priority = "P2"
    sla: str = "24h"
    steps: dict[Step, Positive] = Field(default_factory=lambda: dict(DEFAULT_STEPS))
    gate_failure_probability: Probability = 0.1
    accelerators: list[str] = Field(default_factory=list)

    _cron = field_validator("cron")(_cron)
    _sla = field_validator("sla")(_duration)


class Workload(_Strict):
    """The generators."""

    scheduled: list[Scheduled] = Field(default_factory=list)
    drift: list[DriftSpec] = Field(default_factory=list)
    experiments: list[Experiments] = Field(default_factory=list)
    pipelines: list[PipelineSpec] = Field(default_factory=list)


class Scenario(_Strict):
    """A whole scenario file."""

    name: Name
    description: str = ""
    start: AwareDatetime
    days: Annotated[float, Field(gt=0, le=400)]
    seed: int = 0
    catalog: CatalogFilter = Field(default_factory=CatalogFilter)
    market: MarketSpec
    onprem: list[OnPremSpec] = Field(default_factory=list, max_length=64)
    teams: list[TeamSpec] = Field(default_factory=list)
    budgets: list[dict[str, Any]] = Field(default_factory=list)
    workload: Workload


SEVERITY = {"critical": (Tier.P0, "4h"), "major": (Tier.P1, "12h"), "minor": (Tier.P2, "48h")}


@dataclasses.dataclass(frozen=True)
class Built:
    """A scenario ready to simulate."""

    scenario: Scenario
    catalog: Catalog
    market: SandboxMarket
    budgets: tuple[Budget, ...]
    policy: Policy
    gpu_quotas: dict[str, int]
    arrivals: tuple[Arrival, ...]
    gate_failures: frozenset[str]  # job ids whose validation gate fails
    pipeline_runs: dict[str, tuple[str, ...]]  # a gate's job id → its run's job ids

    def run(self, policy: str, on_day: Callable[[datetime], None] | None = None) -> SimRun:
        """Simulate this scenario under the policy named ``policy`` (see
        :mod:`budgeteer.sim.policies`)."""
        return simulate(
            self.arrivals,
            self.catalog,
            self.market,
            start=self.start,
            end=self.end,
            budgets=self.budgets,
            policy=policy_named(policy, self.policy, self.gpu_quotas),
            fails=self.gate_failures,
            on_day=on_day,
        )

    @property
    def start(self) -> datetime:
        """When the simulation starts."""
        return self.scenario.start

    @property
    def end(self) -> datetime:
        """When it ends."""
        return self.scenario.start + timedelta(days=self.scenario.days)


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file; errors name the field and the file."""
    doc = read_document(path)
    try:
        scenario = Scenario.model_validate(doc)
    except ValidationError as exc:
        raise spec_errors(exc, str(path)) from None
    for i, b in enumerate(scenario.budgets):
        BudgetSpec.parse(b, str(path), f"budgets[{i}]")

    def here(p: Path) -> Path:
        return p if p.is_absolute() else path.parent / p

    m = scenario.market
    zones = [
        z.model_copy(
            update={
                "trace": here(z.trace),
                "prices": z.prices.model_copy(update={"file": here(z.prices.file)})
                if z.prices
                else None,
            }
        )
        for z in m.zones
    ]
    market = m.model_copy(update={"trace": here(m.trace), "zones": zones})
    return scenario.model_copy(update={"market": market})


def build(scenario: Scenario, seed: int | None = None) -> Built:
    """The catalog subset, market, budgets, policy and arrivals of ``scenario``."""
    rng = np.random.default_rng(scenario.seed if seed is None else seed)
    catalog = _catalog(scenario)
    market = _market(scenario, catalog)
    budgets = tuple(budget_from_spec(BudgetSpec.model_validate(b)) for b in scenario.budgets)
    policy = Policy(team_weights=tuple((t.name, t.weight) for t in scenario.teams))
    quotas = {t.name: t.gpu_quota for t in scenario.teams if t.gpu_quota is not None}
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
    return Built(
        scenario,
        catalog,
        market,
        budgets,
        policy,
        quotas,
        tuple(maker.arrivals),
        frozenset(failures),
        runs,
    )


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
        unknown = [a for a in shape.accelerators if not any(_family(k, a) for k in self.known)]
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


def _family(accelerator: str, family: str) -> bool:
    """``A100`` names ``A100`` and ``A100-80GB``, not ``A1000``; ``L4`` is not ``L40S``."""
    return accelerator == family or accelerator.startswith(f"{family}-")


def _catalog(scenario: Scenario) -> Catalog:
    full = load_catalog()
    f = scenario.catalog
    offerings = tuple(
        o
        for o in full.offerings
        if (f.providers is None or o.provider in f.providers)
        and (f.regions is None or o.region in f.regions)
        and (f.accelerators is None or any(_family(o.accelerator, a) for a in f.accelerators))
    )
    if not offerings:
        raise SpecError("catalog", "no offering of the bundled catalog matches these filters")
    pools = tuple(_pool_offering(full, p, i) for i, p in enumerate(scenario.onprem))
    return dataclasses.replace(full, offerings=offerings + pools)


def _calendar(pool: OnPremSpec) -> CalendarMarket:
    return CalendarMarket(
        [
            Closed(
                frozenset(WEEKDAYS.index(d) for d in c.days),
                time.fromisoformat(c.from_),
                time.fromisoformat(c.to),
            )
            for c in pool.closed
        ],
        pool.timezone,
    )


def _pool_offering(full: Catalog, pool: OnPremSpec, i: int) -> Offering:
    """The pool as an offering: on-prem, its nodes the capacity, and the revocations at
    closing time as an interruption rate (closings per open hour) the planner prices in."""
    known = sorted(full.throughput)
    accelerator = resolve_accelerator(pool.accelerator, known)
    if accelerator is None:
        raise SpecError(
            f"onprem[{i}].accelerator",
            f"unknown accelerator {pool.accelerator!r}; known: {', '.join(known)}",
        )
    calendar = _calendar(pool)
    open_hours = calendar.open_share() * 168
    if open_hours <= 0:
        raise SpecError(f"onprem[{i}].closed", "the pool is never open")
    return Offering(
        id=f"onprem/{pool.name}/*/{pool.gpus_per_node}x{accelerator}/on_prem",
        provider="onprem",
        region=pool.name,
        zones=(),
        instance_type=f"{pool.gpus_per_node}x{accelerator}",
        accelerator=accelerator,
        accelerators_per_instance=pool.gpus_per_node,
        vcpus=None,
        memory_gib=None,
        gpu_memory_gib=pool.gpu_memory_gib,
        market=Market.ON_PREM,
        price=Price(pool.usd_per_node_hour, f"onprem:{pool.name}"),
        interruption_per_hour=calendar.closings_per_week() / open_hours,
        startup_seconds=pool.startup_seconds,
        max_instances=pool.nodes,
    )


def _market(scenario: Scenario, catalog: Catalog) -> SandboxMarket:
    """Each trace from ``offset_hours``, repeated to cover the horizon, droughts cut in; a
    zone's price series rides along on its trace's ticks."""
    m = scenario.market
    default = _replay(scenario, m.trace, None, "market")
    if not m.zones and not scenario.onprem:
        return default
    routes: list[tuple[str, SandboxMarket]] = [
        (f"onprem/{pool.name}/*", _calendar(pool)) for pool in scenario.onprem
    ]
    for i, zone in enumerate(m.zones):
        where = f"market.zones[{i}]"
        if not any(fnmatch.fnmatchcase(o.id, zone.offerings) for o in catalog.offerings):
            raise SpecError(f"{where}.offerings", f"matches no offering: {zone.offerings!r}")
        routes.append((zone.offerings, _replay(scenario, zone.trace, zone.prices, where)))
    return ZonedMarket(routes, default)


def _replay(scenario: Scenario, path: Path, prices: PriceSpec | None, where: str) -> TraceMarket:
    trace = load_trace(path)
    avail = np.array(trace.available) >= 1
    gap = trace.gap_seconds
    skip = int(scenario.market.offset_hours * 3600 // gap) % len(avail)
    needed = int(scenario.days * 86400 // gap) + 2
    tiled = np.resize(np.roll(avail, -skip), needed)
    for d in scenario.market.droughts:
        a = int(d.start_day * 86400 // gap)
        b = int((d.start_day + d.days) * 86400 // gap)
        tiled[a:b] = False
    series = None
    source = f"trace:{trace.name}"
    if prices is not None:
        values, price_gap = load_price_series(prices.file, prices.series)
        if len(values) != len(avail):
            raise SpecError(
                f"{where}.prices",
                f"{prices.file.name} has {len(values)} prices; the trace has {len(avail)} ticks",
            )
        if price_gap is not None and price_gap != gap:
            raise SpecError(
                f"{where}.prices", f"gap_seconds {price_gap} differs from the trace's {gap}"
            )
        series = np.resize(np.roll(np.array(values), -skip), needed)
        source = f"prices:{prices.series or prices.file.stem}"
    return TraceMarket(tiled, gap, scenario.start, series, source=source)


def spot_offerings(catalog: Catalog) -> int:
    """How many spot offerings the catalog subset has (for reports)."""
    return sum(o.market is Market.SPOT for o in catalog.offerings)
