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
    """Backward induction over the MDP; costs are per step (price × step length)."""
    d = changeover_steps
    horizon = math.ceil(work_steps + max_lag) + 1
    size = max_lag + 1
    n = len(avail.up)
    up_idx = np.flatnonzero(avail.up)
    t = avail.transition
    t_d = np.linalg.matrix_power(t, d)
    t_uu = t[np.ix_(up_idx, up_idx)]
    t_u = t[up_idx]
    down = ~avail.up
    q = np.arange(size)
    inf_block = np.full((n, size), INF)
    actions = np.zeros((horizon, 3, n, size), dtype=np.int8)
    future: dict[int, tuple[F, F, F]] = {}  # e → (idle, spot, od) values, each n × size
    # idle values at e shifted by j steps of lag, for the j = 1 … d steps before e that read
    # them (each is read d times; worked out once)
    shifted: dict[int, list[F]] = {}

    def shift(x: F, k: int) -> F:
        out = np.full_like(x, INF)
        if k < size:
            out[:, : size - k] = x[:, k:]
        return out

    def at(e: int) -> tuple[F, F, F]:
        return future.get(e, (inf_block, inf_block, inf_block))

    def idle_shifted(e: int, j: int) -> F:
        got = shifted.get(e)
        if got is None:
            idle = at(e)[0]
            got = shifted[e] = [idle, *(shift(idle, k) for k in range(1, d + 1))]
        return got[j]

    def spot_next(e: int) -> F:
        """Value of being in spot mode at e (lost where spot is down → idle)."""
        idle, spot, _ = at(e)
        return np.where(avail.up[:, None], spot, idle)

    def best(mode: int, e: int, a: F, b: F, c: F) -> F:
        """The cheapest of the three options (the first of equals, as ``argmin``), its
        action stored."""
        take_b = b < a
        low = np.where(take_b, b, a)
        take_c = c < low
        actions[e, mode] = np.where(take_c, 2, take_b)
        return np.where(take_c, c, low)

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

    for e in range(horizon - 1, -1, -1):
        done = q <= e - work_steps + 1 + 1e-9
        frac = work_steps - e + q
        idle_n, _, od_n = at(e + 1)
        idle_v = shift(t @ idle_n, 1)
        od_switch = d * od_cost + shift(t_d @ at(e + d)[2], d)
        od_run = np.where(done, od_cost * frac, od_cost + t @ od_n)
        # spot changeover begun in an up state: survives through step j or is lost at j
        switch_up = np.zeros((len(up_idx), size))
        for j, (lost, billed) in enumerate(lost_at, start=1):
            switch_up += lost @ idle_shifted(e + j, j) + billed
        switch_up += surv @ shift(spot_next(e + d)[up_idx], d) + survived
        spot_sw = np.full((n, size), INF)
        spot_sw[up_idx] = switch_up
        spot_run = np.where(done, spot_cost * frac, spot_cost + t @ spot_next(e + 1))
        spot_run[down] = INF
        future[e] = (
            best(IDLE, e, idle_v, spot_sw, od_switch),
            best(SPOT, e, idle_v, spot_run, od_switch),
            best(ON_DEMAND, e, idle_v, spot_sw, od_run),
        )
        future.pop(e + d + 1, None)
        shifted.pop(e + d + 1, None)
    return Table(actions, step_ticks, max_lag, avail)
