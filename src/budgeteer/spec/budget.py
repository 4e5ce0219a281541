"""The budget spec (YAML/JSON) and recorded spend, and their conversion to domain records."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from budgeteer.domain.budget import (
    DEFAULT_THRESHOLDS,
    Budget,
    Period,
    PeriodKind,
    Scope,
    ScopeKind,
    SpendRecord,
)
from budgeteer.domain.tier import Tier
from budgeteer.spec.errors import spec_errors
from budgeteer.spec.timezone import TimeZoneName

Name = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", strip_whitespace=True)
]
Usd = Annotated[Decimal, Field(allow_inf_nan=False, max_digits=18, decimal_places=6)]
Fraction = Annotated[Decimal, Field(gt=0, le=1, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScopeSpec(_Strict):
    """Exactly one of ``organisation``, ``team`` or ``project``."""

    organisation: Name | None = None
    team: Name | None = None
    project: Name | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ScopeSpec:
        given = [v for v in (self.organisation, self.team, self.project) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of organisation, team or project")
        return self


class CustomPeriodSpec(_Strict):
    """A window of ``days`` days starting at ``start`` and repeating."""

    start: date
    days: Annotated[int, Field(ge=1, le=3660)]


class ThresholdsSpec(_Strict):
    """Share of the limit each tier may bring projected spend up to (P0 always 1.0 + reserve)."""

    P1: Fraction = DEFAULT_THRESHOLDS[Tier.P1]
    P2: Fraction = DEFAULT_THRESHOLDS[Tier.P2]
    P3: Fraction = DEFAULT_THRESHOLDS[Tier.P3]

    @model_validator(mode="after")
    def _monotone(self) -> ThresholdsSpec:
        if not self.P3 <= self.P2 <= self.P1:
            raise ValueError("thresholds must satisfy P3 <= P2 <= P1 <= 1")
        return self


class BudgetSpec(_Strict):
    """A budget: scope, period, time zone, limit, tier thresholds, emergency reserve for P0."""

    id: Name
    scope: ScopeSpec
    period: Literal["monthly", "quarterly"] | CustomPeriodSpec = "monthly"
    timezone: TimeZoneName = "UTC"
    limit_usd: Annotated[Usd, Field(gt=0)]
    thresholds: ThresholdsSpec = Field(default_factory=ThresholdsSpec)
    emergency_reserve_usd: Annotated[Usd, Field(ge=0)] = Decimal(0)

    @classmethod
    def parse(cls, data: Any, source: str | None = None, prefix: str = "") -> BudgetSpec:
        """Validate raw data; raises :class:`SpecErrors` naming each bad field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise spec_errors(exc, source, prefix) from None


class SpendSpec(_Strict):
    """Money already spent this period (until a ledger exists to read it from)."""

    team: Name
    project: Name | None = None
    amount_usd: Annotated[Usd, Field(ge=0)]
    at: AwareDatetime
    job: Name | None = None


def budget_from_spec(spec: BudgetSpec) -> Budget:
    """The domain :class:`Budget` for a validated spec."""
    scope = (
        Scope(ScopeKind.ORGANISATION, spec.scope.organisation)
        if spec.scope.organisation
        else Scope(ScopeKind.TEAM, spec.scope.team)
        if spec.scope.team
        else Scope(ScopeKind.PROJECT, spec.scope.project or "")
    )
    if isinstance(spec.period, CustomPeriodSpec):
        period = Period(PeriodKind.CUSTOM, spec.timezone, spec.period.start, spec.period.days)
    else:
        period = Period(PeriodKind(spec.period), spec.timezone)
    thresholds = (
        (Tier.P0, Decimal(1)),
        (Tier.P1, spec.thresholds.P1),
        (Tier.P2, spec.thresholds.P2),
        (Tier.P3, spec.thresholds.P3),
    )
    return Budget(
        id=spec.id,
        scope=scope,
        limit_usd=spec.limit_usd,
        period=period,
        thresholds=thresholds,
        emergency_reserve_usd=spec.emergency_reserve_usd,
    )


def spend_from_spec(spec: SpendSpec) -> SpendRecord:
    """The domain :class:`SpendRecord` for a validated spend entry."""
    return SpendRecord(
        team=spec.team,
        project=spec.project,
        amount_usd=spec.amount_usd,
        at=spec.at,
        job_id=spec.job,
    )
