"""How long one policy's 90-day simulation takes (``make bench-sim``).

Runs ``simulate()`` — what ``budgeteer simulate … --policies NAME`` runs per policy — on each
bundled scenario, ``--repeat`` times, and prints wall and CPU seconds with the job, offering and
cycle counts. ``--dense`` adds a variant of the quiet quarter shaped like the issue's target
(~2,000 jobs over ~50 offerings: A100/T4/V100 only, drift ×3 and experiments ×2). The
first column, ``loop s``, times a fixed pure-Python loop just before each run: this shared box's
speed varies by ±30% from minute to minute, and that figure lets runs be compared.

    python benchmarks/sim_speed.py [--policy default] [--repeat 3] [--dense] [SCENARIO ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from budgeteer.sim.scenario import Scenario, build, load_scenario

ROOT = Path(__file__).parents[1]


def _loop_seconds() -> float:
    start = time.process_time()
    total = 0
    for i in range(5_000_000):
        total += i
    return time.process_time() - start


def _dense(scenario: Scenario) -> Scenario:
    """The quiet quarter with ~2,000 jobs over ~50 offerings."""
    w = scenario.workload
    drift = [d.model_copy(update={"per_day": d.per_day * 3}) for d in w.drift]
    experiments = [e.model_copy(update={"per_day": e.per_day * 2}) for e in w.experiments]
    catalog = scenario.catalog.model_copy(update={"accelerators": ["A100", "T4", "V100"]})
    return scenario.model_copy(
        update={
            "name": f"{scenario.name}-dense",
            "catalog": catalog,
            "workload": w.model_copy(update={"drift": drift, "experiments": experiments}),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", type=Path)
    parser.add_argument("--policy", default="default")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dense", action="store_true")
    args = parser.parse_args()
    paths = args.scenarios or sorted((ROOT / "scenarios").glob("*.yaml"))
    scenarios = [load_scenario(p) for p in paths]
    if args.dense:
        scenarios.append(_dense(load_scenario(ROOT / "scenarios" / "quiet-quarter.yaml")))
    print(f"policy {args.policy}, {args.repeat} runs each")
    print("| scenario | jobs | offerings | cycles | loop s | wall s (median, runs) | CPU s |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for scenario in scenarios:
        built = build(scenario)
        walls: list[float] = []
        cpus: list[float] = []
        loops: list[float] = []
        cycles = 0
        for _ in range(args.repeat):
            loops.append(_loop_seconds())
            wall, cpu = time.perf_counter(), time.process_time()
            run = built.run(args.policy)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            cycles = run.cycles
        runs = ", ".join(f"{w:.1f}" for w in walls)
        print(
            f"| {scenario.name} | {len(built.arrivals):,} | {len(built.catalog.offerings)} | "
            f"{cycles:,} | {statistics.median(loops):.2f} | {statistics.median(walls):.1f} "
            f"({runs}) | {statistics.median(cpus):.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
