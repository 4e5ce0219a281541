"""The job spec: the public contract orchestrators send (YAML or JSON), and its conversion.

Documented field by field in ``docs/job-spec.md``. Unknown fields are rejected, so a typo never
silently turns into a default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from budgeteer.domain.job import (
    DataSource,
    DeadlineMiss,
    Dependency,
    DependencyCondition,
    Gate,
    Job,
    Resources,
    SpotSettings,
    SwitchRule,
    Webhook,
    Work,
)
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecError
from budgeteer.spec.errors import spec_errors

Name = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", strip_whitespace=True)
]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]

# The schema's bounds (docs/job-spec.md, "Bounds"): far beyond any real retrain, near enough
# that every number the planner derives stays finite and every date representable.
#: Work of one job, in reference-accelerator hours (A100-40GB = 1): ~114 GPU-years.
MAX_REFERENCE_HOURS = 1_000_000.0
#: How far ahead a deadline (or an SLA) may lie.
MAX_HORIZON = timedelta(days=366)
MAX_WORKERS = 1024
MAX_STEPS = 10**15
MAX_STEPS_PER_HOUR = 1e12
MAX_GPU_MEMORY_GIB = 1024.0
MAX_DATA_GB = 10_000_000.0  # 10 PB
MAX_BUDGET_USD = Decimal(1_000_000_000)
WorkHours = Annotated[float, Field(gt=0, le=MAX_REFERENCE_HOURS, allow_inf_nan=False)]

_DURATION = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)d)?\s*(?:(\d+(?:\.\d+)?)h)?\s*"
    r"(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$"
)


def parse_duration(text: str) -> timedelta:
    """Parse ``"4h"``, ``"90m"``, ``"1d12h"``, ``"2h30m"``; raises ``ValueError`` otherwise."""
    match = _DURATION.match(text)
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"expected a duration like '4h', '90m' or '1d12h', got {text!r}")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    try:
        delta = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {text!r} is too long") from None
    if delta <= timedelta(0):
        raise ValueError(f"duration must be positive, got {text!r}")
    if delta > MAX_HORIZON:
        raise ValueError(f"{text!r} is longer than {MAX_HORIZON.days} days")
    return delta


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkersSpec(_Strict):
    """Elastic worker range: the scheduler picks a count in ``[min, max]``."""

    min: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 1
    max: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 1

    @model_validator(mode="after")
    def _ordered(self) -> WorkersSpec:
        if self.max < self.min:
            raise ValueError("max must be at least min")
        return self


class ResourcesSpec(_Strict):
    """What each worker needs."""

    accelerators: list[Name] = Field(default_factory=list, max_length=32)
    min_gpu_memory_gib: Annotated[
        float, Field(ge=0, le=MAX_GPU_MEMORY_GIB, allow_inf_nan=False)
    ] = 0.0
    gpus_per_worker: Annotated[int, Field(ge=1, le=64)] = 1
    workers: WorkersSpec = Field(default_factory=WorkersSpec)

    @field_validator("workers", mode="before")
    @classmethod
    def _fixed_workers(cls, value: Any) -> Any:
        """``workers: 4`` is ``{min: 4, max: 4}`` (one message when it is out of range)."""
        if isinstance(value, int) and not isinstance(value, bool):
            if not 1 <= value <= MAX_WORKERS:
                raise ValueError(f"must be between 1 and {MAX_WORKERS}")
            return {"min": value, "max": value}
        return value


class WorkSpec(_Strict):
    """Either ``reference_hours`` (A100-40GB GPU-hours) or ``steps`` with measured rates."""

    reference_hours: WorkHours | None = None
    steps: Annotated[int, Field(gt=0, le=MAX_STEPS)] | None = None
    steps_per_hour_on: (
        dict[Name, Annotated[float, Field(gt=0, le=MAX_STEPS_PER_HOUR, allow_inf_nan=False)]] | None
    ) = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _one_kind(self) -> WorkSpec:
        if self.reference_hours is None and self.steps is None:
            raise ValueError("give reference_hours, or steps with steps_per_hour_on")
        if self.reference_hours is not None and self.steps is not None:
            raise ValueError("give reference_hours or steps, not both")
        if self.steps is not None and not self.steps_per_hour_on:
            raise ValueError("steps needs steps_per_hour_on (steps per hour of one worker)")
        return self


class DependencySpec(_Strict):
    """Start only after ``job`` ended with ``on``: success (afterok), any, failure (afternotok)."""

    job: Name
    on: Literal["success", "any", "failure"] = "success"


class SwitchRuleSpec(_Strict):
    """``{after: 90m, if_progress_below: 0.5, then: on_demand}``."""

    after: str
    if_progress_below: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    then: Literal["on_demand"] = "on_demand"

    @field_validator("after")
    @classmethod
    def _after(cls, value: str) -> str:
        parse_duration(value)
        return value


class SpotSpec(_Strict):
    """Spot eligibility, the preemption count after which the job goes on-demand, and switch
    rules."""

    allowed: bool = True
    max_preemptions: Annotated[int, Field(ge=0, le=1000)] | None = None
    switch_rules: list[SwitchRuleSpec] = Field(default_factory=list, max_length=16)


class StrategySpec(_Strict):
    """A full and a cheaper incremental variant of the same retrain (reference hours each)."""

    full_reference_hours: WorkHours
    incremental_reference_hours: WorkHours

    @model_validator(mode="after")
    def _cheaper(self) -> StrategySpec:
        if self.incremental_reference_hours >= self.full_reference_hours:
            raise ValueError("incremental_reference_hours must be below full_reference_hours")
        return self


class DataSpec(_Strict):
    """Where the training data lives (``provider/region``) and its size, for egress pricing;
    ``uri`` names the dataset: a warm pool instance that ran a job with the same ``uri`` holds
    it already (in its ``BUDGETEER_CACHE_DIR``), and a placement there is priced without its
    egress."""

    location: Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]+/[a-z0-9-]+$")]
    size_gb: Annotated[float, Field(ge=0, le=MAX_DATA_GB, allow_inf_nan=False)]
    uri: Annotated[str, StringConstraints(pattern=r"^[!-~]{1,1024}$")] | None = None


class EarlyStopSpec(_Strict):
    """Stop when the reported loss has not improved by ``min_delta`` over ``patience`` reports."""

    min_delta: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    patience: Annotated[int, Field(ge=1, le=10_000)]


class GateSpec(_Strict):
    """A validation gate: ``exit_code: true`` (passes on exit 0), or a ``metric`` of the last
    progress report with ``min`` and/or ``max``."""

    exit_code: bool = False
    metric: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")] | None = None
    min: Annotated[float, Field(allow_inf_nan=False)] | None = None
    max: Annotated[float, Field(allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> GateSpec:
        if self.exit_code == (self.metric is not None):
            raise ValueError("give exit_code: true, or a metric with min and/or max")
        if self.metric is not None and self.min is None and self.max is None:
            raise ValueError("a metric gate needs min and/or max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min is above max: no value could pass")
        return self


class WebhookSpec(_Strict):
    """POST the job's terminal state and deadline risk to ``url`` (http or https), signed with
    ``secret`` when given (header ``Budgeteer-Signature: sha256=<hex HMAC of the body>``)."""

    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$", max_length=2048)]
    secret: Annotated[str, StringConstraints(min_length=8, max_length=256)] | None = None


class CheckpointSpec(_Strict):
    """How often the job checkpoints, and how long a restart from a checkpoint takes."""

    interval_minutes: Annotated[float, Field(gt=0, le=24 * 60)] = 30.0
    restart_overhead_minutes: Annotated[float, Field(ge=0, le=24 * 60)] = 5.0


class JobSpec(_Strict):
    """A retraining request. See ``docs/job-spec.md`` for every field."""

    name: Name
    team: Name
    project: Name | None = None
    priority: Literal["P0", "P1", "P2", "P3"] = "P2"
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    work: WorkSpec | None = None
    deadline: AwareDatetime | None = None
    sla: str | None = None
    budget_usd: (
        Annotated[Decimal, Field(gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False, max_digits=18)]
        | None
    ) = None
    depends_on: list[DependencySpec] = Field(default_factory=list, max_length=256)
    spot: SpotSpec = Field(default_factory=SpotSpec)
    strategy: StrategySpec | None = None
    data: DataSpec | None = None
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    early_stop: EarlyStopSpec | None = None
    command: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        default_factory=list, max_length=1024
    )
    retries: Annotated[int, Field(ge=0, le=100)] = 0
    webhook: WebhookSpec | None = None
    on_deadline_miss: Literal["run", "cancel"] = "run"
    gate: GateSpec | None = None
    promote: bool = False

    @field_validator("sla")
    @classmethod
    def _sla(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.deadline is not None and self.sla is not None:
            raise ValueError("give deadline or sla, not both")
        if self.work is None and self.strategy is None:
            raise ValueError("give work (or strategy with full_reference_hours)")
        if self.promote and self.gate is not None:
            raise ValueError("a promotion step cannot be a gate (give promote or gate)")
        return self

    @classmethod
    def parse(cls, data: Any, source: str | None = None, prefix: str = "") -> JobSpec:
        """Validate raw data (a mapping from YAML/JSON); raises :class:`SpecErrors`."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise spec_errors(exc, source, prefix) from None


