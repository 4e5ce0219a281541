"""Two policies on one scenario, job by job: where one spends more than the other, and why.

``budgeteer simulate`` reports each policy's totals. When two policies differ by a percent, the
totals do not say whether one paid more for the same jobs or finished more jobs with the money,
nor which jobs moved. This script runs the scenario under both policies (the service's own loop,
``Built.run``, as ``budgeteer simulate`` does) and prints:

- the totals (cost, jobs completed, SLA met per tier);
- the cost of the jobs *both* completed, and of those only one of them completed;
- per tier, the jobs whose deadline one met and the other did not (the first few named, with
  their fate under the other policy);
- the job families (a job's name less its run number) whose cost moved most, both ways;
- with ``--show NAME``, the events of the runs of that family that moved most.

Example (about 2 minutes)::

    python benchmarks/sim_compare.py scenarios/drift-storm.yaml default default-planner-spot
    python benchmarks/sim_compare.py dense default default-planner-spot --show recs-validate

``dense`` is the quiet quarter's dense variant (``benchmarks/sim_speed.py``). It asserts nothing
(a benchmark); the jobs are matched by id (a scenario's arrivals are the same under every policy).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from multiprocessing import Pool
from pathlib import Path

from budgeteer.domain.job import JobState
from budgeteer.sim.metrics import summary
from budgeteer.sim.scenario import build
from budgeteer.sim.schema import Scenario, load_scenario

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_speed import ROOT, _dense

ZERO = Decimal(0)
_RUN_NUMBER = re.compile(r"-\d+$")


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job's fate under one policy."""

    name: str
    tier: str
    state: str
    deadline: datetime | None
    finished: datetime | None
    cost: Decimal
    events: tuple[tuple[datetime, str, str], ...]

    @property
    def met(self) -> bool:
        return (
            self.state == JobState.SUCCEEDED.value
            and self.deadline is not None
            and self.finished is not None
            and self.finished <= self.deadline
        )

    @property
    def family(self) -> str:
        return _RUN_NUMBER.sub("", self.name)


@dataclass(frozen=True, slots=True)
class Outcome:
    totals: dict[str, object]
    jobs: dict[str, JobRow]


def _scenario(arg: str) -> Scenario:
    if arg == "dense":
        return _dense(load_scenario(ROOT / "scenarios" / "quiet-quarter.yaml"))
    return load_scenario(Path(arg))


def run(arg: str, policy: str) -> Outcome:
    """One policy's run, job by job (the ledger's amounts summed per job, idle included)."""
    built = build(_scenario(arg))
    result = built.run(policy)
    store = result.store
    cost: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for entry in store.ledger():
        cost[entry.job_id] += entry.amount_usd
    jobs: dict[str, JobRow] = {}
    for job in store.jobs():
        events = store.events(job.id)
        jobs[job.id] = JobRow(
            name=job.name,
            tier=job.tier.name,
            state=job.state.value,
            deadline=job.deadline,
            finished=events[-1].at if events else None,
            cost=cost[job.id],
            events=tuple((e.at, e.to_state.value, e.cause) for e in events),
        )
    return Outcome(summary(result, built), jobs)


def _usd(x: Decimal) -> str:
    return f"${float(x):,.2f}"


