"""Step 5 — place: choose one placement per admitted job, jointly, under capacity and budgets.

Each admitted job picks a point of its front (or waits for capacity). Tier by tier (P0 first),
the choice minimises cost plus a penalty for every job left waiting; the penalty exceeds any
possible cost saving, so the most jobs are placed first, earlier queue positions first, then the
cheapest mix. Within a tier, jobs whose cheapest placement is on an offering with spare capacity
for everyone are fixed there (it is optimal); only the contended rest goes to a MILP solved by
HiGHS (``scipy.optimize.milp``). The greedy fallback takes, in queue order, the first front point
that fits. Per tier the MILP's choice is kept only when it beats greedy, so the combined plan is
never worse than greedy tier by tier (lexicographically); the greedy alone serves queues whose
contended part exceeds ``Policy.milp_max_variables``.

Budget rows: for each budget and each tier ``t`` admitted in it, the expected cost of all its
admitted jobs of tier ``t`` or more important must stay within tier ``t``'s allowance — the same
condition admission checked with every job at its cheapest point.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_matrix

from budgeteer.core.admit import Admitted, BudgetTally
from budgeteer.core.outcomes import SolverReport
from budgeteer.core.policy import Policy, SolverChoice
from budgeteer.domain.offering import Offering

Choice = int | None  # position in the job's front, or None: waits for capacity


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """Σ cost of ``members`` (positions in the admitted list) ≤ ``rhs_usd``."""

    members: frozenset[int]
    rhs_usd: float


@dataclass(slots=True)
class _State:
    capacity: dict[int, float]  # offering index → instances still free (limited ones only)
    row_usage: list[float]  # per budget row: decided costs + reserved costs of undecided jobs


def budget_rows(
    admitted: Sequence[Admitted], tallies: Mapping[str, BudgetTally]
) -> list[BudgetRow]:
    """The budget rows of the placement problem."""
    rows = []
    for tally in tallies.values():
        members = [
            (i, a.job.tier) for i, a in enumerate(admitted) if tally.budget.id in a.budget_ids
        ]
        for tier in sorted({t for _, t in members}):
            rhs = float(tally.budget.allowance_usd(tier)) - tally.base_usd
            rows.append(BudgetRow(frozenset(i for i, t in members if t <= tier), rhs))
    return rows


def _offering_of(a: Admitted, pos: int) -> tuple[int, int]:
    cfg = int(a.front.config[pos])
    return int(a.front.configs.offering[cfg]), int(a.front.configs.instances[cfg])


def penalties(admitted: Sequence[Admitted]) -> list[float]:
    """Cost of leaving each job unplaced: above any total cost, larger for earlier positions."""
    n = len(admitted)
    big = 1.0 + 2.0 * sum(float(a.front.cost_usd[: a.front.size].max()) for a in admitted)
    return [big * (2.0 - i / max(n, 1)) for i in range(n)]


def objective(
    admitted: Sequence[Admitted], choices: Sequence[Choice], penalty: Sequence[float]
) -> tuple[float, ...]:
    """Per tier (P0 first): expected cost of placed jobs plus penalties of waiting ones."""
    by_tier: dict[int, float] = defaultdict(float)
    for i, (a, c) in enumerate(zip(admitted, choices, strict=True)):
        by_tier[int(a.job.tier)] += penalty[i] if c is None else float(a.front.cost_usd[c])
    return tuple(by_tier[t] for t in range(4))


def _fits(
    a: Admitted,
    i: int,
    pos: int,
    state: _State,
    rows: Sequence[BudgetRow],
    rows_of: Mapping[int, list[int]],
) -> bool:
    off, n = _offering_of(a, pos)
    if off in state.capacity and state.capacity[off] < n:
        return False
    extra = float(a.front.cost_usd[pos]) - a.reserved_usd
    return all(state.row_usage[r] + extra <= rows[r].rhs_usd + 1e-6 for r in rows_of[i])


def _decide(
    a: Admitted,
    i: int,
    pos: Choice,
    state: _State,
    rows_of: Mapping[int, list[int]],
) -> None:
    cost = 0.0
    if pos is not None:
        off, n = _offering_of(a, pos)
        if off in state.capacity:
            state.capacity[off] -= n
        cost = float(a.front.cost_usd[pos])
    for r in rows_of[i]:
        state.row_usage[r] += cost - a.reserved_usd


def _greedy_tier(
    admitted: Sequence[Admitted],
    members: Sequence[int],
    state: _State,
    rows: Sequence[BudgetRow],
    rows_of: Mapping[int, list[int]],
) -> dict[int, Choice]:
    out: dict[int, Choice] = {}
    for i in members:
        a = admitted[i]
        pos = next((p for p in range(a.front.size) if _fits(a, i, p, state, rows, rows_of)), None)
        _decide(a, i, pos, state, rows_of)
        out[i] = pos
    return out


def _milp_tier(
    admitted: Sequence[Admitted],
    members: Sequence[int],
    state: _State,
    rows: Sequence[BudgetRow],
    rows_of: Mapping[int, list[int]],
    penalty: Sequence[float],
    policy: Policy,
) -> dict[int, Choice] | None:
    """Optimal choices for ``members`` given ``state`` (not modified); ``None`` if unsolved."""
    var: list[tuple[int, int]] = [(i, p) for i in members for p in range(admitted[i].front.size)]
    c = np.array([float(admitted[i].front.cost_usd[p]) - penalty[i] for i, p in var])
    r_idx: list[int] = []
    v_idx: list[int] = []
    vals: list[float] = []
    ub: list[float] = []

    def add_row(entries: list[tuple[int, float]], bound: float) -> None:
        row = len(ub)
        for v, coef in entries:
            r_idx.append(row)
            v_idx.append(v)
            vals.append(coef)
        ub.append(bound)

    by_job: dict[int, list[int]] = defaultdict(list)
    by_offering: dict[int, list[tuple[int, float]]] = defaultdict(list)
    by_row: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for v, (i, p) in enumerate(var):
        by_job[i].append(v)
        off, n = _offering_of(admitted[i], p)
        if off in state.capacity:
            by_offering[off].append((v, float(n)))
        for r in rows_of[i]:
            by_row[r].append((v, float(admitted[i].front.cost_usd[p])))
    for vs in by_job.values():
        add_row([(v, 1.0) for v in vs], 1.0)
    for off, entries in by_offering.items():
        add_row(entries, state.capacity[off])
    member_set = set(members)
    for r, entries in by_row.items():
        reserved = sum(admitted[i].reserved_usd for i in rows[r].members & member_set)
        add_row(entries, rows[r].rhs_usd - (state.row_usage[r] - reserved) + 1e-6)
    a_matrix = coo_matrix((vals, (r_idx, v_idx)), shape=(len(ub), len(var))).tocsr()
    result = milp(
        c,
        constraints=LinearConstraint(a_matrix, -np.inf, np.array(ub)),
        integrality=np.ones(len(var)),
        bounds=(0, 1),
        options={"time_limit": policy.milp_time_limit_seconds, "disp": False},
    )
    if result.x is None:
        return None
    chosen: dict[int, Choice] = dict.fromkeys(members)
    for v in np.flatnonzero(result.x > 0.5).tolist():
        i, p = var[v]
        chosen[i] = p
    return chosen


def place(
    admitted: Sequence[Admitted],
    offerings: Sequence[Offering],
    in_use: Mapping[str, int],
    tallies: Mapping[str, BudgetTally],
    policy: Policy,
) -> tuple[list[Choice], SolverReport]:
    """One choice per admitted job (front position, or ``None`` to wait for capacity)."""
    rows = budget_rows(admitted, tallies)
    rows_of: dict[int, list[int]] = defaultdict(list)
    for r, row in enumerate(rows):
        for i in row.members:
            rows_of[i].append(r)
    capacity = {
        i: float(o.max_instances - in_use.get(o.id, 0))
        for i, o in enumerate(offerings)
        if o.max_instances is not None
    }
    usage = [sum(admitted[i].reserved_usd for i in row.members) for row in rows]
    penalty = penalties(admitted)
    order = list(range(len(admitted)))
    greedy_state = _State(dict(capacity), list(usage))
    greedy = _greedy_tier(admitted, order, greedy_state, rows, rows_of)
    greedy_choices = [greedy[i] for i in order]
    greedy_obj = objective(admitted, greedy_choices, penalty)
    if policy.solver is SolverChoice.GREEDY:
        return greedy_choices, _report("greedy", admitted, 0, greedy_obj, greedy_obj, False)

    state = _State(dict(capacity), list(usage))
    choices: dict[int, Choice] = {}
    methods: set[str] = set()
    variables = 0
    for tier in range(4):
        members = [i for i in order if int(admitted[i].job.tier) == tier]
        contended = _contended(admitted, members, state)
        trial = _State(dict(state.capacity), list(state.row_usage))
        tier_greedy = _greedy_tier(admitted, members, trial, rows, rows_of)
        best = tier_greedy
        size = sum(admitted[i].front.size for i in contended)
        if contended and (size <= policy.milp_max_variables or policy.solver is SolverChoice.MILP):
            fixed = [i for i in members if i not in set(contended)]
            work = _State(dict(state.capacity), list(state.row_usage))
            for i in fixed:
                _decide(admitted[i], i, 0, work, rows_of)
            solved = _milp_tier(admitted, contended, work, rows, rows_of, penalty, policy)
            variables += size
            if solved is not None:
                candidate = {**dict.fromkeys(fixed, 0), **solved}
                if (
                    _tier_cost(admitted, candidate, penalty)
                    < _tier_cost(admitted, tier_greedy, penalty) - 1e-6
                ):
                    best = candidate
                    methods.add("milp")
        elif contended:
            methods.add("greedy")
        for i in members:
            _decide(admitted[i], i, best[i], state, rows_of)
            choices[i] = best[i]
    final = [choices[i] for i in order]
    method = "milp" if "milp" in methods else "greedy" if "greedy" in methods else "exact"
    obj = objective(admitted, final, penalty)
    return final, _report(method, admitted, variables, obj, greedy_obj, "greedy" not in methods)


def _contended(admitted: Sequence[Admitted], members: Sequence[int], state: _State) -> list[int]:
    """Jobs whose cheapest point is on a limited offering that cannot take them all."""
    demand: dict[int, float] = defaultdict(float)
    for i in members:
        off, n = _offering_of(admitted[i], 0)
        if off in state.capacity:
            demand[off] += n
    if all(demand[o] <= state.capacity[o] for o in demand):
        return []
    return [i for i in members if _offering_of(admitted[i], 0)[0] in state.capacity]


def _tier_cost(
    admitted: Sequence[Admitted], chosen: Mapping[int, Choice], penalty: Sequence[float]
) -> float:
    return sum(
        penalty[i] if p is None else float(admitted[i].front.cost_usd[p]) for i, p in chosen.items()
    )


def _report(
    method: str,
    admitted: Sequence[Admitted],
    variables: int,
    obj: tuple[float, ...],
    greedy_obj: tuple[float, ...],
    optimal: bool,
) -> SolverReport:
    return SolverReport(
        method, len(admitted), variables, math.fsum(obj), math.fsum(greedy_obj), optimal
    )