def resolve_accelerator(name: str, known: Iterable[str]) -> str | None:
    """The catalog spelling of ``name`` if it names a known accelerator family, else ``None``."""
    lowered = name.lower()
    for candidate in known:
        if candidate.lower() == lowered:
            return candidate
    for candidate in known:
        if candidate.lower().startswith(lowered + "-"):
            return candidate[: len(name)]
    return None


def _accelerators(
    names: Sequence[str], known: Sequence[str], field: str, source: str | None
) -> tuple[str, ...]:
    out = []
    for i, name in enumerate(names):
        resolved = resolve_accelerator(name, known)
        if resolved is None:
            raise SpecError(
                f"{field}[{i}]" if field.endswith("accelerators") else f"{field}.{name}",
                f"unknown accelerator {name!r}; known: {', '.join(sorted(known))}",
                source,
            )
        out.append(resolved)
    return tuple(out)


def job_from_spec(
    spec: JobSpec,
    *,
    job_id: str,
    now: datetime,
    seq: int,
    known_accelerators: Sequence[str],
    dependency_ids: Mapping[str, str] | None = None,
    source: str | None = None,
    prefix: str = "",
) -> Job:
    """Turn a validated spec into a domain :class:`Job` submitted at ``now``.

    Checks what needs context: accelerators known to the catalog, the deadline not in the past,
    dependencies resolvable (``dependency_ids`` maps a referenced name to its job id).
    """
    p = f"{prefix}." if prefix else ""
    res = spec.resources
    workers = res.workers
    accelerators = _accelerators(
        res.accelerators, known_accelerators, f"{p}resources.accelerators", source
    )
    deadline = _deadline(spec, now, p, source)
    work = _work(spec, known_accelerators, p, source)
    deps = []
    for k, dep in enumerate(spec.depends_on):
        target = (dependency_ids or {}).get(dep.job)
        if target is None:
            raise SpecError(f"{p}depends_on[{k}].job", f"unknown job {dep.job!r}", source)
        if target == job_id:
            raise SpecError(f"{p}depends_on[{k}].job", "a job cannot depend on itself", source)
        deps.append(Dependency(job=target, on=DependencyCondition(dep.on)))
    return Job(
        id=job_id,
        name=spec.name,
        team=spec.team,
        project=spec.project,
        tier=Tier.parse(spec.priority),
        resources=Resources(
            accelerators=accelerators,
            min_gpu_memory_gib=res.min_gpu_memory_gib,
            gpus_per_worker=res.gpus_per_worker,
            min_workers=workers.min,
            max_workers=workers.max,
        ),
        work=work,
        submitted_at=now,
        seq=seq,
        deadline=deadline,
        budget_usd=float(spec.budget_usd) if spec.budget_usd is not None else None,
        depends_on=tuple(deps),
        spot=SpotSettings(
            allowed=spec.spot.allowed,
            max_preemptions=spec.spot.max_preemptions,
            switch_rules=tuple(
                SwitchRule(parse_duration(r.after).total_seconds() / 3600, r.if_progress_below)
                for r in spec.spot.switch_rules
            ),
        ),
        incremental_reference_hours=(
            spec.strategy.incremental_reference_hours if spec.strategy else None
        ),
        data=DataSource(spec.data.location, spec.data.size_gb, spec.data.uri)
        if spec.data
        else None,
        checkpoint_interval_seconds=spec.checkpoint.interval_minutes * 60.0,
        restart_overhead_seconds=spec.checkpoint.restart_overhead_minutes * 60.0,
        command=tuple(spec.command),
        retries=spec.retries,
        early_stop=(spec.early_stop.min_delta, spec.early_stop.patience)
        if spec.early_stop
        else None,
        webhook=Webhook(spec.webhook.url, spec.webhook.secret) if spec.webhook else None,
        on_deadline_miss=DeadlineMiss(spec.on_deadline_miss),
        gate=None if spec.gate is None else Gate(spec.gate.metric, spec.gate.min, spec.gate.max),
        promote=spec.promote,
    )