def compare(a: Outcome, b: Outcome, names: tuple[str, str], show: str | None, top: int) -> None:
    na, nb = names
    for label, o in ((na, a), (nb, b)):
        sla = o.totals["sla_met_fraction"]
        assert isinstance(sla, dict)
        tiers = " / ".join(f"{k} {v:.3f}" for k, v in sla.items() if v is not None)
        print(
            f"{label:24s} cost ${o.totals['cost_usd']:,.2f}  completed "
            f"{o.totals['jobs_completed']}  SLA {tiers}"
        )
    ids = sorted(set(a.jobs) & set(b.jobs))
    if len(ids) != len(a.jobs) or len(ids) != len(b.jobs):
        print(f"note: {len(a.jobs)} and {len(b.jobs)} jobs, {len(ids)} in common")
    done = JobState.SUCCEEDED.value

    def spent(o: Outcome, keys: list[str]) -> Decimal:
        return sum((o.jobs[k].cost for k in keys), ZERO)

    both = [k for k in ids if a.jobs[k].state == done and b.jobs[k].state == done]
    only_a = [k for k in ids if a.jobs[k].state == done and b.jobs[k].state != done]
    only_b = [k for k in ids if b.jobs[k].state == done and a.jobs[k].state != done]
    neither = [k for k in ids if a.jobs[k].state != done and b.jobs[k].state != done]
    print(f"\njob cost, {na} | {nb}:")
    print(f"  completed by both ({len(both)}): {_usd(spent(a, both))} | {_usd(spent(b, both))}")
    print(
        f"  completed by {na} only ({len(only_a)}): {_usd(spent(a, only_a))} | "
        f"{_usd(spent(b, only_a))}"
    )
    print(
        f"  completed by {nb} only ({len(only_b)}): {_usd(spent(a, only_b))} | "
        f"{_usd(spent(b, only_b))}"
    )
    print(
        f"  completed by neither ({len(neither)}): {_usd(spent(a, neither))} | "
        f"{_usd(spent(b, neither))}"
    )
    print("\ndeadlines met by one policy only, per tier:")
    for tier in ("P0", "P1", "P2", "P3"):
        in_a = [k for k in ids if a.jobs[k].tier == tier and a.jobs[k].met and not b.jobs[k].met]
        in_b = [k for k in ids if b.jobs[k].tier == tier and b.jobs[k].met and not a.jobs[k].met]
        print(f"  {tier}: {na} only {len(in_a)}, {nb} only {len(in_b)}")
        for label, keys, other in ((na, in_a, b), (nb, in_b, a)):
            for k in keys[:top]:
                j = other.jobs[k]
                print(
                    f"      met by {label} only: {j.name} (due {j.deadline:%m-%d %H:%M}); "
                    f"under the other {j.state}, last event {j.finished:%m-%d %H:%M}"
                )
    families: dict[str, list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
    for k in ids:
        families[a.jobs[k].family][0] += a.jobs[k].cost
        families[a.jobs[k].family][1] += b.jobs[k].cost
    moved = sorted(families.items(), key=lambda kv: kv[1][0] - kv[1][1])
    print(f"\nfamilies whose cost moved most ({na} − {nb}):")
    for name, (x, y) in moved[:top] + moved[-top:]:
        print(f"  {name:36s} {float(x):11,.2f} {float(y):11,.2f} {float(x - y):+10,.2f}")
    if show:
        runs = sorted(
            (k for k in ids if a.jobs[k].family == show),
            key=lambda k: abs(a.jobs[k].cost - b.jobs[k].cost),
            reverse=True,
        )
        for k in runs[:top]:
            print()
            for label, o in ((na, a), (nb, b)):
                j = o.jobs[k]
                print(f"{label}: {j.name} {j.state}, due {j.deadline}, cost {_usd(j.cost)}")
                for at, state, cause in j.events:
                    print(f"    {at:%m-%d %H:%M} {state:13s} {cause[:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", help="a scenario file, or 'dense' (the dense variant)")
    parser.add_argument("a", help="a policy (budgeteer simulate's names)")
    parser.add_argument("b", help="another policy")
    parser.add_argument("--show", help="a job family whose runs' events to print")
    parser.add_argument("--top", type=int, default=6, help="rows per list (default 6)")
    args = parser.parse_args()
    with Pool(2) as workers:
        a, b = workers.starmap(run, [(args.scenario, args.a), (args.scenario, args.b)])
    compare(a, b, (args.a, args.b), args.show, args.top)


if __name__ == "__main__":
    main()
