"""How long the spot decider's MDP solve takes, on inputs of the sizes the service solves.

Draws ``--count`` solve inputs from a fixed seed: chains estimated from random histories,
work of 2–80 steps, slack of 10–118 steps of lag, changeovers of one or two steps (the dense
simulation's 10th to 99th percentiles). Prints the seconds for all of them, ``--rounds`` times.
Run it against another checkout with ``PYTHONPATH=/other/src`` to compare two solves.

    python benchmarks/mdp_solve.py [--count 400] [--rounds 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import time

from budgeteer.core.spot.estimate import Period, estimate
from budgeteer.core.spot.mdp import solve


def _inputs(count: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for _ in range(count):
        periods = [
            Period(k % 2 == 0, rng.expovariate(rng.uniform(0.3, 5.0)), True)
            for k in range(rng.randint(0, 400))
        ]
        out.append(
            {
                "work_steps": rng.uniform(2.0, 80.0),
                "max_lag": rng.randint(10, 118),
                "changeover_steps": rng.choice([1, 1, 1, 2]),
                "spot_cost": rng.uniform(0.2, 2.0),
                "od_cost": rng.uniform(1.0, 6.0),
                "avail": estimate(periods, 0.05, rng.uniform(0.05, 0.3)),
                "step_ticks": 1,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    inputs = _inputs(args.count, args.seed)
    steps = sum(int(i["work_steps"]) + int(i["max_lag"]) for i in inputs)  # type: ignore[call-overload]
    print(f"{args.count} solves, about {steps:,} steps in all")
    print("| round | seconds | ms per solve |")
    print("|---:|---:|---:|")
    for r in range(1, args.rounds + 1):
        start = time.perf_counter()
        for i in inputs:
            solve(**i)  # type: ignore[arg-type]
        took = time.perf_counter() - start
        print(f"| {r} | {took:.3f} | {1000 * took / args.count:.2f} |")


if __name__ == "__main__":
    main()
