"""Time today's ``plan_cycle`` against an earlier commit's, alternately, on the same generated
queue (``budgeteer bench cycle``: same generator, same catalog), and print the ratio.

    python benchmarks/cycle_paired.py --baseline /path/to/old/checkout/src [--pairs 5]

Each run is a fresh interpreter with one repetition: a cold plan, no memo of an earlier one.
Runs alternate (old, new, old, new …) so that drift of the machine hits both alike. Prints
measured numbers only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cycle import bench


def run(src: str | None, jobs: int, offerings: int) -> dict[str, float]:
    """One cold ``bench cycle`` in a fresh interpreter, with ``src`` first on the path."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    result = bench(jobs, offerings, repeats=1, env=env)
    return {k: float(v) for k, v in result.items() if isinstance(v, int | float)}


def main() -> None:
    """Print each pair and the medians."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="the src/ folder of the older checkout")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--offerings", type=int, default=500)
    args = ap.parse_args()
    old_t, new_t = [], []
    print("| pair | baseline s | today s | ratio | admitted (b/t) | planned $ (b/t) |")
    print("|---:|---:|---:|---:|---|---|")
    for i in range(args.pairs):
        old = run(args.baseline, args.jobs, args.offerings)
        new = run(None, args.jobs, args.offerings)
        old_t.append(old["median_seconds"])
        new_t.append(new["median_seconds"])
        print(
            f"| {i + 1} | {old['median_seconds']:.3f} | {new['median_seconds']:.3f} | "
            f"{new['median_seconds'] / old['median_seconds']:.2f} | "
            f"{old['admitted']:.0f}/{new['admitted']:.0f} | "
            f"{old['planned_cost_usd']:,.0f}/{new['planned_cost_usd']:,.0f} |"
        )
    mo, mn = statistics.median(old_t), statistics.median(new_t)
    print(f"\nmedian baseline {mo:.3f} s, today {mn:.3f} s, ratio {mn / mo:.2f}")


if __name__ == "__main__":
    main()
