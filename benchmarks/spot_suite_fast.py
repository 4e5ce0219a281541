"""The replay suite for one policy, on several processes, with the optimum cached: for trying a
variant of ``default`` in minutes instead of half an hour.

``budgeteer bench deadline-spot-suite`` replays the 720 runs (9 traces × 4 C/R × 20 starts)
under every policy on one process and solves the omniscient optimum each time. This script
replays the same runs (the same plan: ``cli.spot._suite_plan``, the same seed) under one
policy, on ``--processes`` workers, and reads the optimum's costs from ``--cache`` (solved and
written there on the first use). It prints the mean cost ÷ optimal overall and by C/R, the
missed deadlines, and per trace the share of the excess over the optimum; ``--rows`` writes
each run's ratio as JSON (to compare two variants run by run).

To measure a patched copy of the code against ``main``, point Python at it::

    PYTHONPATH=/tmp/variant/src python benchmarks/spot_suite_fast.py --rows /tmp/variant.json

About 4 minutes for ``default`` on two processes here (plus 7 for the optimum, once).
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
from collections.abc import Sequence
from multiprocessing import Pool
from multiprocessing.pool import Pool as Workers
from pathlib import Path

from budgeteer.cli.spot import _suite_plan, suite_traces
from budgeteer.core.spot import Market, SpotJob, run_policy

Plan = list[tuple[str, Market, SpotJob, float, int]]
#: the plan, loaded once in each worker process (filled in place: no ``global``)
_PLAN: Plan = []


def _load(traces: str, prices: str) -> Plan:
    files = suite_traces(Path(traces))
    plan, _ = _suite_plan(files, Path(prices), 3.06, 0)
    return plan


def _init(traces: str, prices: str) -> None:
    _PLAN[:] = _load(traces, prices)


def _one(args: tuple[int, str]) -> tuple[int, float, bool]:
    i, name = args
    _, market, job, _, start = _PLAN[i]
    r = run_policy(market, start, job, name)
    return i, r.cost_usd, r.met_deadline


def _optimum(pool: Workers, n: int, cache: Path, plan: Plan) -> dict[int, float]:
    key = [(z, f, s) for z, _, _, f, s in plan]
    if cache.exists():
        doc = pickle.loads(cache.read_bytes())
        if doc.get("key") == key:
            return dict(doc["costs"])
    costs = {i: c for i, c, _ in pool.map(_one, [(i, "optimal") for i in range(n)], 4)}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps({"key": key, "costs": costs}))
    return costs


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="default")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--traces", default="tests/data/spot-traces")
    ap.add_argument("--prices", default="tests/data/spot-prices/v100_spot_prices.json")
    ap.add_argument("--cache", type=Path, default=Path(".cache/spot-suite-optimal.pickle"))
    ap.add_argument("--rows", type=Path, help="write each run's cost ÷ optimal here (JSON)")
    args = ap.parse_args(argv)
    plan = _load(args.traces, args.prices)
    n = len(plan)
    with Pool(args.processes, initializer=_init, initargs=(args.traces, args.prices)) as pool:
        optimum = _optimum(pool, n, args.cache, plan)
        results = pool.map(_one, [(i, args.policy) for i in range(n)], 2)
    rows = [
        (plan[i][0], plan[i][3], plan[i][4], cost / optimum[i], met) for i, cost, met in results
    ]
    if args.rows:
        args.rows.write_text(json.dumps(rows))
    fractions = sorted({r[1] for r in rows}, reverse=True)
    print(f"{args.policy}: {n} runs, mean cost ÷ optimal")
    print(f"  all    {statistics.fmean(r[3] for r in rows):.4f}")
    for f in fractions:
        print(f"  C/R {f:<4} {statistics.fmean(r[3] for r in rows if r[1] == f):.4f}")
    print(f"  missed deadlines: {sum(not r[4] for r in rows)}")
    excess = sum(r[3] - 1 for r in rows) or 1.0
    print("  by trace: mean ratio, share of the excess over the optimum")
    for zone in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == zone]
        share = sum(r[3] - 1 for r in mine) / excess
        print(f"    {zone:<22} {statistics.fmean(r[3] for r in mine):.4f}  {share:.2f}")


if __name__ == "__main__":
    main()
