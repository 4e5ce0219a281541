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

import itertools
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

    def copy(self) -> _State:
        return _State(dict(self.capacity), list(self.row_usage))


@dataclass(frozen=True, slots=True)
class _Problem:
    """The placement problem in plain Python lists (fast to read in the greedy loop)."""

    admitted: Sequence[Admitted]
    options: list[list[tuple[int, int, float]]]  # per job: (offering, instances, cost) by position
    rows: list[BudgetRow]
    rows_of: dict[int, list[int]]
    penalty: list[float]

    @classmethod
    def build(cls, admitted: Sequence[Admitted], tallies: Mapping[str, BudgetTally]) -> _Problem:
        options = []
        for a in admitted:
            cfg = a.front.config[: a.front.size]
            options.append(
                list(
                    zip(
                        a.front.configs.offering[cfg].tolist(),
                        a.front.configs.instances[cfg].tolist(),
                        a.front.cost_usd[: a.front.size].tolist(),
                        strict=True,
                    )
                )
            )
        rows = budget_rows(admitted, tallies)
        rows_of: dict[int, list[int]] = defaultdict(list)
        for r, row in enumerate(rows):
            for i in row.members:
                rows_of[i].append(r)
        return cls(admitted, options, rows, rows_of, penalties(admitted))

    def fits(self, i: int, pos: int, state: _State) -> bool:
        off, n, cost = self.options[i][pos]
        if state.capacity.get(off, math.inf) < n:
            return False
        extra = cost - self.admitted[i].reserved_usd
        rows = self.rows
        return all(state.row_usage[r] + extra <= rows[r].rhs_usd + 1e-6 for r in self.rows_of[i])

    def decide(self, i: int, pos: Choice, state: _State) -> None:
        cost = 0.0
        if pos is not None:
            off, n, cost = self.options[i][pos]
            if off in state.capacity:
                state.capacity[off] -= n
        delta = cost - self.admitted[i].reserved_usd
        for r in self.rows_of.get(i, ()):
            state.row_usage[r] += delta

    def greedy(self, members: Sequence[int], state: _State) -> dict[int, Choice]:
        """In order, each job takes the first front point that still fits (``state`` updated)."""
        out: dict[int, Choice] = {}
        for i in members:
            pos = next((p for p in range(len(self.options[i])) if self.fits(i, p, state)), None)
            self.decide(i, pos, state)
            out[i] = pos
        return out

    def tier_cost(self, chosen: Mapping[int, Choice]) -> float:
        return sum(
            self.penalty[i] if p is None else self.options[i][p][2] for i, p in chosen.items()
        )


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
            rhs = tally.allowance[tier] - tally.base_usd
            rows.append(BudgetRow(frozenset(i for i, t in members if t <= tier), rhs))
    return rows


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


def _milp_tier(
    problem: _Problem, members: Sequence[int], state: _State, policy: Policy
) -> tuple[dict[int, Choice], bool] | None:
    """Optimal choices for ``members`` given ``state`` (not modified), and whether HiGHS proved
    optimality; ``None`` if it found no solution in time."""
    var = [(i, p) for i in members for p in range(len(problem.options[i]))]
    c = np.array([problem.options[i][p][2] - problem.penalty[i] for i, p in var])
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
        off, n, cost = problem.options[i][p]
        by_job[i].append(v)
        if off in state.capacity:
            by_offering[off].append((v, float(n)))
        for r in problem.rows_of.get(i, ()):
            by_row[r].append((v, cost))
    for vs in by_job.values():
        add_row([(v, 1.0) for v in vs], 1.0)
    for off, entries in by_offering.items():
        add_row(entries, state.capacity[off])
    member_set = set(members)
    for r, entries in by_row.items():
        row = problem.rows[r]
        reserved = sum(problem.admitted[i].reserved_usd for i in row.members & member_set)
        add_row(entries, row.rhs_usd - (state.row_usage[r] - reserved) + 1e-6)
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
    return chosen, result.status == 0


