"""What the replay suite's spot traces hold: period lengths, how much one period tells of the
next, and how availability moves with the time of day — the information an online estimate of
a market can use (session 19, issue 15).

Per trace: its length and tick, the share of ticks with spot, complete up and down periods
(count, mean and median hours); Spearman's rank correlation of an uptime with the uptime before
it, with the outage just before it, and with the sum of the three uptimes before it; and, by
3-hour block of the day counted from the trace's start (the traces do not give their start's
clock time), the share of ticks with spot and the preemptions per hour of spot::

    python benchmarks/spot_market_stats.py [--traces tests/data/spot-traces] [--block-hours 3]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from budgeteer.cli.spot import suite_traces
from budgeteer.core.spot.estimate import periods_of
from budgeteer.traces import load_trace


def _rank_corr(pairs: list[tuple[float, float]]) -> str:
    if len(pairs) < 3:
        return "  –  "
    xs, ys = zip(*pairs, strict=True)
    return f"{float(spearmanr(xs, ys)[0]):+.2f}"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=Path("tests/data/spot-traces"))
    ap.add_argument("--block-hours", type=float, default=3.0)
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


if __name__ == "__main__":
    main()
