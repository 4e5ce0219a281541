"""A random but realistic queue for timing ``plan_cycle``.

Jobs come from a few dozen resource *templates* (the models a platform retrains), spread over
teams with a skew; tiers are mostly P1/P2; work is log-normal; about two thirds carry an SLA a
bit longer than a fast placement needs; some carry a per-run cap or data to move; one in ten
depends on an earlier job. Offerings are sampled from the bundled catalog (copied with jittered
prices and new region names beyond its size); one in eight has limited capacity. Budgets per team
are set so that the low tiers feel them.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import numpy as np

from budgeteer.catalog import Catalog, load_catalog
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.budget import Budget, Scope, ScopeKind, SpendRecord
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
from budgeteer.domain.offering import Offering, Price
from budgeteer.domain.tier import Tier

BENCH_NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
_FAMILIES = (
    ("T4",),
    ("L4", "A10G"),
    ("A10G", "L4", "L40S"),
    ("A100",),
    ("A100", "H100"),
    ("H100",),
    ("V100",),
    ("L40S",),
    ("A100", "A100-80GB"),
    (),
)


def _offerings(catalog: Catalog, count: int, rng: np.random.Generator) -> tuple[Offering, ...]:
    base = list(catalog.offerings)
    picked: list[Offering] = []
    order = rng.permutation(len(base))
    for n in range(count):
        o = base[int(order[n % len(base)])]
        copy = n // len(base)
        cap = int(rng.integers(2, 17)) if rng.random() < 0.125 else None
        if copy:
            price = o.usd_per_hour * float(rng.uniform(0.9, 1.15))
            o = dataclasses.replace(
                o,
                id=f"{o.id}#{copy}",
                region=f"{o.region}-x{copy}",
                price=Price(price, "bench:jittered", o.price.observed_at),
            )
        picked.append(dataclasses.replace(o, max_instances=cap))
    return tuple(picked)


def _template(rng: np.random.Generator, offerings: tuple[Offering, ...]) -> Resources:
    """A resource shape that at least one offering can serve."""
    while True:
        families = _FAMILIES[int(rng.integers(len(_FAMILIES)))]
        k = int(rng.choice([1, 1, 1, 2, 4, 8]))
        lo = int(rng.choice([1, 1, 2]))
        hi = lo * int(rng.choice([1, 1, 2, 4]))
        mem = float(rng.choice([0, 0, 16, 24, 40]))
        if any(
            o.accelerators_per_instance >= k
            and o.gpu_memory_gib >= mem
            and (not families or o.accelerator.split("-")[0] in families)
            for o in offerings
        ):
            return Resources(families, mem, k, lo, hi)


def generate_snapshot(jobs: int, offerings: int, teams: int = 8, seed: int = 0) -> Snapshot:
    """A snapshot with ``jobs`` pending jobs over ``offerings`` offerings and ``teams`` teams."""
    rng = np.random.default_rng(seed)
    catalog = load_catalog()
    offers = _offerings(catalog, offerings, rng)
    team_names = [f"team-{i:02d}" for i in range(teams)]
    templates = [(_template(rng, offers), bool(rng.random() < 0.8)) for _ in range(40)]
    weights = 1.0 / np.arange(1, teams + 1)
    weights /= weights.sum()
    out: list[Job] = []
    expected_by_team = dict.fromkeys(team_names, 0.0)
    for i in range(jobs):
        team = team_names[int(rng.choice(teams, p=weights))]
        res, spot = templates[int(rng.integers(len(templates)))]
        tier = Tier(int(rng.choice(4, p=[0.05, 0.25, 0.4, 0.3])))
        work = float(rng.lognormal(math.log(6.0), 1.0)) * res.gpus_per_worker
        fast_hours = work / (res.gpus_per_worker * res.max_workers * 3.0)
        deadline = (
            BENCH_NOW + timedelta(hours=fast_hours * float(rng.uniform(1.5, 12)) + 1)
            if rng.random() < 0.66
            else None
        )
        deps: tuple[Dependency, ...] = ()
        if out and rng.random() < 0.1:
            deps = (Dependency(out[int(rng.integers(len(out)))].id, DependencyCondition.SUCCESS),)
        out.append(
            Job(
                id=f"job-{i:06d}",
                name=f"job-{i:06d}",
                team=team,
                tier=tier,
                resources=res,
                work=Work(reference_hours=work),
                submitted_at=BENCH_NOW - timedelta(minutes=float(rng.uniform(0, 600))),
                seq=i,
                deadline=deadline,
                budget_usd=work * 4.0 if rng.random() < 0.2 else None,
                depends_on=deps,
                spot=SpotSettings(allowed=spot),
                incremental_reference_hours=work / 4 if rng.random() < 0.2 else None,
                data=DataSource(
                    str(rng.choice(["aws/us-east-1", "gcp/us-central1"])),
                    float(rng.uniform(10, 500)),
                )
                if rng.random() < 0.3
                else None,
            )
        )
        expected_by_team[team] += work * 1.2
    budgets, spend = [], []
    for team in team_names:
        limit = Decimal(int(expected_by_team[team] * 2.5 + 100))
        budgets.append(
            Budget(
                f"{team}-monthly",
                Scope(ScopeKind.TEAM, team),
                limit,
                emergency_reserve_usd=limit / 10,
            )
        )
        spent = limit * Decimal(str(round(float(rng.uniform(0.3, 0.6)), 2)))
        spend.append(SpendRecord(team, spent, BENCH_NOW - timedelta(hours=12)))
    done = {d.job for j in out for d in j.depends_on}
    out = [
        dataclasses.replace(j, state=JobState.SUCCEEDED)
        if j.id in done and rng.random() < 0.5
        else j
        for j in out
    ]
    return Snapshot(
        now=BENCH_NOW,
        jobs=tuple(out),
        offerings=offers,
        throughput=tuple(catalog.throughput.items()),
        egress=catalog.egress,
        budgets=tuple(budgets),
        spend=tuple(spend),
    )
