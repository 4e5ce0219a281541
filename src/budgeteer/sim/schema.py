"""The scenario file's schema (Pydantic): every field validated, unknown fields rejected, every
error naming its field and the file. See ``docs/simulate.md`` for what each field means."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from budgeteer.catalog.onprem import OnPremSpec
from budgeteer.domain.cron import CronError, parse_cron
from budgeteer.spec.budget import BudgetSpec
from budgeteer.spec.errors import spec_errors
from budgeteer.spec.files import read_document
from budgeteer.spec.job import MAX_REFERENCE_HOURS, parse_duration
from budgeteer.spec.paths import FilePath
from budgeteer.spec.pool import PoolSpec

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: Arrivals a day of one generator, at the most (a quarter of it is 90,000 jobs).
MAX_PER_DAY = 1000.0
PerDay = Annotated[float, Field(gt=0, le=MAX_PER_DAY, allow_inf_nan=False)]
#: A run's size, as a job spec's ``work.reference_hours`` may be.
Hours = Annotated[float, Field(gt=0, le=MAX_REFERENCE_HOURS, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1)]
Priority = Literal["P0", "P1", "P2", "P3"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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

    file: FilePath
    series: str | None = None


class ZoneSpec(_Strict):
    """The spot offerings whose id matches ``offerings`` (a glob, e.g.
    ``aws/us-east-1/use1-az1/p3.2xlarge/spot``) follow their own availability trace and,
    with ``prices``, are billed at its price series."""

    offerings: Annotated[str, Field(min_length=1, max_length=512)]
    trace: FilePath
    prices: PriceSpec | None = None


class MarketSpec(_Strict):
    """Spot availability: a real trace, repeated to cover the horizon, from ``offset_hours``;
    ``zones`` give groups of spot offerings a trace (and price series) of their own. With
    ``history_days``, the service starts as one that has watched these markets that long: each
    spot offering's market book holds the trace's periods before the start (the trace repeated
    backwards where it is shorter), as ``market_seeds:`` gives a deployment."""

    trace: FilePath
    offset_hours: Annotated[float, Field(ge=0)] = 0.0
    history_days: Annotated[float, Field(ge=0, le=366)] = 0.0
    droughts: list[Drought] = Field(default_factory=list)
    zones: list[ZoneSpec] = Field(default_factory=list, max_length=256)


class TeamSpec(_Strict):
    """A team: its fair-share weight and, for ``priority-quota``, its GPU quota."""

    name: Name
    weight: Positive = 1.0
    gpu_quota: Annotated[int, Field(ge=0)] | None = None


class JobShape(_Strict):
    """What one run needs."""

    reference_hours: Hours
    incremental_reference_hours: Hours | None = None
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
    per_day: PerDay
    severity: Severity = Field(default_factory=Severity)
    from_day: Annotated[float, Field(ge=0)] = 0.0
    to_day: Positive | None = None


class Experiments(_Strict):
    """Ad-hoc P3 experiments of a team: Poisson arrivals, size uniform in [min, max]."""

    team: Name
    per_day: PerDay
    min_reference_hours: Hours = 1.0
    max_reference_hours: Hours = 20.0
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
    steps: dict[Step, Hours] = Field(default_factory=lambda: dict(DEFAULT_STEPS))
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
    seed: Annotated[int, Field(ge=0)] = 0
    catalog: CatalogFilter = Field(default_factory=CatalogFilter)
    market: MarketSpec
    onprem: list[OnPremSpec] = Field(default_factory=list, max_length=64)
    pools: list[PoolSpec] = Field(default_factory=list, max_length=256)
    teams: list[TeamSpec] = Field(default_factory=list)
    budgets: list[dict[str, Any]] = Field(default_factory=list)
    workload: Workload


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
