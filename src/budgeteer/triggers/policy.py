"""The trigger policy (YAML, validated): which retrain a signal asks for, and what to do with it
given the model's open retrain (pure).

```yaml
models:
  churn:
    job: churn-retrain.yaml        # the job spec to instantiate (relative to this file)
levels:                            # from the strongest down; the first whose threshold a
  - name: critical                 # feature's statistic reaches (any of psi, ks, js) wins
    when: {psi: 0.5, ks: 0.3}
    priority: P0
    sla: 6h
    variant: full
  - {name: major, when: {psi: 0.25}, priority: P1, sla: 12h, variant: full}
  - {name: minor, when: {psi: 0.1, js: 0.1}, priority: P2, sla: 24h, variant: incremental}
```

Below every level: no retrain. A ``full`` variant runs the spec's full work (its
``strategy.full_reference_hours``, or its ``work``); ``incremental`` its
``strategy.incremental_reference_hours`` (a spec without a strategy has no incremental variant:
the policy is refused for it).

Dedupe (:func:`decide`): one open retrain per model. With none open: ``submit``. With one
waiting (not yet running) and a stronger level (a higher priority, or a tighter SLA, or full
where it was incremental): ``upgrade`` — the waiting one is replaced by one at the stronger
level (its tier, the tighter of the two deadlines, the larger variant). Otherwise — a weaker or
equal signal, or a retrain already running — ``none``: the signal is recorded, no second
retrain starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from budgeteer.errors import SpecError
from budgeteer.spec.errors import spec_errors
from budgeteer.spec.files import read_document
from budgeteer.spec.job import parse_duration
from budgeteer.triggers.drift import FeatureDrift

Variant = Literal["full", "incremental"]
_RANK = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thresholds(_Strict):
    """A level is reached when any given statistic of any feature reaches its threshold."""

    psi: Annotated[float, Field(gt=0, le=100)] | None = None
    ks: Annotated[float, Field(gt=0, le=1)] | None = None
    js: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _some(self) -> Thresholds:
        if self.psi is None and self.ks is None and self.js is None:
            raise ValueError("give at least one of psi, ks, js")
        return self

    def reached(self, d: FeatureDrift) -> bool:
        """Whether ``d`` reaches any threshold."""
        return (
            (self.psi is not None and d.psi >= self.psi)
            or (self.ks is not None and d.ks is not None and d.ks >= self.ks)
            or (self.js is not None and d.js >= self.js)
        )


class Level(_Strict):
    """One severity and the retrain it asks for."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]
    when: Thresholds
    priority: Literal["P0", "P1", "P2", "P3"]
    sla: str
    variant: Variant = "full"

    @field_validator("sla")
    @classmethod
    def _sla(cls, value: str) -> str:
        parse_duration(value)
        return value

    @property
    def sla_delta(self) -> timedelta:
        """The SLA as a duration."""
        return parse_duration(self.sla)


class DegradationRule(_Strict):
    """A metric's values watched with Page-Hinkley (:mod:`budgeteer.triggers.degradation`);
    a detection asks for the retrain of ``level``."""

    level: str
    mode: Literal["up", "down", "both"] = "down"
    min_instances: Annotated[int, Field(ge=1, le=100_000)] = 30
    delta: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.005
    threshold: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0


class ModelEntry(_Strict):
    """A model the policy may retrain: the job spec file instantiated for it."""

    job: Path


class TriggerPolicy(_Strict):
    """See the module docstring."""

    models: Annotated[dict[str, ModelEntry], Field(min_length=1, max_length=10_000)]
    levels: Annotated[list[Level], Field(min_length=1, max_length=16)]
    #: how a degrading metric (``POST /v1/signals`` kind ``degradation``) maps to a level
    degradation: DegradationRule | None = None

    @model_validator(mode="after")
    def _ordered(self) -> TriggerPolicy:
        names = [lv.name for lv in self.levels]
        if len(set(names)) != len(names):
            raise ValueError("level names must be distinct")
        if self.degradation is not None and self.degradation.level not in names:
            raise ValueError(f"degradation.level {self.degradation.level!r} is not a level")
        return self

    def level(self, name: str) -> Level:
        """The level called ``name``."""
        return next(lv for lv in self.levels if lv.name == name)

    def severity(self, drift: list[FeatureDrift]) -> Level | None:
        """The strongest level some feature reaches (levels are listed strongest first)."""
        for level in self.levels:
            if any(level.when.reached(d) for d in drift):
                return level
        return None


def load_policy(path: Path) -> TriggerPolicy:
    """Read and validate a policy file; every problem named by its field."""
    doc = read_document(path)
    if not isinstance(doc, dict):
        raise SpecError("(root)", "expected a mapping", str(path))
    try:
        return TriggerPolicy.model_validate(doc)
    except ValidationError as exc:
        raise spec_errors(exc, str(path)) from None


@dataclass(frozen=True, slots=True)
class OpenRetrain:
    """The model's retrain not yet finished: its job id, tier (``P0`` …), deadline, variant,
    and whether it runs already."""

    job_id: str
    priority: str
    deadline: datetime | None
    variant: Variant
    running: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """What a signal does: ``submit`` a retrain, ``upgrade`` the waiting one, or ``none``;
    with the priority, variant and deadline of the retrain it asks for, and why."""

    action: Literal["submit", "upgrade", "none"]
    priority: str | None
    variant: Variant | None
    deadline: datetime | None
    reason: str
    replaces: str | None = None


def decide(level: Level | None, open_retrain: OpenRetrain | None, now: datetime) -> Decision:
    """See the module docstring (pure)."""
    if level is None:
        return Decision("none", None, None, None, "no feature reaches the weakest level")
    deadline = now + level.sla_delta
    if open_retrain is None:
        return Decision("submit", level.priority, level.variant, deadline, f"{level.name} drift")
    if open_retrain.running:
        return Decision(
            "none",
            None,
            None,
            None,
            f"{level.name} drift recorded: {open_retrain.job_id} is already running",
        )
    stronger = _RANK[level.priority] < _RANK[open_retrain.priority]
    tighter = open_retrain.deadline is None or deadline < open_retrain.deadline
    bigger = level.variant == "full" and open_retrain.variant == "incremental"
    if not (stronger or tighter or bigger):
        return Decision(
            "none",
            None,
            None,
            None,
            f"{level.name} drift: {open_retrain.job_id} already waits at "
            f"{open_retrain.priority} with an equal or tighter deadline",
        )
    priority = min(level.priority, open_retrain.priority, key=_RANK.__getitem__)
    variant: Variant = "full" if "full" in (level.variant, open_retrain.variant) else "incremental"
    if open_retrain.deadline is not None:
        deadline = min(deadline, open_retrain.deadline)
    return Decision(
        "upgrade",
        priority,
        variant,
        deadline,
        f"{level.name} drift: {open_retrain.job_id} raised",
        replaces=open_retrain.job_id,
    )


__all__ = [
    "Decision",
    "Level",
    "OpenRetrain",
    "TriggerPolicy",
    "decide",
    "load_policy",
]
