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
        # or by tier (the tiers not named never wait; P0 never does):
        # batch_wait: {P1: 5m, P2: 30m, P3: 2h}
        team: fraud             # who pays for instances the pool boots with no job (required
                                # with min > 0 or warm): billed to it while they idle
        teams: [fraud, risk]    # only these teams' jobs use the pool (its warm instances,
                                # batching); others boot their own there (default: every team)
        warm:                   # scheduled floors: from each time `at` fires (cron, UTC),
          - at: "0 2 * * *"     # keep `instances` warm `for` that long — booted one start-up
            instances: 4        # ahead, so they are ready when the nightly burst arrives
            for: 1h

Each offering a pattern matches gets a pool of its own with these settings; the first pattern
that matches an offering wins.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from budgeteer.core.pools import PoolSettings, WarmWindow
from budgeteer.domain.cron import parse_cron
from budgeteer.domain.offering import Offering
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecError
from budgeteer.spec.budget import Name
from budgeteer.spec.job import parse_duration

MAX_POOL_INSTANCES = 10_000
DEFAULT_IDLE_TIMEOUT = "10m"
_ZERO = re.compile(r"\s*0+(\.0*)?\s*[dhms]?\s*")


def _seconds(text: str) -> float:
    """A pool's duration in seconds: ``"10m"``, ``"90s"`` … or zero (``"0s"``, ``"0"``)."""
    if _ZERO.fullmatch(text):
        return 0.0
    return parse_duration(text).total_seconds()


class WarmSpec(BaseModel):
    """One ``warm:`` window of a pool (see the module docstring)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )

    at: Annotated[str, Field(min_length=1, max_length=128)]
    instances: Annotated[int, Field(ge=1, le=MAX_POOL_INSTANCES)]
    for_: str = Field(alias="for")

    @field_validator("at")
    @classmethod
    def _cron(cls, value: str) -> str:
        parse_cron(value)  # a CronError is a ValueError: pydantic names the field
        return value

    @field_validator("for_")
    @classmethod
    def _hold(cls, value: str) -> str:
        if _seconds(value) <= 0:
            raise ValueError("must be longer than 0s")
        return value

    def window(self) -> WarmWindow:
        """The core's window."""
        return WarmWindow(self.at, self.instances, _seconds(self.for_))


class PoolSpec(BaseModel):
    """One ``pools:`` entry (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    offerings: Annotated[str, Field(min_length=1, max_length=512)]
    min: Annotated[int, Field(ge=0, le=MAX_POOL_INSTANCES)] = 0
    max: Annotated[int, Field(ge=1, le=MAX_POOL_INSTANCES)] | None = None
    #: ``None``: the default, 10 minutes
    idle_timeout: str | None = None
    batch_wait: str | dict[str, str] = "0s"
    team: Name | None = None
    teams: list[Name] = Field(default_factory=list, max_length=64)
    warm: list[WarmSpec] = Field(default_factory=list, max_length=64)

    @field_validator("idle_timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        if value is not None:
            _seconds(value)
        return value

    @field_validator("batch_wait")
    @classmethod
    def _wait(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        if isinstance(value, str):
            _seconds(value)
            return value
        for tier, wait in value.items():
            try:
                parsed = Tier.parse(tier)
            except KeyError:
                raise ValueError(f"{tier!r}: a tier is P1, P2 or P3") from None
            if parsed is Tier.P0:
                raise ValueError("P0: P0 jobs never wait for a pool instance")
            try:
                _seconds(wait)
            except ValueError as exc:
                raise ValueError(f"{tier}: {exc}") from None
        return value

    def batch_waits(self) -> tuple[float, tuple[tuple[Tier, float], ...]]:
        """The wait for every tier, and the waits by tier (a mapping: 0 for the others)."""
        if isinstance(self.batch_wait, str):
            return _seconds(self.batch_wait), ()
        by_tier = sorted((Tier.parse(t), _seconds(w)) for t, w in self.batch_wait.items())
        return 0.0, tuple(by_tier)

    @model_validator(mode="after")
    def _bounds(self) -> PoolSpec:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        for i, w in enumerate(self.warm):
            if self.max is not None and w.instances > self.max:
                raise ValueError(f"warm[{i}].instances ({w.instances}) is above max ({self.max})")
        if (self.min or self.warm) and self.team is None:
            field = "min" if self.min else "warm"
            raise ValueError(
                f"team: required with {field} (the team that pays for the instances the pool "
                "boots with no job)"
            )
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
        timeout = _seconds(spec.idle_timeout or DEFAULT_IDLE_TIMEOUT)
        wait, by_tier = spec.batch_waits()
        for o in matched:
            out.setdefault(
                o.id,
                PoolSettings(
                    o.id,
                    spec.min,
                    spec.max,
                    timeout,
                    o.startup_seconds,
                    wait,
                    by_tier,
                    spec.team,
                    tuple(w.window() for w in spec.warm),
                    tuple(dict.fromkeys(spec.teams)),
                ),
            )
    return out
