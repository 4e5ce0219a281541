"""Test builders: small, readable constructors for the records the core reads."""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from budgeteer.backends.jobuser import job_environment
from budgeteer.catalog import EgressRate, EgressTable
from budgeteer.core import Allocation, Snapshot
from budgeteer.domain.budget import Budget, Period, Scope, ScopeKind, SpendRecord
from budgeteer.domain.job import (
    DataSource,
    Dependency,
    DependencyCondition,
    Job,
    JobState,
    Resources,
    SpotSettings,
    Work,
)
from budgeteer.domain.offering import Market, Offering, Price
from budgeteer.domain.tier import Tier

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
THROUGHPUT = (("T4", 0.25), ("A100", 1.0), ("H100", 3.0), ("L4", 0.4))
EGRESS = EgressTable(
    (
        EgressRate("aws", "internet", 0, None, 0.09),
        EgressRate("aws", "inter_region", 0, None, 0.02),
        EgressRate("gcp", "internet", 0, None, 0.12),
    )
)


def make_offering(
    name: str = "a100",
    *,
    accelerator: str = "A100",
    gpus: int = 1,
    price: float = 4.0,
    market: Market = Market.ON_DEMAND,
    provider: str = "aws",
    region: str = "us-east-1",
    startup_seconds: float = 0.0,
    interruption_per_hour: float = 0.0,
    max_instances: int | None = None,
    gpu_memory_gib: float = 40.0,
) -> Offering:
    """An offering; its id is ``name`` so tests can refer to it."""
    return Offering(
        id=name,
        provider=provider,
        region=region,
        zones=(),
        instance_type=f"{name}.type",
        accelerator=accelerator,
        accelerators_per_instance=gpus,
        vcpus=8,
        memory_gib=64,
        gpu_memory_gib=gpu_memory_gib,
        market=market,
        price=Price(price, "test", NOW),
        interruption_per_hour=interruption_per_hour,
        startup_seconds=startup_seconds,
        max_instances=max_instances,
    )


def make_job(
    name: str = "job",
    *,
    team: str = "growth",
    tier: Tier = Tier.P2,
    hours: float = 10.0,
    accelerators: tuple[str, ...] = (),
    gpus_per_worker: int = 1,
    workers: tuple[int, int] = (1, 1),
    deadline_hours: float | None = None,
    budget_usd: float | None = None,
    spot: bool = True,
    depends_on: tuple[tuple[str, str], ...] = (),
    incremental_hours: float | None = None,
    submitted_hours_ago: float = 0.0,
    seq: int = 0,
    state: JobState = JobState.QUEUED,
    data: tuple[str, float] | None = None,
    project: str | None = None,
    min_gpu_memory_gib: float = 0.0,
    checkpoint_seconds: float = 1800.0,
    restart_seconds: float = 300.0,
) -> Job:
    """A job with reference-hours work; deadlines are relative to ``NOW``."""
    return Job(
        id=name,
        name=name,
        team=team,
        tier=tier,
        project=project,
        resources=Resources(accelerators, min_gpu_memory_gib, gpus_per_worker, *workers),
        work=Work(reference_hours=hours),
        submitted_at=NOW - timedelta(hours=submitted_hours_ago),
        seq=seq,
        state=state,
        deadline=NOW + timedelta(hours=deadline_hours) if deadline_hours is not None else None,
        budget_usd=budget_usd,
        depends_on=tuple(Dependency(j, DependencyCondition(on)) for j, on in depends_on),
        spot=SpotSettings(allowed=spot),
        incremental_reference_hours=incremental_hours,
        data=DataSource(*data) if data else None,
        checkpoint_interval_seconds=checkpoint_seconds,
        restart_overhead_seconds=restart_seconds,
    )


def make_budget(
    name: str = "growth-monthly",
    *,
    team: str | None = "growth",
    limit: str = "1000",
    reserve: str = "0",
    timezone: str = "UTC",
) -> Budget:
    """A monthly budget for ``team`` (organisation-wide when ``team`` is None)."""
    scope = Scope(ScopeKind.TEAM, team) if team else Scope(ScopeKind.ORGANISATION, "acme")
    return Budget(
        name,
        scope,
        Decimal(limit),
        Period(timezone=timezone),
        emergency_reserve_usd=Decimal(reserve),
    )


def spent(team: str, amount: str, hours_ago: float = 1.0) -> SpendRecord:
    """Accrued spend by ``team``."""
    return SpendRecord(team, Decimal(amount), NOW - timedelta(hours=hours_ago))


def make_snapshot(
    jobs: list[Job] | tuple[Job, ...],
    offerings: list[Offering] | tuple[Offering, ...] | None = None,
    budgets: list[Budget] | tuple[Budget, ...] = (),
    spend: list[SpendRecord] | tuple[SpendRecord, ...] = (),
    running: list[Allocation] | tuple[Allocation, ...] = (),
    **changes: Any,
) -> Snapshot:
    """A snapshot at ``NOW`` over the given records (one A100 offering by default)."""
    snap = Snapshot(
        now=NOW,
        jobs=tuple(jobs),
        offerings=tuple(offerings if offerings is not None else [make_offering()]),
        throughput=THROUGHPUT,
        egress=EGRESS,
        budgets=tuple(budgets),
        spend=tuple(spend),
        running=tuple(running),
    )
    return dataclasses.replace(snap, **changes) if changes else snap


def job_env(**own: str) -> dict[str, str]:
    """The environment a job launched by a backend sees, here, with ``own`` on top: for the
    uninterrupted baseline runs the tests compare a scheduled job's model with to the bit, so
    that both run the numeric libraries the same way whatever the host sets."""
    return job_environment(os.environ, (), own)
