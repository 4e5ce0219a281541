"""The MDP behind ``default``, over the replay semantics, solved by backward induction.

Availability is the semi-Markov chain of :mod:`budgeteer.core.spot.estimate` (up or down, by
age); the decisions are read by :mod:`budgeteer.core.spot.decide`. The MDP state at the
start of a step is (elapsed steps ``e``, mode, availability state, lag ``q``), where the lag
counts steps without progress (idle or changeover), as in :mod:`budgeteer.core.spot.optimal`:
the job finishes at ``P + q`` steps, so the deadline holds iff ``q ≤ (R − C)/step``. A
changeover, once begun, runs to its end (or until spot is lost). Missing the deadline costs
infinity and every availability sequence has positive probability, so the MDP policy never takes
a risk some sequence could turn into a miss; the decider adds an exact safety net on top.

For fine traces the MDP runs on a coarser grid of ``k`` trace ticks per step (about a quarter of
a changeover), which keeps the table small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from budgeteer.core.spot.estimate import Availability

F = NDArray[np.float64]
#: The cost of missing the deadline. Finite so that expectations stay numbers (0 × ∞ is not);
#: with transition probabilities of at least 1e-6 any risky path still costs ≥ 1e9 dollars.
INF = 1e15

#: Actions stored in the table.
IDLE, SPOT, ON_DEMAND = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Table:
    """Best action per (step, mode, availability state, lag): ``actions[e, m, s, q]``."""

    actions: NDArray[np.int8]
    step_ticks: int
    max_lag: int
    availability: Availability


def solve(
    work_steps: float,
    max_lag: int,
    changeover_steps: int,
    spot_cost: float,
    od_cost: float,
    avail: Availability,
    step_ticks: int,
) -> Table:
    """Backward induction over the MDP; costs are per step (price × step length).

    The values at a step are one array ``(3, n, size + d)``: idle, *spot next* (the value of
    being in spot mode: spot where the state is up, idle where it is down, spot being lost)
    and on-demand, by availability state and lag; the ``d`` columns past the last lag hold
    ``INF``, so "the same values ``j`` steps of lag later" is the slice ``j : j + size``. The
    three modes' options are compared at once, the first of equals kept (as ``argmin``).
    """
    d = changeover_steps
    horizon = math.ceil(work_steps + max_lag) + 1
    size = max_lag + 1
    width = size + d
    n = len(avail.up)
    up_idx = np.flatnonzero(avail.up)
    down_idx = np.flatnonzero(~avail.up)
    # up and down states as slices where each is contiguous (the estimate puts the up states
    # first): views, not copies, at every step
    rows, down = _as_slice(up_idx), _as_slice(down_idx)
    t = avail.transition
    t_d = np.linalg.matrix_power(t, d)
    t_uu = t[np.ix_(up_idx, up_idx)]
    t_u = t[up_idx]
    q = np.arange(size)
    actions = np.zeros((horizon, 3, n, size), dtype=np.int8)
    beyond = np.full((3, n, width), INF)  # the values past the horizon
    # (idle, spot next, on-demand) at step e, in ring[e % len(ring)]: only the last d + 1
    # steps are read; the columns past the last lag stay INF
    ring = [np.full((3, n, width), INF) for _ in range(d + 2)]

    def values(e: int) -> F:
        return beyond if e >= horizon else ring[e % len(ring)]

    # a spot changeover begun in an up state: the chance it is lost at step j (and the steps it
    # billed), and that it survives all d — the same for every e, so worked out once
    lost_at: list[tuple[F, F]] = []
    surv = np.eye(len(up_idx))
    for j in range(1, d + 1):
        lost = surv @ t_u  # distribution over all states at e + j
        lost[:, up_idx] = 0.0
        lost_at.append((lost, lost.sum(axis=1)[:, None] * j * spot_cost))
        surv = surv @ t_uu
    survived = surv.sum(axis=1)[:, None] * (d * spot_cost)
    # scratch padded with INF, so that a product of this step shifted by one or d steps of lag
    # is a slice: the values a step on (in expectation), and for d > 1 the on-demand values d
    # steps on
    ahead_pad = np.full((3, n, size + 1), INF)
    ahead = ahead_pad[:, :, :size]
    od_pad = ahead_pad[2] if d == 1 else np.full((n, width), INF)
    od_fixed = d * od_cost
    # b: the spot option (a changeover to spot from idle and on-demand, a step on spot from
    # spot); c: the on-demand option (a changeover, or a step on on-demand) — rewritten at
    # every step but for b's down rows, where spot cannot be had
    b = np.full((3, n, size), INF)
    total = np.empty((len(up_idx), size))  # the spot changeover's expected cost, summed
    term = np.empty((len(up_idx), size))
    c = np.empty((3, n, size))
    low = np.empty((3, n, size))
    take_b = np.empty((3, n, size), dtype=np.bool_)
    take_c = np.empty((3, n, size), dtype=np.bool_)

    for e in range(horizon - 1, -1, -1):
        # lags q ≤ e − work + 1 finish within this step (billed pro rata): the first ``ends``
        ends_at = e - work_steps + 1 + 1e-9
        ends = 0 if ends_at < 0 else min(size, math.floor(ends_at) + 1)
        nxt = values(e + 1)
        later = values(e + d)
        np.matmul(t, nxt[:, :, :size], out=ahead)  # the three modes' values a step on
        idle_v = ahead_pad[0, :, 1:]  # wait: a step of lag
        if d > 1:  # (a changeover of one step reads the values a step on: ``ahead``)
            np.matmul(t_d, later[2, :, :size], out=od_pad[:, :size])
        np.add(od_fixed, od_pad[:, d:], out=c[:2])  # a changeover to on-demand
        np.add(od_cost, ahead[2], out=c[2])  # a step on on-demand, on spot (down rows: INF)
        b[1, rows] = spot_cost + ahead[1, rows]
        if ends:  # those that finish are billed for the part of the step they run
            frac = work_steps - e + q[:ends]
            c[2, :, :ends] = od_cost * frac
            b[1, rows, :ends] = spot_cost * frac
        # a spot changeover begun in an up state: lost at step j = 1 … d (each term added to
        # the sum as it comes, left to right), or survives all d
        for j, (lost, billed) in enumerate(lost_at, start=1):
            np.matmul(lost, values(e + j)[0, :, j : j + size], out=term if j > 1 else total)
            if j > 1:
                term += billed
                total += term
            else:
                total += billed
        np.matmul(surv, later[1, rows, d : d + size], out=term)
        term += survived
        total += term
        b[::2, rows] = total
        # the first of equals kept (as ``argmin``): the values are the minima
        np.less(b, idle_v, out=take_b)
        np.minimum(b, idle_v, out=low)
        np.less(c, low, out=take_c)
        np.copyto(actions[e], take_b)
        np.putmask(actions[e], take_c, ON_DEMAND)
        value = ring[e % len(ring)]
        np.minimum(c, low, out=value[:, :, :size])
        value[1, down, :size] = value[0, down, :size]
    return Table(actions, step_ticks, max_lag, avail)


def _as_slice(idx: NDArray[np.intp]) -> slice | NDArray[np.intp]:
    """``idx`` as a slice when its entries are contiguous (else as it is)."""
    if len(idx) and int(idx[-1]) - int(idx[0]) + 1 == len(idx):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx
