"""What the replay suite's spot traces hold: period lengths, how much one period tells of the
next, and how availability moves with the time of day — the information an online estimate of
a market can use (session 19, issue 15).

Per trace: its length and tick, the share of ticks with spot, complete up and down periods
(count, mean and median hours); Spearman's rank correlation of an uptime with the uptime before
it, with the outage just before it, and with the sum of the three uptimes before it; and, by
3-hour block of the day counted from the trace's start (the traces do not give their start's
clock time), the share of ticks with spot and the preemptions per hour of spot.

Then, for the traces recorded side by side (same folder, same tick and length: the six V100
zones), whether a *sibling* zone's past says more of a zone's future than its own past — the
multi-zone pooling lead of issue 15. Every 12 hours from the eighth day on, the preemption rate
(up → down flips per hour of spot) over the next ``--window-hours`` is predicted from the four
weeks before (at most; the estimate's ``HISTORY_DAYS``; a third of a trace shorter than three
weeks) of the zone itself, of the other zones of its region, of all other zones pooled, and of
all zones pooled; printed: the median of |log(predicted ÷ actual)| per zone
(windows with at least one flip), and the correlation of the zones' availability.

Then whether short uptimes come in runs (session 26): per trace, the share of uptimes shorter
than two changeovers (the suite's 0.2 h in whole ticks) after a short uptime and after a long
one, and the mean uptime after each.

Then, for the traces recorded side by side, whether the siblings' state *now* tells a zone's
next flip (session 33): per trace, the preemptions per hour of spot and the recoveries per hour
of outage by how many of its sibling zones (same folder, tick and length) are down at the tick.

Then whether a calm market around a zone tells how long its established spot lasts (session
34): per trace recorded side by side, the preemptions per hour of spot that has lasted 2 h or
more, by the share of its siblings up 6 h or more at the tick.

Last, whether the spot price warns of preemptions (session 33): per trace with a price series
(the r5 traces' own, the V100 zones' from ``--prices``), how often the price changes, and the
preemptions per hour of spot in the hour after a rise, in the hour after a fall, and at other
times; and by quartile of the price in force::

    python benchmarks/spot_market_stats.py [--traces tests/data/spot-traces] [--block-hours 3]
        [--prices tests/data/spot-prices/v100_spot_prices.json]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from budgeteer.cli.spot import suite_traces, whole_ticks
from budgeteer.core.spot.estimate import HISTORY_DAYS, periods_of
from budgeteer.traces import load_price_series, load_trace


def _rank_corr(pairs: list[tuple[float, float]]) -> str:
    if len(pairs) < 3:
        return "  –  "
    xs, ys = zip(*pairs, strict=True)
    return f"{float(spearmanr(xs, ys)[0]):+.2f}"


def _flips_and_hours(a: np.ndarray, g: float) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative up → down flips and hours of spot, tick by tick (sums over any span by
    difference)."""
    flips = np.r_[0, np.cumsum(a[:-1] & ~a[1:])]
    hours = np.r_[0.0, np.cumsum(a[:-1]) * g]
    return flips, hours


def _rate(
    cum: Sequence[tuple[np.ndarray, np.ndarray]], ids: Sequence[int], a: int, b: int
) -> float:
    """Flips per hour of spot from tick ``a`` to ``b``, the zones ``ids`` pooled (NaN: none)."""
    f = sum(cum[i][0][b] - cum[i][0][a] for i in ids)
    h = sum(cum[i][1][b] - cum[i][1][a] for i in ids)
    return float(f / h) if h > 0 and f > 0 else math.nan


def _region(stem: str) -> str:
    """``us-west-2c_v100_1`` → ``us-west-2`` (the zone's letter dropped)."""
    return stem.split("_", maxsplit=1)[0][:-1]


