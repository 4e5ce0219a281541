"""The job lifecycle as an explicit transition table (pure), and state derived from events.

Every change of a job's state is an append-only :class:`JobEvent` with a cause; the current
state is the fold of its events, and :func:`state_from_events` proves it (an illegal sequence
is an error, not a guess).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from budgeteer.domain.job import JobState as S
from budgeteer.errors import BudgeteerError

#: state → the states it may move to. Terminal states move nowhere.
TRANSITIONS: Mapping[S, frozenset[S]] = {
    S.SUBMITTED: frozenset({S.WAITING, S.QUEUED, S.HELD, S.CANCELLED, S.DEPENDENCY_FAILED}),
    S.WAITING: frozenset({S.QUEUED, S.HELD, S.CANCELLED, S.DEPENDENCY_FAILED}),
    S.QUEUED: frozenset({S.WAITING, S.HELD, S.PROVISIONING, S.CANCELLED, S.DEPENDENCY_FAILED}),
    S.HELD: frozenset({S.QUEUED, S.PROVISIONING, S.CANCELLED, S.DEPENDENCY_FAILED}),
    S.PROVISIONING: frozenset(
        {S.RUNNING, S.QUEUED, S.PREEMPTED, S.FAILED, S.CANCELLED, S.GATE_FAILED}
    ),
    S.RUNNING: frozenset(
        {
            S.CHECKPOINTING,
            S.PREEMPTED,
            S.QUEUED,
            S.SUCCEEDED,
            S.FAILED,
            S.CANCELLED,
            S.STOPPED_EARLY,
            S.GATE_FAILED,
        }
    ),
    S.CHECKPOINTING: frozenset(
        {S.RUNNING, S.PREEMPTED, S.QUEUED, S.FAILED, S.CANCELLED, S.STOPPED_EARLY}
    ),
    S.PREEMPTED: frozenset({S.RECOVERING, S.QUEUED, S.FAILED, S.CANCELLED}),
    S.RECOVERING: frozenset({S.PROVISIONING, S.RUNNING, S.FAILED, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.DEPENDENCY_FAILED: frozenset(),
    S.STOPPED_EARLY: frozenset(),
    S.GATE_FAILED: frozenset(),
}


class IllegalTransition(BudgeteerError):
    """A state change the lifecycle does not allow; names both states and the job."""

    def __init__(self, job_id: str, from_state: S | None, to_state: S) -> None:
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state
        start = from_state.value if from_state else "(new)"
        super().__init__(f"job {job_id}: illegal transition {start} -> {to_state.value}")


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One state change of a job: ``seq`` counts from 0 per job; ``cause`` says why."""

    job_id: str
    seq: int
    at: datetime
    from_state: S | None
    to_state: S
    cause: str


def check_transition(job_id: str, from_state: S | None, to_state: S) -> None:
    """Raise :class:`IllegalTransition` unless ``from_state → to_state`` is allowed (a new job
    starts as ``submitted``)."""
    if from_state is None:
        if to_state is not S.SUBMITTED:
            raise IllegalTransition(job_id, from_state, to_state)
        return
    if to_state not in TRANSITIONS[from_state]:
        raise IllegalTransition(job_id, from_state, to_state)


def state_from_events(job_id: str, events: Iterable[JobEvent]) -> S:
    """The state the events lead to, checking every step and the sequence numbers."""
    state: S | None = None
    for expected_seq, event in enumerate(events):
        if event.seq != expected_seq or event.from_state != state:
            raise IllegalTransition(job_id, state, event.to_state)
        check_transition(job_id, state, event.to_state)
        state = event.to_state
    if state is None:
        raise BudgeteerError(f"job {job_id} has no events")
    return state
