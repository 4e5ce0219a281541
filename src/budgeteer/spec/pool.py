"""Pools in a scenario or the service's config: which offerings keep their instances warm
between jobs, and how (:mod:`budgeteer.core.pools` sizes them).

::

    pools:
      - offerings: "aws/us-east-1/*/g4dn.xlarge/*"   # a glob over offering ids
        min: 0                  # instances always kept (warm)
        max: 8                  # never more held (busy and idle)
        idle_timeout: 10m       # an idle instance with nothing planned is given back after it

Each offering a pattern matches gets a pool of its own with these settings; the first pattern
that matches an offering wins.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Offering
from budgeteer.errors import SpecError
from budgeteer.spec.job import parse_duration

MAX_POOL_INSTANCES = 10_000


class PoolSpec(BaseModel):
    """One ``pools:`` entry (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    offerings: Annotated[str, Field(min_length=1, max_length=512)]
    min: Annotated[int, Field(ge=0, le=MAX_POOL_INSTANCES)] = 0
    max: Annotated[int, Field(ge=1, le=MAX_POOL_INSTANCES)] | None = None
    idle_timeout: str = "10m"

    @field_validator("idle_timeout")
    @classmethod
    def _timeout(cls, value: str) -> str:
        parse_duration(value)
        return value

    @model_validator(mode="after")
    def _bounds(self) -> PoolSpec:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


def pool_settings(
    specs: Sequence[PoolSpec],
    offerings: Sequence[Offering],
    source: str | None = None,
    prefix: str = "pools",
) -> dict[str, PoolSettings]:
    """Each matched offering's pool settings, by offering id; a pattern that matches no
    offering is an error naming it."""
    out: dict[str, PoolSettings] = {}
    for i, spec in enumerate(specs):
        matched = [o for o in offerings if fnmatch.fnmatchcase(o.id, spec.offerings)]
        if not matched:
            raise SpecError(
                f"{prefix}[{i}].offerings", f"matches no offering: {spec.offerings!r}", source
            )
        timeout = parse_duration(spec.idle_timeout).total_seconds()
        for o in matched:
            out.setdefault(
                o.id,
                PoolSettings(o.id, spec.min, spec.max, timeout, o.startup_seconds),
            )
    return out
