"""Where a policy's excess over the omniscient optimum goes, run by run, at one C/R.

Replays the suite's runs at ``--fraction`` (the plan of ``benchmarks/spot_suite_fast.py``)
under ``--policy`` and under the optimum, and prints per trace the mean cost ÷ optimal and
what the policy did differently on average: on-demand hours, spot hours, changeovers (moves
into spot or on-demand) and preemptions, each as policy − optimum; then the worst runs. To
read one of those runs tick by tick, replay it with ``budgeteer bench deadline-spot`` (its
start is printed).

    python benchmarks/spot_gap.py [--fraction 0.9] [--policy default] [--worst 10]

About a minute for one fraction on two processes here.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import Pool

from budgeteer.core.spot import Mode, RunResult, run_policy
from spot_suite_fast import _PLAN, _init, _load


@dataclass(frozen=True, slots=True)
class Run:
    """One run's cost and mix under a policy."""

    cost: float
    on_demand: float
    spot: float
    changeovers: int
    preemptions: int

    @staticmethod
    def of(r: RunResult) -> Run:
        moves = sum(1 for _, mode in r.decisions if mode is not Mode.IDLE)
        return Run(r.cost_usd, r.on_demand_hours, r.spot_hours, moves, r.preemptions)


def _both(args: tuple[int, str]) -> tuple[int, Run, Run]:
    i, name = args
    _, market, job, _, start = _PLAN[i]
    return (
        i,
        Run.of(run_policy(market, start, job, name)),
        Run.of(run_policy(market, start, job, "optimal")),
    )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fraction", type=float, default=0.9)
    ap.add_argument("--policy", default="default")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--worst", type=int, default=10)
    ap.add_argument("--traces", default="tests/data/spot-traces")
    ap.add_argument("--prices", default="tests/data/spot-prices/v100_spot_prices.json")
    args = ap.parse_args(argv)
    plan = _load(args.traces, args.prices)
    if not plan:
        ap.error(f"--traces: no suite traces under {args.traces} (run from the repository root)")
    chosen = [i for i, p in enumerate(plan) if abs(p[3] - args.fraction) < 1e-9]
    if not chosen:
        ap.error(f"--fraction: no runs at C/R {args.fraction} (the suite has 0.9, 0.8, 0.67, 0.5)")
    with Pool(args.processes, initializer=_init, initargs=(args.traces, args.prices)) as pool:
        results = pool.map(_both, [(i, args.policy) for i in chosen], 2)
    print(f"{args.policy} against the optimum at C/R {args.fraction}: {len(results)} runs")
    print("| trace | cost ÷ optimal | Δ on-demand h | Δ spot h | Δ changeovers | Δ preemptions |")
    print("|---|---:|---:|---:|---:|---:|")
    zones = sorted({plan[i][0] for i, _, _ in results})
    for zone in [*zones, "all"]:
        mine = [(p, o) for i, p, o in results if zone in ("all", plan[i][0])]
        print(
            f"| {zone} | {statistics.fmean(p.cost / o.cost for p, o in mine):.4f} | "
            f"{statistics.fmean(p.on_demand - o.on_demand for p, o in mine):+.2f} | "
            f"{statistics.fmean(p.spot - o.spot for p, o in mine):+.2f} | "
            f"{statistics.fmean(p.changeovers - o.changeovers for p, o in mine):+.1f} | "
            f"{statistics.fmean(p.preemptions - o.preemptions for p, o in mine):+.1f} |"
        )
    print(f"worst {args.worst} (trace, start: ratio; on-demand h, changeovers policy / optimum)")
    worst = sorted(results, key=lambda r: r[1].cost / r[2].cost, reverse=True)[: args.worst]
    for i, p, o in worst:
        print(
            f"  {plan[i][0]}, start {plan[i][4]}: {p.cost / o.cost:.3f}; "
            f"{p.on_demand:.1f} / {o.on_demand:.1f} h, {p.changeovers} / {o.changeovers}"
        )


if __name__ == "__main__":
    main()
