"""One submit path, for the API and the CLI alike: job specs → jobs → the store.

The specs are converted as one batch (:func:`~budgeteer.spec.batch.jobs_from_specs`: names are
ids within the batch, dependencies on the batch or on ``existing`` jobs, cycles rejected with
the cycle named), numbered with sequence numbers that come after every job already stored
(they order ties), given their final ids (``ids``: the API makes them unique; a file keeps its
names), and stored atomically under the idempotency key, if any.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from budgeteer.domain.job import Job
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.spec.batch import jobs_from_specs
from budgeteer.spec.job import JobSpec
from budgeteer.store.base import Store, Submission, SubmitRequest

#: Why a spec without a command is refused.
REQUIRED = "required: this service's backend runs commands"


def submit_specs(store: Store, specs: Sequence[JobSpec], **how: Any) -> Submission:
    """Convert ``specs`` and store them as one submission (see :func:`prepare`)."""
    request = prepare(store, specs, **how)
    return store.submit(
        request.jobs,
        at=request.at,
        idempotency_key=request.idempotency_key,
        request_hash=request.request_hash,
    )


def prepare(
    store: Store,
    specs: Sequence[JobSpec],
    *,
    now: datetime,
    known_accelerators: Sequence[str],
    first_seq: Callable[[int], int] | None = None,
    ids: Callable[[Job], str] | None = None,
    existing: Mapping[str, str] | None = None,
    idempotency_key: str | None = None,
    request_hash: str = "",
    source: str | None = None,
    positions: Sequence[int] | None = None,
    single: bool = False,
    require_command: bool = False,
) -> SubmitRequest:
    """Convert ``specs`` into the request that stores them as one submission (see the module
    docstring).
    ``first_seq(n)`` hands out the first of ``n`` sequence numbers (default: the store's
    next); raises :class:`~budgeteer.errors.SpecErrors` naming every bad field, and stores
    nothing then. With ``require_command`` (the backend runs commands) every spec needs one."""
    if require_command:
        where = list(positions) if positions is not None else list(range(len(specs)))
        missing = [
            SpecError("command" if single else f"jobs[{where[i]}].command", REQUIRED, source)
            for i, spec in enumerate(specs)
            if not spec.command
        ]
        if missing:
            raise SpecErrors(missing)
    seq = first_seq(len(specs)) if first_seq is not None else store.next_seq()
    jobs = jobs_from_specs(
        specs,
        now=now,
        known_accelerators=known_accelerators,
        existing=existing,
        first_seq=seq,
        source=source,
        positions=positions,
        single=single,
    )
    if ids is not None:
        final = {j.id: ids(j) for j in jobs}
        jobs = [
            dataclasses.replace(
                j,
                id=final[j.id],
                depends_on=tuple(
                    dataclasses.replace(d, job=final.get(d.job, d.job)) for d in j.depends_on
                ),
            )
            for j in jobs
        ]
    return SubmitRequest(tuple(jobs), now, idempotency_key, request_hash)