def _side_by_side(
    paths: Sequence[Path],
) -> dict[tuple[Path, float, int], list[tuple[str, np.ndarray]]]:
    """The traces recorded side by side (same folder, tick and length), as (zone, availability)."""
    groups: dict[tuple[Path, float, int], list[tuple[str, np.ndarray]]] = {}
    for path in paths:
        tr = load_trace(path)
        a = np.array(tr.available) >= 1
        groups.setdefault((path.parent, tr.gap_hours, len(a)), []).append((path.stem, a))
    return groups


def siblings(paths: Sequence[Path], window_hours: float) -> None:
    """A zone's own past against its siblings' as a forecast of its preemption rate."""
    for (folder, g, n), zones in _side_by_side(paths).items():
        if len(zones) < 3:
            continue
        cum = [_flips_and_hours(a, g) for _, a in zones]
        step = round(12 / g)
        first = round(min(7 * 24, n * g / 3) / g)  # a third of a short trace as the first past
        span, past = round(window_hours / g), round(HISTORY_DAYS * 24 / g)
        if n - span <= first:
            print(f"\n{folder.name}: {len(zones)} zones, {n * g:.1f} h: too short for the forecast")
            continue
        print(
            f"\n{folder.name}: {len(zones)} zones side by side; the preemption rate over the next "
            f"{window_hours:g} h predicted from up to {HISTORY_DAYS:g} days before, "
            "median |log(predicted ÷ actual)| (windows):"
        )
        print(
            "zone                   own past  same region's past  siblings' past  all zones' past"
        )
        for z, (name, _) in enumerate(zones):
            errs: list[list[float]] = [[], [], [], []]
            for t in range(first, n - span, step):
                lo = max(0, t - past)
                actual = _rate(cum, [z], t, t + span)
                if math.isnan(actual):
                    continue
                others = [i for i in range(len(zones)) if i != z]
                region = [i for i in others if _region(zones[i][0]) == _region(name)]
                for k, ids in enumerate(([z], region, others, [z, *others])):
                    guess = _rate(cum, ids, lo, t)
                    if not math.isnan(guess):
                        errs[k].append(abs(math.log(guess / actual)))
            cells = [f"{np.median(e):.2f} ({len(e)})" if e else "–" for e in errs]
            print(f"{name[:22]:<22} {cells[0]:>10}  {cells[1]:>18}  {cells[2]:>14}  {cells[3]:>15}")
        corr = np.corrcoef(np.array([a for _, a in zones], dtype=float))
        print("availability correlation between zones:")
        for (name, _), row in zip(zones, corr, strict=True):
            print(f"{name[:22]:<22} {' '.join(f'{x:+.2f}' for x in row)}")


def flickers(paths: Sequence[Path]) -> None:
    """Whether an uptime shorter than two changeovers follows a short one more often."""
    print("\nshort uptimes (< 2 changeovers) after a short / a long uptime:")
    print("trace                   pairs  P(short|short) P(short|long)  mean up h after short/long")
    for path in paths:
        tr = load_trace(path)
        g = tr.gap_hours
        short = 2 * whole_ticks(0.2, g)
        ups = [p for p in periods_of(np.array(tr.available) >= 1, g) if p.up and p.complete]
        after: dict[bool, list[float]] = {True: [], False: []}
        for before, up in pairwise(ups):
            after[before.hours < short].append(up.hours)
        s_, l_ = after[True], after[False]
        if not s_ or not l_:
            continue
        print(
            f"{path.stem[:22]:<22} {len(s_) + len(l_):6d}  "
            f"{np.mean(np.array(s_) < short):14.2f} {np.mean(np.array(l_) < short):13.2f}  "
            f"{np.mean(s_):10.2f} / {np.mean(l_):.2f}"
        )


