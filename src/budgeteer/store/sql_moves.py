"""Moving jobs along the lifecycle in SQL: one or many moves in the caller's transaction, all
checked against the lifecycle table before anything is written."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from budgeteer.domain.job import JobState
from budgeteer.domain.lifecycle import JobEvent, check_transition
from budgeteer.store import schema as t
from budgeteer.store.base import Move, UnknownJob, check_distinct


def move_in(conn: Connection, moves: Sequence[Move], at: datetime) -> list[JobEvent]:
    """Apply ``moves`` in ``conn``'s transaction: the jobs' rows are read (locked on
    PostgreSQL), every move is checked, then the events are appended and the states set — a
    statement per kind, not per job. Raises (writing nothing) on an unknown job or an illegal
    move."""
    check_distinct(moves)
    if not moves:
        return []
    ids = [m.job_id for m in moves]
    query = sa.select(t.jobs.c.id, t.jobs.c.state).where(t.jobs.c.id.in_(ids))
    if conn.dialect.name == "postgresql":  # rows locked in one order: no deadlock between two
        query = query.order_by(t.jobs.c.id).with_for_update()
    current = {r.id: JobState(r.state) for r in conn.execute(query)}
    for move in moves:
        if move.job_id not in current:
            raise UnknownJob(f"no job {move.job_id!r}")
        check_transition(move.job_id, current[move.job_id], move.to_state)
    counted = conn.execute(
        sa.select(t.job_events.c.job_id, sa.func.count().label("n"))
        .where(t.job_events.c.job_id.in_(ids))
        .group_by(t.job_events.c.job_id)
    )
    counts = {r.job_id: int(r.n) for r in counted}
    events = [
        JobEvent(m.job_id, counts.get(m.job_id, 0), at, current[m.job_id], m.to_state, m.cause)
        for m in moves
    ]
    conn.execute(
        t.job_events.insert(),
        [
            {
                "job_id": e.job_id,
                "seq": e.seq,
                "at": at,
                "from_state": e.from_state.value if e.from_state else None,
                "to_state": e.to_state.value,
                "cause": e.cause,
            }
            for e in events
        ],
    )
    by_state: dict[JobState, list[str]] = {}
    for m in moves:
        by_state.setdefault(m.to_state, []).append(m.job_id)
    for state, job_ids in by_state.items():
        conn.execute(t.jobs.update().where(t.jobs.c.id.in_(job_ids)).values(state=state.value))
    return events
