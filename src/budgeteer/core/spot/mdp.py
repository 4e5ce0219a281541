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
    # up and down states as slices (the estimate puts the up states first): views, not copies
    rows, down = _span(up_idx), _span(down_idx)
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

    # every view the loop reads or writes, made once: per ring slot (the last one is
    # ``beyond``) and for the scratch arrays (indexing costs as much as the arithmetic here)
    slots = [*ring, beyond]
    r = len(ring)
    head = [v[:, :, :size] for v in slots]
    od_src = [v[2, :, :size] for v in slots]
    lost_src = [[v[0, :, j : j + size] for j in range(1, d + 1)] for v in slots]
    surv_src = [v[1, rows, d : d + size] for v in slots]
    down_spot = [v[1, down, :size] for v in slots]
    down_idle = [v[0, down, :size] for v in slots]
    idle_v = ahead_pad[0, :, 1:]  # wait: a step of lag
    od_head, od_tail = od_pad[:, :size], od_pad[:, d:]
    c_change, c_stay = c[:2], c[2]
    ahead_od, ahead_spot = ahead[2], ahead[1, rows]
    b_stay, b_change = b[1, rows], b[::2, rows]

    def slot(e: int) -> int:
        """The slot holding step ``e``'s values (``beyond`` past the horizon)."""
        return r if e >= horizon else e % r

    for e in range(horizon - 1, -1, -1):
        # lags q ≤ e − work + 1 finish within this step (billed pro rata): the first ``ends``
        ends_at = e - work_steps + 1 + 1e-9
        ends = 0 if ends_at < 0 else min(size, math.floor(ends_at) + 1)
        at_d = slot(e + d)
        np.matmul(t, head[slot(e + 1)], out=ahead)  # a step on
        if d > 1:  # (a changeover of one step reads the values a step on: ``ahead``)
            np.matmul(t_d, od_src[at_d], out=od_head)
        np.add(od_fixed, od_tail, out=c_change)  # a changeover to on-demand
        np.add(od_cost, ahead_od, out=c_stay)  # a step on on-demand, on spot (down rows: INF)
        np.add(spot_cost, ahead_spot, out=b_stay)
        if ends:  # those that finish are billed for the part of the step they run
            frac = work_steps - e + q[:ends]
            c[2, :, :ends] = od_cost * frac
            b[1, rows, :ends] = spot_cost * frac
        # a spot changeover begun in an up state: lost at step j = 1 … d (each term added to
        # the sum as it comes, left to right), or survives all d
        for j, (lost, billed) in enumerate(lost_at, start=1):
            src = lost_src[slot(e + j)][j - 1]
            np.matmul(lost, src, out=term if j > 1 else total)
            if j > 1:
                term += billed
                total += term
            else:
                total += billed
        np.matmul(surv, surv_src[at_d], out=term)
        term += survived
        total += term
        np.copyto(b_change, total)
        # the first of equals kept (as ``argmin``): the values are the minima
        np.less(b, idle_v, out=take_b)
        np.minimum(b, idle_v, out=low)
        np.less(c, low, out=take_c)
        act = actions[e]
        np.copyto(act, take_b)
        np.putmask(act, take_c, ON_DEMAND)
        here = e % r
        np.minimum(c, low, out=head[here])
        np.copyto(down_spot[here], down_idle[here])
    return Table(actions, step_ticks, max_lag, avail)


def _span(idx: NDArray[np.intp]) -> slice:
    """``idx`` as a slice: the up states, and the down states, each contiguous (as
    :func:`~budgeteer.core.spot.estimate.estimate` lays them out: up first), so that the
    loop's views of them are views, not copies."""
    if not len(idx) or int(idx[-1]) - int(idx[0]) + 1 != len(idx):
        raise ValueError(
            "availability: the up states and the down states must each be contiguous and "
            f"non-empty (got states {idx.tolist()})"
        )
    return slice(int(idx[0]), int(idx[-1]) + 1)