def _deadline(spec: JobSpec, now: datetime, p: str, source: str | None) -> datetime | None:
    if spec.sla is not None:
        return now + parse_duration(spec.sla)  # at most MAX_HORIZON (checked by the schema)
    if spec.deadline is not None and spec.deadline <= now:
        raise SpecError(
            f"{p}deadline",
            f"is in the past: {spec.deadline.isoformat()} is not after the scheduler's current "
            f"time {now.isoformat()}",
            source,
        )
    if spec.deadline is not None and spec.deadline - now > MAX_HORIZON:
        raise SpecError(
            f"{p}deadline",
            f"is more than {MAX_HORIZON.days} days ahead ({spec.deadline.isoformat()})",
            source,
        )
    return spec.deadline


def _work(spec: JobSpec, known: Sequence[str], p: str, source: str | None) -> Work:
    if spec.work is None:
        assert spec.strategy is not None  # guaranteed by JobSpec._consistent
        return Work(reference_hours=spec.strategy.full_reference_hours)
    if (
        spec.strategy is not None
        and spec.work.reference_hours is not None
        and (spec.work.reference_hours != spec.strategy.full_reference_hours)
    ):
        raise SpecError(
            f"{p}strategy.full_reference_hours", "must equal work.reference_hours", source
        )
    rates = spec.work.steps_per_hour_on or {}
    names = _accelerators(list(rates), known, f"{p}work.steps_per_hour_on", source)
    return Work(
        reference_hours=spec.work.reference_hours,
        steps=spec.work.steps,
        steps_per_hour_on=tuple(zip(names, rates.values(), strict=True)),
    )
