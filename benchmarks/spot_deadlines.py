"""Where two policies' costs part, job by job: which deadlines each kept, and what each paid.

Runs a scenario under two policies (by default the live spot decider, ``default``, against
``default-planner-spot``) and, for every job whose deadline fell inside the horizon, compares
its ledger and whether it finished by its deadline. Prints the jobs on which the first policy
spent more than ``--threshold`` dollars more (or less), split by which policy kept the deadline,
and the families that make most of the difference. Nothing is asserted; the simulation is
deterministic, so the figures are the same run after run (about 8 minutes on the quiet quarter).

    python benchmarks/spot_deadlines.py scenarios/quiet-quarter.yaml
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

from budgeteer.domain.job import JobState
from budgeteer.sim.scenario import Built, build, load_scenario

Row = tuple[str, str, bool, Decimal]  # family, tier, deadline kept, spent


def _rows(built: Built, policy: str) -> dict[str, Row]:
    run = built.run(policy)
    store = run.store
    spent: dict[str, Decimal] = defaultdict(Decimal)
    for entry in store.ledger():
        spent[entry.job_id] += entry.amount_usd
    rows: dict[str, Row] = {}
    for job in store.jobs():
        if job.deadline is None or job.deadline > built.end:
            continue
        kept = job.state is JobState.SUCCEEDED and store.events(job.id)[-1].at <= job.deadline
        rows[job.id] = (job.name, job.tier.name, kept, spent[job.id])
    return rows


def main() -> None:
    """Print the comparison (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--policies", default="default,default-planner-spot")
    parser.add_argument("--threshold", type=Decimal, default=Decimal(20))
    args = parser.parse_args()
    first, second = args.policies.split(",")
    built = build(load_scenario(args.scenario))
    a, b = _rows(built, first), _rows(built, second)
    both = sorted(set(a) & set(b))
    print(f"{args.scenario}: {first} vs {second}, {len(both)} jobs due in the horizon")
    for label, sign in (("more", 1), ("less", -1)):
        count: Counter[tuple[bool, bool]] = Counter()
        usd: dict[tuple[bool, bool], Decimal] = defaultdict(Decimal)
        for job in both:
            diff = (a[job][3] - b[job][3]) * sign
            if diff > args.threshold:
                key = (a[job][2], b[job][2])
                count[key] += 1
                usd[key] += diff
        print(f"\n{first} spent > ${args.threshold} {label} on {sum(count.values())} jobs:")
        for (kept_a, kept_b), n in sorted(count.items(), key=lambda kv: -usd[kv[0]]):
            print(
                f"  deadline kept by {first}: {kept_a!s:5}  by {second}: {kept_b!s:5}  "
                f"{n:4d} jobs  ${usd[(kept_a, kept_b)]:,.2f}"
            )
    family: dict[tuple[str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 4)
    for job in both:
        name, tier, kept_a, spent_a = a[job]
        f = family[(name, tier)]
        f[0] += kept_a
        f[1] += b[job][2]
        f[2] += spent_a
        f[3] += b[job][3]
    print(f"\nfamilies by extra spend ({first} − {second}):")
    print("  family                         tier   kept    kept      spent      spent     extra")
    for (name, tier), f in sorted(family.items(), key=lambda kv: kv[1][3] - kv[1][2])[:10]:
        print(
            f"  {name:30s} {tier}  {int(f[0]):6d}  {int(f[1]):6d}  {f[2]:9,.0f}  {f[3]:9,.0f}  "
            f"{f[2] - f[3]:+8,.0f}"
        )


if __name__ == "__main__":
    main()
