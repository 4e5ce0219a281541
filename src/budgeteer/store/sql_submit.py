"""Submissions as SQL: a batch of them inside one transaction (the group commit of
:class:`~budgeteer.store.sql.SqlStore`, see :mod:`budgeteer.store.group_commit`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from budgeteer.domain.job import JobState
from budgeteer.domain.lifecycle import check_transition
from budgeteer.store import schema as t
from budgeteer.store.base import IdempotencyConflict, Submission, SubmitRequest
from budgeteer.store.codec import job_to_dict
from budgeteer.store.sql_support import replay_row


@dataclass(frozen=True, slots=True)
class _Known:
    """An idempotency key stored earlier in the same batch (read like its row)."""

    request_hash: str
    job_ids: list[str]


class KeysSeen(Exception):
    """Some idempotency keys of the batch were stored before (retries): the optimistic
    write is rolled back and the batch written the careful way, :func:`submit_in`."""


def submit_fresh(
    conn: Connection, requests: Sequence[SubmitRequest]
) -> list[Submission | BaseException]:
    """The usual batch, in the fewest statements: assume its idempotency keys and job ids are
    new. Claims the keys with ``INSERT … ON CONFLICT DO NOTHING RETURNING`` (raises
    :class:`KeysSeen` if one was there), then inserts the jobs (an id that exists raises
    ``IntegrityError``). Either way the caller rolls back, and nothing is written."""
    outcomes, jobs, events, new_keys = _sort(requests, {}, set())
    if new_keys:
        claim = _insert_new(conn, t.idempotency_keys).returning(t.idempotency_keys.c.key)
        claimed = {row.key for row in conn.execute(claim, new_keys)}
        if len(claimed) < len(new_keys):
            raise KeysSeen
    _insert(conn, jobs, events, [])
    return outcomes


def _insert_new(conn: Connection, table: sa.Table) -> Any:
    """``INSERT`` that skips rows whose key exists (both dialects say it the same way)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table).on_conflict_do_nothing()


def submit_in(
    conn: Connection, requests: Sequence[SubmitRequest]
) -> list[Submission | BaseException]:
    """The submissions of a batch inside one transaction: each replays its idempotency key,
    clashes with an existing job id, or is stored; multi-row inserts for all of them."""
    keys = [r.idempotency_key for r in requests if r.idempotency_key is not None]
    known: dict[str, Any] = {}
    if keys:
        rows = conn.execute(sa.select(t.idempotency_keys).where(t.idempotency_keys.c.key.in_(keys)))
        known = {row.key: row for row in rows}
    ids = [j.id for r in requests for j in r.jobs]
    taken: set[str] = set()
    if ids:
        match = t.jobs.c.id == ids[0] if len(ids) == 1 else t.jobs.c.id.in_(ids)
        taken = {row.id for row in conn.execute(sa.select(t.jobs.c.id).where(match))}
    outcomes, jobs, events, new_keys = _sort(requests, known, taken)
    _insert(conn, jobs, events, new_keys)
    return outcomes


Rows = list[dict[str, Any]]


def _sort(
    requests: Sequence[SubmitRequest], known: dict[str, Any], taken: set[str]
) -> tuple[list[Submission | BaseException], Rows, Rows, Rows]:
    """Each request's outcome given the keys ``known`` and the job ids ``taken`` (both grow
    with the batch's own), and the rows to insert for the stored ones."""
    outcomes: list[Submission | BaseException] = []
    jobs: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    new_keys: list[dict[str, Any]] = []
    for r in requests:
        key = r.idempotency_key
        if key is not None and key in known:
            try:
                outcomes.append(replay_row(known[key], r.request_hash, key))
            except IdempotencyConflict as exc:
                outcomes.append(exc)
            continue
        mine = [j.id for j in r.jobs]
        clash = next((i for i in mine if i in taken), None)
        if clash is not None:
            outcomes.append(IdempotencyConflict(f"job id {clash!r} exists already"))
            continue
        if len(set(mine)) < len(mine):
            outcomes.append(IdempotencyConflict("a job id in this batch exists already"))
            continue
        for job in r.jobs:
            check_transition(job.id, None, JobState.SUBMITTED)
        taken.update(mine)
        jobs += [
            {
                "id": j.id,
                "seq": j.seq,
                "team": j.team,
                "tier": j.tier.name,
                "state": "submitted",
                "spec": job_to_dict(j),
                "submitted_at": j.submitted_at,
            }
            for j in r.jobs
        ]
        events += [
            {
                "job_id": j.id,
                "seq": 0,
                "at": r.at,
                "from_state": None,
                "to_state": "submitted",
                "cause": "submitted",
            }
            for j in r.jobs
        ]
        if key is not None:
            new_keys.append({"key": key, "request_hash": r.request_hash, "job_ids": mine})
            known[key] = _Known(r.request_hash, mine)
        outcomes.append(Submission(tuple(mine), replayed=False))
    return outcomes, jobs, events, new_keys


def _insert(conn: Connection, jobs: Rows, events: Rows, new_keys: Rows) -> None:
    if jobs:
        conn.execute(t.jobs.insert(), jobs)
        conn.execute(t.job_events.insert(), events)
    if new_keys:
        conn.execute(t.idempotency_keys.insert(), new_keys)
