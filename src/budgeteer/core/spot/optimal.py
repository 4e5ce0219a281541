"""The omniscient optimum: the cheapest schedule that meets the deadline, knowing the whole
future trace. A benchmark yardstick only — no online policy can know the future.

Dynamic programming over ticks in "lag" coordinates: ``q`` = ticks elapsed without progress
(idle or changeover) so far. Running keeps ``q``; idling or a changeover tick adds one. The job
finishes at ``(C/g + q)`` ticks, so the deadline is met iff ``q ≤ (R − C)/g``: the state space is
(tick, mode, q) with ``q`` bounded by the slack. A changeover, once started, runs to its end
(abandoning one is never better than having idled instead: same ``q``, less money), so a switch
at tick ``e`` lands in the running state at ``e + D``; a switch to spot is only useful if spot
stays available through the changeover. The changeover must be a whole number ``D ≥ 1`` of ticks.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from budgeteer.core.spot.replay import Market, Mode, SpotJob, available_at
from budgeteer.errors import BudgeteerError

F = NDArray[np.float64]
INF = math.inf

# backpointer bits: I source (2 bits), S source (2 bits), O source (2 bits)
_I_FROM_I, _I_FROM_S, _I_FROM_O, _I_LOST = 0, 1, 2, 3
_RAN, _ARR_I, _ARR_OTHER = 0, 1, 2


class Infeasible(BudgeteerError):
    """No schedule meets the deadline (even on-demand from the start)."""


def changeover_ticks(job: SpotJob, gap_hours: float) -> int:
    """``d`` in whole ticks; raises if it is not a whole number ≥ 1 of ticks."""
    ticks = job.changeover_hours / gap_hours
    if abs(ticks - round(ticks)) > 1e-6 or round(ticks) < 1:
        raise BudgeteerError(
            f"optimal needs the changeover to be a whole number ≥ 1 of ticks "
            f"({job.changeover_hours} h is {ticks:.3f} ticks of {gap_hours * 3600:.0f} s)"
        )
    return round(ticks)


def _shift(a: F, k: int) -> F:
    out = np.full_like(a, INF)
    if k < len(a):
        out[k:] = a[: len(a) - k]
    return out


def optimal_decisions(
    market: Market, start: int, job: SpotJob
) -> tuple[float, tuple[tuple[int, Mode], ...]]:
    """The optimal cost and its decision list (tick of each mode change, first tick included)."""
    g = market.gap_hours
    d_ticks = changeover_ticks(job, g)
    work = job.work_hours / g  # P, in ticks
    q_max = math.floor((job.deadline_hours - job.work_hours) / g + 1e-9)
    if q_max < d_ticks:
        raise Infeasible(
            f"deadline {job.deadline_hours} h leaves no room for work "
            f"{job.work_hours} h plus a changeover"
        )
    horizon = math.ceil(work + q_max) + 1
    n = len(market)
    price = np.array(
        [market.spot_usd_per_hour[min(start + e, n - 1)] * g for e in range(horizon + d_ticks)]
    )
    avail = np.array([available_at(market, start + e) for e in range(horizon + d_ticks)])
    od = job.on_demand_usd_per_hour * g
    size = q_max + 1
    q = np.arange(size)
    idle, spot, ond = np.full(size, INF), np.full(size, INF), np.full(size, INF)
    idle[0] = 0.0
    arr_spot: dict[int, tuple[F, NDArray[np.int8]]] = {}
    arr_od: dict[int, tuple[F, NDArray[np.int8]]] = {}
    codes = np.zeros((horizon, size), dtype=np.int8)
    best = (INF, -1, Mode.IDLE, -1)  # cost, tick, mode, q
    window_ok = np.array([avail[e : e + d_ticks].all() for e in range(horizon)])
    spot_window = np.array([price[e : e + d_ticks].sum() for e in range(horizon)])
    for e in range(horizon):
        # arrivals of changeovers started D ticks ago
        s_src, spot = _merge(arr_spot.pop(e, None), spot, size)
        o_src, ond = _merge(arr_od.pop(e, None), ond, size)
        codes[e] |= (s_src << 2) | (o_src << 4)
        if not avail[e]:  # the spot instance is lost before anyone decides
            lost = spot < idle
            idle = np.where(lost, spot, idle)
            codes[e] |= np.where(lost, _I_LOST, 0).astype(np.int8)
            spot = np.full(size, INF)
        # running this tick finishes the job where progress e - q ≥ P - 1
        done = q <= e - work + 1 + 1e-9
        if done.any():
            frac = work - e + q
            for mode, vals, unit in ((Mode.SPOT, spot, price[e]), (Mode.ON_DEMAND, ond, od)):
                total = np.where(done, vals + unit * frac, INF)
                k = int(np.argmin(total))
                if total[k] < best[0]:
                    best = (float(total[k]), e, mode, k)
        # changeovers started now land d_ticks later
        if window_ok[e]:
            src = np.minimum(idle, ond)
            code = np.where(idle <= ond, _ARR_I, _ARR_OTHER).astype(np.int8)
            _land(
                arr_spot,
                e + d_ticks,
                _shift(src, d_ticks) + spot_window[e],
                _shift_codes(code, d_ticks),
            )
        src = np.minimum(idle, spot)
        code = np.where(idle <= spot, _ARR_I, _ARR_OTHER).astype(np.int8)
        _land(arr_od, e + d_ticks, _shift(src, d_ticks) + od * d_ticks, _shift_codes(code, d_ticks))
        # idling this tick: q + 1
        stacked = np.stack([idle, spot, ond])
        if e + 1 < horizon:
            codes[e + 1] |= _shift_codes(np.argmin(stacked, axis=0).astype(np.int8), 1)
        idle = _shift(stacked.min(axis=0), 1)
        # running this tick: q unchanged
        spot = np.where(done, INF, spot + price[e])
        ond = np.where(done, INF, ond + od)
    if not math.isfinite(best[0]):
        raise Infeasible("no schedule meets the deadline")
    return best[0], _walk_back(codes, best, d_ticks, start, work)


def _merge(
    arrival: tuple[F, NDArray[np.int8]] | None, state: F, size: int
) -> tuple[NDArray[np.int8], F]:
    """Merge changeover arrivals into a running state; the codes say which source won."""
    if arrival is None:
        return np.zeros(size, dtype=np.int8), state
    val, src = arrival
    take = val < state
    return np.where(take, src, _RAN).astype(np.int8), np.where(take, val, state)


def _shift_codes(c: NDArray[np.int8], k: int) -> NDArray[np.int8]:
    out = np.zeros_like(c)
    if k < len(c):
        out[k:] = c[: len(c) - k]
    return out


def _land(
    buf: dict[int, tuple[F, NDArray[np.int8]]], at: int, val: F, src: NDArray[np.int8]
) -> None:
    if at in buf:
        old, old_src = buf[at]
        take = val < old
        buf[at] = (np.where(take, val, old), np.where(take, src, old_src).astype(np.int8))
    else:
        buf[at] = (val, src)


def _walk_back(
    codes: NDArray[np.int8],
    best: tuple[float, int, Mode, int],
    d_ticks: int,
    start: int,
    work: float,
) -> tuple[tuple[int, Mode], ...]:
    """Rebuild the per-tick modes from the backpointers, then keep the changes."""
    _, e, mode, q = best
    modes: dict[int, Mode] = {e: mode}
    while e > 0 or mode is not Mode.IDLE:
        code = int(codes[e][q])
        if mode is Mode.IDLE:
            src = code & 3
            if src == _I_LOST:
                mode = Mode.SPOT  # the spot state at this same tick was lost
                continue
            e, q = e - 1, q - 1
            mode = (Mode.IDLE, Mode.SPOT, Mode.ON_DEMAND)[src]
            modes[e] = Mode.IDLE
            continue
        shift = 2 if mode is Mode.SPOT else 4
        src = (code >> shift) & 3
        if src == _RAN:
            e -= 1
            modes[e] = mode
            continue
        for k in range(1, d_ticks + 1):
            modes[e - k] = mode
        e, q = e - d_ticks, q - d_ticks
        other = Mode.ON_DEMAND if mode is Mode.SPOT else Mode.SPOT
        mode = Mode.IDLE if src == _ARR_I else other
    out: list[tuple[int, Mode]] = []
    for tick in sorted(modes):
        if not out or out[-1][1] is not modes[tick]:
            out.append((start + tick, modes[tick]))
    return tuple(out)
