"""The replay suite on markets that are the model: how close to the omniscient optimum the
decider gets when it knows the market's chain, on synthetic markets and on the real traces.

``default`` reads spot as a semi-Markov process: the hazard of an up or a down period ending, by
its age, in the age buckets of :data:`~budgeteer.core.spot.estimate.BUCKET_EDGES`. On the real
traces it ends 5–6% above the optimum; sessions 16–34 asked how much of that a better estimate
would recover. This script asks the other way round: what does the decider reach when there is
nothing left to estimate? For each trace of the suite it fits the chain on the whole trace, per
tick (:func:`~budgeteer.core.spot.estimate.estimate` with a step of one tick), and draws a
synthetic availability series of the trace's length from those hazards: a period that has lasted
``L`` ticks ends there with the hazard of the bucket ``L`` is in, then the other side begins. It
replays the suite's 720 runs (the jobs, starts, prices and seed of ``bench deadline-spot-suite``)
on the synthetic series under:

- ``optimal``: the omniscient optimum;
- ``default``: as shipped, learning the synthetic market from its own history as it goes;
- ``known``: the same decider given the chain estimated once on a series ``--known-factor``
  times longer drawn from the same hazards (the prior then weighs nothing): the best chain of
  its own form for that market, never re-estimated;
- ``known-mdp``: ``known`` without the flicker hold and the proven-spot rule, which were made
  for what the real traces hold beyond the chain: the MDP and its safety net alone.

``--real`` replays the real traces instead, ``known`` then being the chain fitted on each whole
trace — the run's own future included: a yardstick, not a policy. ``--edges`` sets other age
buckets (in changeovers) for the draws and every decider alike. ``--history-days`` draws that
many days more of each synthetic market before it (the runs' starts move with them), so that
every run begins with at least that much history — as on a market seeded from a recording
(``market_seeds:`` in the service's config). ``--rows`` writes each run's costs as JSON.

    python benchmarks/spot_synthetic.py [--seed 0] [--real] [--edges 0,1,2,6] [--history-days 28]
        [--rows out.json]

About 9 minutes on two processes here (5 with ``--real``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from budgeteer.cli.spot import FRACTIONS, _suite_plan, suite_traces
from budgeteer.core.spot import Market, SpotJob, run_policy
from budgeteer.core.spot.decide import ReplayDecider, TableMemo, step_ticks
from budgeteer.core.spot.estimate import estimate, estimate_availability, periods_of
from budgeteer.core.spot.replay import replay

#: the modules whose constants a run sets (``budgeteer.core.spot.decide``, the attribute, is the
#: function of that name)
decide_module = importlib.import_module("budgeteer.core.spot.decide")
estimate_module = importlib.import_module("budgeteer.core.spot.estimate")

Plan = list[tuple[str, Market, SpotJob, float, int]]


@dataclass(slots=True)
class World:
    """One worker's runs: the plan (on synthetic markets, or the real ones) and, by zone, the
    series the known chain is fitted on."""

    plan: Plan = field(default_factory=list)
    known_source: dict[str, NDArray[np.bool_]] = field(default_factory=dict)


#: this process's world (filled by :func:`_init` in each worker)
_WORLD = World()


def hazards_per_tick(
    available: NDArray[np.bool_], gap_hours: float, changeover_hours: float
) -> tuple[NDArray[np.float64], NDArray[np.float64], tuple[float, ...]]:
    """The fitted chain's end hazards per tick, up side and down side, by age bucket, with the
    buckets' lower edges in ticks."""
    av = estimate(periods_of(available, gap_hours), gap_hours, changeover_hours)
    nb = len(av.bucket_steps)
    up = np.array([av.transition[b, nb] for b in range(nb)])
    down = np.array([av.transition[nb + b, 0] for b in range(nb)])
    return up, down, av.bucket_steps


