"""On-prem GPU pools, declared the same way in a scenario (``onprem:``) and in the service
config (``onprem:``): ``nodes`` instances of ``gpus_per_node`` × ``accelerator`` lent to
retraining outside their ``closed`` hours, billed at ``usd_per_node_hour`` (an amortised cost:
hardware, power, operations). A pool becomes one offering (market ``on_prem``, its nodes the
capacity, its closings priced as an interruption rate) and a :class:`CalendarMarket` (closed →
no room, and what runs is revoked at closing time with the same notice as spot; a launch
refused while closed says when it opens)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import time
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from budgeteer.backends.market import CalendarMarket, Closed
from budgeteer.domain.offering import Market, Offering, Price
from budgeteer.errors import SpecError
from budgeteer.spec.job import resolve_accelerator
from budgeteer.spec.timezone import TimeZoneName

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
ClockText = Annotated[str, StringConstraints(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ClosedSpec(_Strict):
    """When the pool is not lent out: on ``days`` from ``from`` to ``to`` (``HH:MM`` local;
    ``to`` at or before ``from`` runs past midnight)."""

    days: Annotated[list[Weekday], Field(min_length=1)]
    from_: ClockText = Field(alias="from")
    to: ClockText


class OnPremSpec(_Strict):
    """An on-prem GPU pool (see the module docstring)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    accelerator: str
    gpus_per_node: Annotated[int, Field(ge=1, le=16)] = 8
    gpu_memory_gib: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 40.0
    nodes: Annotated[int, Field(ge=1, le=10_000)]
    usd_per_node_hour: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    timezone: TimeZoneName = "UTC"
    closed: list[ClosedSpec] = Field(default_factory=list)
    startup_seconds: Annotated[float, Field(ge=0, le=3600)] = 60.0


def pool_calendar(pool: OnPremSpec) -> CalendarMarket:
    """When the pool is open."""
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


def pool_id(pool: OnPremSpec) -> str:
    """The pattern matching the pool's offering id."""
    return f"onprem/{pool.name}/*"


def pool_offering(accelerators: Iterable[str], pool: OnPremSpec, where: str) -> Offering:
    """The pool as an offering: on-prem, its nodes the capacity, and the revocations at
    closing time as an interruption rate (closings per open hour) the planner prices in.
    ``accelerators``: the throughput table's names; ``where``: the pool's place in its file."""
    known = sorted(accelerators)
    accelerator = resolve_accelerator(pool.accelerator, known)
    if accelerator is None:
        raise SpecError(
            f"{where}.accelerator",
            f"unknown accelerator {pool.accelerator!r}; known: {', '.join(known)}",
        )
    calendar = pool_calendar(pool)
    open_hours = calendar.open_share() * 168
    if open_hours <= 0:
        raise SpecError(f"{where}.closed", "the pool is never open")
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
