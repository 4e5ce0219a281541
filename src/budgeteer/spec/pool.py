"""Pools in a scenario or the service's config: which offerings keep their instances warm
between jobs, and how (:mod:`budgeteer.core.pools` sizes them).

::

    pools:
      - offerings: "aws/us-east-1/*/g4dn.xlarge/*"   # a glob over offering ids
        min: 0                  # instances always kept (warm)
        max: 8                  # idle instances beyond max (busy + idle) go back at once
        idle_timeout: 10m       # an idle instance with nothing planned is given back after it
        batch_wait: 30m         # a job may wait this long to run back to back on a pool
                                # instance instead of booting its own (0s, the default: never)

Each offering a pattern matches gets a pool of its own with these settings; the first pattern
that matches an offering wins.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Offering
from budgeteer.errors import SpecError
from budgeteer.spec.job import parse_duration

MAX_POOL_INSTANCES = 10_000
_ZERO = re.compile(r"\s*0+(\.0*)?\s*[dhms]?\s*")


def _seconds(text: str) -> float:
    """A pool's duration in seconds: ``"10m"``, ``"90s"`` … or zero (``"0s"``, ``"0"``)."""
    if _ZERO.fullmatch(text):
        return 0.0
    return parse_duration(text).total_seconds()


class PoolSpec(BaseModel):
    """One ``pools:`` entry (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    offerings: Annotated[str, Field(min_length=1, max_length=512)]
    min: Annotated[int, Field(ge=0, le=MAX_POOL_INSTANCES)] = 0
    max: Annotated[int, Field(ge=1, le=MAX_POOL_INSTANCES)] | None = None
    idle_timeout: str = "10m"
    batch_wait: str = "0s"

    @field_validator("idle_timeout", "batch_wait")
    @classmethod
    def _timeout(cls, value: str) -> str:
        _seconds(value)
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
        timeout = _seconds(spec.idle_timeout)
        wait = _seconds(spec.batch_wait)
        for o in matched:
            out.setdefault(
                o.id,
                PoolSettings(o.id, spec.min, spec.max, timeout, o.startup_seconds, wait),
            )
    return out
