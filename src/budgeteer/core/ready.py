"""Step 1 — readiness: which pending jobs have their dependencies satisfied.

Conditions follow Slurm: ``success`` (afterok) needs the upstream to succeed (an early stop
counts: it produced its model), ``failure`` (afternotok) needs it to fail, ``any`` (afterany)
needs it to end in any way. A dependency that can no longer be satisfied fails the dependent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from budgeteer.core.outcomes import DependencyFailure
from budgeteer.domain.job import DependencyCondition, Job, JobState

_SUCCESS = frozenset({JobState.SUCCEEDED, JobState.STOPPED_EARLY})


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A dependency cycle in ``graph`` (node → upstreams) as ``[a, b, …, a]``, or ``None``."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in sorted(graph):
        if root in state:
            continue
        path: list[str] = []
        stack: list[tuple[str, list[str]]] = [(root, sorted(graph.get(root, ())))]
        state[root] = 1
        path.append(root)
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            nxt = todo.pop(0)
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(graph.get(nxt, ()))))
    return None


def _satisfied(condition: DependencyCondition, upstream: JobState) -> bool | None:
    """True: satisfied; False: can never be; None: not yet decided."""
    if not upstream.is_terminal:
        return None
    if condition is DependencyCondition.ANY:
        return True
    if condition is DependencyCondition.SUCCESS:
        return upstream in _SUCCESS
    return upstream in {JobState.FAILED, JobState.GATE_FAILED}


@dataclass(frozen=True, slots=True)
class Readiness:
    """Pending jobs split by their dependencies."""

    ready: tuple[Job, ...]
    waiting: tuple[tuple[Job, tuple[str, ...]], ...]
    failed: tuple[DependencyFailure, ...]


def readiness(pending: Sequence[Job], states: Mapping[str, JobState]) -> Readiness:
    """Split ``pending`` jobs into ready, waiting (with the upstreams still running) and failed.

    ``states`` maps every known job id to its current state; an unknown upstream fails the job.
    """
    ready: list[Job] = []
    waiting: list[tuple[Job, tuple[str, ...]]] = []
    failed: list[DependencyFailure] = []
    for job in pending:
        open_deps: list[str] = []
        failure: DependencyFailure | None = None
        for dep in job.depends_on:
            upstream = states.get(dep.job)
            if upstream is None:
                failure = DependencyFailure(job.id, dep.job, f"upstream {dep.job!r} is unknown")
                break
            verdict = _satisfied(dep.on, upstream)
            if verdict is False:
                failure = DependencyFailure(
                    job.id,
                    dep.job,
                    f"upstream {dep.job!r} ended {upstream.value}; needed {dep.on.value}",
                )
                break
            if verdict is None:
                open_deps.append(dep.job)
        if failure is not None:
            failed.append(failure)
        elif open_deps:
            waiting.append((job, tuple(open_deps)))
        else:
            ready.append(job)
    return Readiness(tuple(ready), tuple(waiting), tuple(failed))
