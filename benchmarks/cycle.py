"""Time ``plan_cycle`` over generated queues and print a table (``make bench``).

Runs ``budgeteer bench cycle`` for 1k, 10k and 50k jobs × 100 and 500 offerings (median of
several repetitions), then compares the MILP with the greedy fallback on smaller queues where
capacity is contended. Prints measured numbers only; nothing here is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys


def bench(
    jobs: int,
    offerings: int,
    repeats: int,
    solver: str = "auto",
    env: dict[str, str] | None = None,
) -> dict[str, object]:
    """One ``budgeteer bench cycle`` run as a subprocess (fresh interpreter each time; ``env``
    for another checkout's code). Older commits printed solver noise before the JSON line."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "budgeteer",
            "bench",
            "cycle",
            "--jobs",
            str(jobs),
            "--offerings",
            str(offerings),
            "--repeats",
            str(repeats),
            "--solver",
            solver,
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("{"))
    result: dict[str, object] = json.loads(line)
    return result


def main() -> None:
    """Print the timing table and the MILP-vs-greedy table."""
    print("| jobs | offerings | median s | min s | admitted | held | solver | MILP vars |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    for jobs in (1_000, 10_000, 50_000):
        for offerings in (100, 500):
            r = bench(jobs, offerings, repeats=5 if jobs <= 10_000 else 3)
            print(
                f"| {jobs} | {offerings} | {r['median_seconds']} | {r['min_seconds']} | "
                f"{r['admitted']} | {r['held']} | {r['solver']} | {r['milp_variables']} |"
            )
    print()
    print(
        "| jobs | offerings | placed greedy | placed plan | cost greedy $ | cost plan $ |"
        " plan vs greedy |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for jobs in (200, 1_000, 5_000):
        greedy = bench(jobs, 100, 1, "greedy")
        auto = bench(jobs, 100, 1, "auto")
        g_cost, a_cost = float(greedy["planned_cost_usd"]), float(auto["planned_cost_usd"])  # type: ignore[arg-type]
        print(
            f"| {jobs} | 100 | {greedy['admitted']} | {auto['admitted']} | {g_cost:,.2f} | "
            f"{a_cost:,.2f} | {100 * (a_cost - g_cost) / g_cost:+.2f}% |"
        )


if __name__ == "__main__":
    main()
