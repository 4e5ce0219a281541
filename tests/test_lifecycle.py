"""The job lifecycle transition table."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from budgeteer.domain.job import JobState as S
from budgeteer.domain.lifecycle import (
    TRANSITIONS,
    IllegalTransition,
    JobEvent,
    check_transition,
    state_from_events,
)

AT = datetime(2026, 12, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (S.QUEUED, S.PROVISIONING),
        (S.PROVISIONING, S.RUNNING),
        (S.RUNNING, S.PREEMPTED),
        (S.PREEMPTED, S.RECOVERING),
        (S.RECOVERING, S.RUNNING),
        (S.RUNNING, S.CHECKPOINTING),
        (S.CHECKPOINTING, S.QUEUED),
        (S.RUNNING, S.STOPPED_EARLY),
        (S.HELD, S.QUEUED),
        (S.WAITING, S.DEPENDENCY_FAILED),
    ],
)
def test_legal_transitions(a: S, b: S) -> None:
    check_transition("j", a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (S.SUCCEEDED, S.RUNNING),
        (S.CANCELLED, S.QUEUED),
        (S.QUEUED, S.RUNNING),
        (S.QUEUED, S.SUCCEEDED),
        (S.HELD, S.RUNNING),
        (S.PREEMPTED, S.SUCCEEDED),
        (S.RUNNING, S.RUNNING),
        (None, S.QUEUED),
    ],
)
def test_illegal_transitions_are_errors(a: S | None, b: S) -> None:
    with pytest.raises(IllegalTransition, match="illegal transition"):
        check_transition("j", a, b)


def test_terminal_states_move_nowhere_and_every_state_is_in_the_table() -> None:
    assert set(TRANSITIONS) == set(S)
    for state in S:
        assert (not TRANSITIONS[state]) == state.is_terminal


def test_state_is_the_fold_of_events() -> None:
    path = [S.SUBMITTED, S.QUEUED, S.PROVISIONING, S.RUNNING, S.SUCCEEDED]
    events = [
        JobEvent("j", i, AT, path[i - 1] if i else None, s, "test") for i, s in enumerate(path)
    ]
    assert state_from_events("j", events) is S.SUCCEEDED
    gap = [events[0], events[2]]
    with pytest.raises(IllegalTransition):
        state_from_events("j", gap)