def sibling_state(paths: Sequence[Path]) -> None:
    """A zone's preemption and recovery rates by how many of its siblings are down now."""
    print(
        "\nby the number of sibling zones down at the tick (0, 1, 2, …): preemptions per hour "
        "of spot (count/hours=rate) | recoveries per hour of outage"
    )
    for (_, g, _), zones in _side_by_side(paths).items():
        if len(zones) < 3:
            continue
        for name, a in zones:
            down = sum((~b).astype(int) for other, b in zones if other != name)
            (up, flips), out = _spot_ticks(a), np.r_[~a[:-1], False]
            recoveries = np.r_[~a[:-1] & a[1:], False]
            pre = " ".join(_per_hour(flips, up, down == k, g).strip() for k in range(len(zones)))
            rec = " ".join(
                f"{recoveries[down == k].sum() / (out[down == k].sum() * g):.2f}"
                if out[down == k].any()
                else "–"
                for k in range(len(zones))
            )
            print(f"{name[:22]:<22} {pre} | {rec}")


def _spot_ticks(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per tick of an availability series: spot runs into the next tick (``up``), and spot is
    lost at the next tick (a preemption) — the two every per-hour rate here counts."""
    return np.r_[a[:-1], False], np.r_[a[:-1] & ~a[1:], False]


def _up_hours(a: np.ndarray, g: float) -> np.ndarray:
    """How long spot has been up at each tick (0 where it is down), in hours."""
    idx = np.arange(len(a))
    last_down = np.maximum.accumulate(np.where(a, -1, idx))
    return np.where(a, idx - last_down, 0) * g


def long_uptimes(paths: Sequence[Path], long_hours: float = 2.0, calm_hours: float = 6.0) -> None:
    """The preemption rate of spot that has lasted ``long_hours`` by how many siblings have
    been up ``calm_hours`` or more (a calm market around it)."""
    print(
        f"\nspot up {long_hours:g} h or more: preemptions per hour of spot (count/hours=rate) by "
        f"the share of sibling zones up {calm_hours:g} h or more at the tick: under a third, "
        "a third to two thirds, two thirds or more"
    )
    for (_, g, _), zones in _side_by_side(paths).items():
        if len(zones) < 3:
            continue
        ages = {name: _up_hours(a, g) for name, a in zones}
        for name, a in zones:
            calm = np.mean([ages[o] >= calm_hours for o, _ in zones if o != name], axis=0)
            old = np.r_[ages[name][:-1] >= long_hours, False]
            _, flips = _spot_ticks(a)
            groups = (calm < 1 / 3 - 1e-9, (calm >= 1 / 3 - 1e-9) & (calm < 2 / 3 - 1e-9))
            groups += (calm >= 2 / 3 - 1e-9,)
            rates = " ".join(_per_hour(flips, old, where & old, g) for where in groups)
            print(f"{name[:22]:<22} {rates}")


def _per_hour(flips: np.ndarray, up: np.ndarray, where: np.ndarray, g: float) -> str:
    """Preemptions per hour of spot over the ticks ``where`` ("count/hours=rate")."""
    k, h = int(flips[where].sum()), float(up[where].sum()) * g
    return f"{k:3d}/{h:4.0f}h={k / h:4.2f}" if h > 0 else "      –      "


def price_signal(paths: Sequence[Path], prices_file: Path | None) -> None:
    """Whether preemptions follow price moves, or come more at some price levels."""
    print(
        "\npreemptions per hour of spot by the price (count/spot hours=rate); "
        "`after rise` = within an hour of a price rise:"
    )
    print(
        "trace                  changes  after rise        after fall        other times"
        "       | by price quartile, low → high"
    )
    doc_keys = set()
    if prices_file is not None and prices_file.exists():
        doc_keys = set(json.loads(prices_file.read_text()))
    for path in paths:
        tr = load_trace(path)
        if tr.prices is not None:
            price = np.array(tr.prices)
        elif prices_file is not None and path.stem in doc_keys:
            price = np.array(load_price_series(prices_file, path.stem)[0])
        else:
            continue
        g = tr.gap_hours
        a = (np.array(tr.available) >= 1)[: len(price)]
        price = price[: len(a)]
        up, flips = _spot_ticks(a)
        hour = round(1 / g)
        move = np.r_[0.0, np.diff(price)]
        rise, fall = np.zeros(len(a), bool), np.zeros(len(a), bool)
        for i in np.flatnonzero(move):
            (rise if move[i] > 0 else fall)[i : i + hour] = True
        fall &= ~rise
        other = ~rise & ~fall
        edges = np.quantile(price[up], [0.25, 0.5, 0.75])
        quart = np.digitize(price, edges)
        levels = " ".join(_per_hour(flips, up, quart == q, g) for q in range(4))
        print(
            f"{path.stem[:22]:<22} {np.count_nonzero(move):7d}  "
            f"{_per_hour(flips, up, rise, g)}  {_per_hour(flips, up, fall, g)}  "
            f"{_per_hour(flips, up, other, g)} | {levels}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=Path("tests/data/spot-traces"))
    ap.add_argument("--block-hours", type=float, default=3.0)
    ap.add_argument("--window-hours", type=float, default=60.0)
    ap.add_argument(
        "--prices", type=Path, default=Path("tests/data/spot-prices/v100_spot_prices.json")
    )
    args = ap.parse_args(argv)
    blocks = round(24 / args.block_hours)
    print(
        "trace                  days  tick s  avail  ups  up mean/med h  downs  down mean/med h"
        "  corr: prev up, prev down, last 3 ups"
    )
    diurnal = []
    for path in suite_traces(args.traces):
        tr = load_trace(path)
        g = tr.gap_hours
        a = np.array(tr.available) >= 1
        ps = periods_of(a, g)
        ups = [(i, p.hours) for i, p in enumerate(ps) if p.up and p.complete]
        downs = [p.hours for p in ps if not p.up and p.complete]
        prev_up = [(ps[i - 2].hours, h) for i, h in ups if i >= 2 and ps[i - 2].complete]
        prev_down = [(ps[i - 1].hours, h) for i, h in ups if i >= 1 and ps[i - 1].complete]
        last3 = [(sum(ps[i - 2 * j].hours for j in (1, 2, 3)), h) for i, h in ups if i >= 6]
        up_h = [h for _, h in ups]

        def mm(x: list[float]) -> str:
            return f"{np.mean(x):5.2f}/{np.median(x):4.2f}" if x else "   –      "

        print(
            f"{path.stem[:22]:<22} {len(a) * g / 24:5.1f} {g * 3600:6.0f}  {a.mean():.2f} "
            f"{len(ups):4d}  {mm(up_h)}     {len(downs):4d}  {mm(downs)}        "
            f"{_rank_corr(prev_up)}  {_rank_corr(prev_down)}  {_rank_corr(last3)}"
        )
        block = ((np.arange(len(a)) * g % 24) // args.block_hours).astype(int) % blocks
        down_flip = np.r_[False, a[:-1] & ~a[1:]]
        was_up = np.r_[False, a[:-1]]
        share = [a[block == b].mean() for b in range(blocks)]
        rate = [
            down_flip[block == b].sum() / max(was_up[block == b].sum() * g, 1e-9)
            for b in range(blocks)
        ]
        diurnal.append((path.stem, share, rate))
    print(f"\nby {args.block_hours:g}-hour block of the day from the trace's start:")
    print("trace                  spot share per block | preemptions per spot hour")
    for name, share, rate in diurnal:
        print(
            f"{name[:22]:<22} {' '.join(f'{x:.2f}' for x in share)} | "
            f"{' '.join(f'{x:.2f}' for x in rate)}"
        )
    siblings(suite_traces(args.traces), args.window_hours)
    flickers(suite_traces(args.traces))
    sibling_state(suite_traces(args.traces))
    long_uptimes(suite_traces(args.traces))
    price_signal(suite_traces(args.traces), args.prices)


if __name__ == "__main__":
    main()