def draw(
    n: int,
    first_up: bool,
    up_h: NDArray[np.float64],
    down_h: NDArray[np.float64],
    edges: tuple[float, ...],
    rng: np.random.Generator,
) -> NDArray[np.bool_]:
    """``n`` ticks of the semi-Markov process: a period of ``L`` ticks so far ends there with
    the hazard of the bucket ``L`` is in (lengths from 1 tick), then the other side begins."""
    lows = [max(1, int(np.ceil(e - 1e-9))) for e in edges]
    out = np.empty(n, dtype=np.bool_)
    at, up = 0, first_up
    while at < n:
        hz = up_h if up else down_h
        length = 0
        for b, lo in enumerate(lows):
            hi = lows[b + 1] if b + 1 < len(lows) else None
            start = max(lo, 1)
            x = int(rng.geometric(hz[b]))  # trials to the end, ≥ 1
            if hi is None or start + x - 1 < hi:
                length = start + x - 1
                break
        out[at : at + length] = up
        at += length
        up = not up
    return out


def synthetic_plan(
    plan: Plan, seed: int, factor: int, history_days: float = 0.0
) -> tuple[Plan, dict[str, NDArray[np.bool_]]]:
    """The plan with each trace's availability replaced by a draw from its fitted chain, and a
    long draw per zone (the known chain's source)."""
    by_zone: dict[str, tuple[Market, int]] = {}
    long: dict[str, NDArray[np.bool_]] = {}
    out: Plan = []
    for zone, market, job, frac, start in plan:
        if zone not in by_zone:
            g = market.gap_hours
            up_h, down_h, edges = hazards_per_tick(market.available, g, job.changeover_hours)
            rng = np.random.default_rng(seed + zlib.crc32(zone.encode()))
            n = len(market)
            series = draw(n, bool(market.available[0]), up_h, down_h, edges, rng)
            long[zone] = draw(n * factor, True, up_h, down_h, edges, rng)
            # a seed: more of the same market before the series, at its first price
            extra = round(history_days * 24 / g)
            before = draw(extra, True, up_h, down_h, edges, rng)
            prices = np.concatenate(
                [np.full(extra, market.spot_usd_per_hour[0]), market.spot_usd_per_hour]
            )
            by_zone[zone] = (Market(np.concatenate([before, series]), prices, g), extra)
        seeded, extra = by_zone[zone]
        out.append((zone, seeded, job, frac, start + extra))
    return out, long


def _init(
    traces: str,
    prices: str,
    seed: int,
    factor: int,
    edges: str | None,
    real: bool,
    history_days: float,
) -> None:
    if edges:  # the generator's and the deciders' age buckets alike
        estimate_module.BUCKET_EDGES = tuple(float(e) for e in edges.split(","))
    files = suite_traces(Path(traces))
    plan, _ = _suite_plan(files, Path(prices), 3.06, 0)
    if real:  # the real traces, the known chain fitted on each whole trace (its future too)
        _WORLD.plan, _WORLD.known_source = plan, {z: m.available for z, m, *_ in plan}
    else:
        _WORLD.plan, _WORLD.known_source = synthetic_plan(plan, seed, factor, history_days)


def _known(
    zone: str, market: Market, job: SpotJob, start: int, rules: bool = True
) -> tuple[float, bool]:
    """The decider on the known chain; ``rules`` False: without the flicker hold and the
    proven-spot rule (the MDP and its safety net alone)."""
    g = market.gap_hours
    k = step_ticks(job.changeover_hours, g, job.work_hours, job.deadline_hours - job.work_hours)
    chain = estimate_availability(_WORLD.known_source[zone], g, k, job.changeover_hours)
    price = float(market.spot_usd_per_hour[start - 1])
    rule_names = ("FLICKER_CHANGEOVERS", "PROVEN_CHANGEOVERS")
    kept = [getattr(decide_module, name) for name in rule_names]
    if not rules:  # no hold (no uptime is shorter than 0), no spot ever proven
        for name, off in zip(rule_names, (0.0, math.inf), strict=True):
            setattr(decide_module, name, off)
    try:
        r = replay(market, start, job, ReplayDecider(job, chain, price, k, TableMemo(size=2)))
    finally:
        for name, value in zip(rule_names, kept, strict=True):
            setattr(decide_module, name, value)
    return r.cost_usd, r.met_deadline