def place(
    admitted: Sequence[Admitted],
    offerings: Sequence[Offering],
    in_use: Mapping[str, int],
    tallies: Mapping[str, BudgetTally],
    policy: Policy,
) -> tuple[list[Choice], SolverReport]:
    """One choice per admitted job (front position, or ``None`` to wait for capacity)."""
    if not admitted:  # nothing to place (what the passes below would report for no jobs)
        only_greedy = policy.solver is SolverChoice.GREEDY
        none = (0.0, 0.0, 0.0, 0.0)
        method = "greedy" if only_greedy else "exact"
        return [], _report(method, admitted, 0, none, none, not only_greedy)
    problem = _Problem.build(admitted, tallies)
    capacity = {
        i: float(o.max_instances - in_use.get(o.id, 0))
        for i, o in enumerate(offerings)
        if o.max_instances is not None
    }
    usage = [sum(admitted[i].reserved_usd for i in row.members) for row in problem.rows]
    order = list(range(len(admitted)))
    greedy = problem.greedy(order, _State(dict(capacity), list(usage)))
    greedy_choices = [greedy[i] for i in order]
    greedy_obj = objective(admitted, greedy_choices, problem.penalty)
    if policy.solver is SolverChoice.GREEDY:
        return greedy_choices, _report("greedy", admitted, 0, greedy_obj, greedy_obj, False)

    state = _State(capacity, usage)
    choices: dict[int, Choice] = {}
    methods: set[str] = set()
    variables = 0
    proven = True
    # tier by tier, and inside a tier the jobs that can still make their deadline before the
    # late ones (the queue's order): each class is placed on what the ones before it left
    for tier, late in itertools.product(range(4), (False, True)):
        members = [
            i for i in order if int(admitted[i].job.tier) == tier and admitted[i].late == late
        ]
        contended = _contended(problem, members, state)
        if not contended:  # everyone's cheapest point is free: optimal, and always fits
            best: dict[int, Choice] = dict.fromkeys(members, 0)
        else:
            best = problem.greedy(members, state.copy())
            size = sum(len(problem.options[i]) for i in contended)
            if size <= policy.milp_max_variables or policy.solver is SolverChoice.MILP:
                solved = _solve_contended(problem, members, contended, state, policy)
                variables += size
                if solved is None:
                    proven = False
                else:
                    candidate, optimal = solved
                    proven &= optimal
                    if problem.tier_cost(candidate) < problem.tier_cost(best) - 1e-6:
                        best = candidate
                        methods.add("milp")
            else:
                methods.add("greedy")
                proven = False
        for i in members:
            problem.decide(i, best[i], state)
            choices[i] = best[i]
    final = [choices[i] for i in order]
    method = "milp" if "milp" in methods else "greedy" if "greedy" in methods else "exact"
    obj = objective(admitted, final, problem.penalty)
    return final, _report(method, admitted, variables, obj, greedy_obj, proven)


def _solve_contended(
    problem: _Problem,
    members: Sequence[int],
    contended: Sequence[int],
    state: _State,
    policy: Policy,
) -> tuple[dict[int, Choice], bool] | None:
    """Fix the uncontended jobs at their cheapest point, solve the rest with the MILP."""
    in_milp = set(contended)
    fixed = [i for i in members if i not in in_milp]
    work = state.copy()
    for i in fixed:
        problem.decide(i, 0, work)
    solved = _milp_tier(problem, contended, work, policy)
    if solved is None:
        return None
    return {**dict.fromkeys(fixed, 0), **solved[0]}, solved[1]


def _contended(problem: _Problem, members: Sequence[int], state: _State) -> list[int]:
    """Jobs whose cheapest point is on a limited offering that cannot take them all."""
    demand: dict[int, float] = defaultdict(float)
    for i in members:
        off, n, _ = problem.options[i][0]
        if off in state.capacity:
            demand[off] += n
    if all(demand[o] <= state.capacity[o] for o in demand):
        return []
    return [i for i in members if problem.options[i][0][0] in state.capacity]


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