def _one(i: int) -> dict[str, Any]:
    zone, market, job, frac, start = _WORLD.plan[i]
    row: dict[str, Any] = {"trace": zone, "fraction": frac, "start": start}
    for name in ("optimal", "default"):
        r = run_policy(market, start, job, name)
        row[name] = (r.cost_usd, r.met_deadline)
    row["known"] = _known(zone, market, job, start)
    row["known-mdp"] = _known(zone, market, job, start, rules=False)
    return row


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic draws")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--known-factor", type=int, default=20)
    ap.add_argument(
        "--edges",
        help="age buckets in changeovers, comma-separated, for the generator and the deciders "
        "alike (default: the shipped 0,1,2,6)",
    )
    ap.add_argument(
        "--real",
        action="store_true",
        help="replay the real traces instead; the known chain is fitted on each whole trace",
    )
    ap.add_argument(
        "--history-days",
        type=float,
        default=0.0,
        help="draw this many days more of each synthetic market before it (starts move with "
        "them): every run then begins with at least that much history, as a seeded market does",
    )
    ap.add_argument("--traces", default="tests/data/spot-traces")
    ap.add_argument("--prices", default="tests/data/spot-prices/v100_spot_prices.json")
    ap.add_argument("--rows", type=Path, help="write each run's costs here (JSON)")
    args = ap.parse_args(argv)
    init = (
        args.traces,
        args.prices,
        args.seed,
        args.known_factor,
        args.edges,
        args.real,
        args.history_days,
    )
    _init(*init)
    plan = _WORLD.plan
    with Pool(args.processes, initializer=_init, initargs=init) as pool:
        rows = pool.map(_one, range(len(plan)), 4)
    if args.rows:
        args.rows.write_text(json.dumps(rows))
    real = {z: m for z, m, *_ in _load_real(args.traces, args.prices)}
    what = "the real traces" if args.real else f"synthetic draw seed {args.seed}"
    print(f"{what}; {len(rows)} runs; age buckets {estimate_module.BUCKET_EDGES}")
    print("| policy | all | " + " | ".join(str(f) for f in FRACTIONS) + " | missed |")
    print("|---|---:|" + "---:|" * len(FRACTIONS) + "---:|")
    for name in ("default", "known", "known-mdp"):
        ratio = [r[name][0] / r["optimal"][0] for r in rows]
        cells = [statistics.fmean(ratio)]
        for f in FRACTIONS:
            cells.append(
                statistics.fmean(x for x, r in zip(ratio, rows, strict=True) if r["fraction"] == f)
            )
        missed = sum(not r[name][1] for r in rows)
        print(f"| {name} | " + " | ".join(f"{c:.4f}" for c in cells) + f" | {missed} |")
    print()
    print("| trace | spot share real | synthetic | default | known | known-mdp |")
    print("|---|---:|---:|---:|---:|---:|")
    for zone in dict.fromkeys(r["trace"] for r in rows):
        mine = [r for r in rows if r["trace"] == zone]
        syn = next(m for z, m, *_ in plan if z == zone)
        cells = [
            statistics.fmean(r[n][0] / r["optimal"][0] for r in mine)
            for n in ("default", "known", "known-mdp")
        ]
        print(
            f"| {zone} | {real[zone].available.mean():.3f} | {syn.available.mean():.3f} | "
            + " | ".join(f"{c:.4f}" for c in cells)
            + " |"
        )


def _load_real(traces: str, prices: str) -> Plan:
    plan, _ = _suite_plan(suite_traces(Path(traces)), Path(prices), 3.06, 0)
    return plan


if __name__ == "__main__":
    main()
