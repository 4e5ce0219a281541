"""Group commit for the event loop: concurrent submissions share one trip to the store.

An ``async`` endpoint hands its prepared :class:`~budgeteer.store.SubmitRequest` to
:meth:`SubmitBatcher.submit` and awaits its own outcome. When no batch is being written, the
request starts one; while a batch is written (in a worker thread: the store is blocking), new
requests queue for the next. So under load a whole burst costs one thread hop, one transaction
and one commit (:meth:`~budgeteer.store.Store.submit_many`), and alone a request is a batch of
one — no waiting for company. (:mod:`budgeteer.store.group_commit` does the same for threads:
the CLI's and the scheduler's callers.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import anyio.to_thread

from budgeteer.store import Submission, SubmitRequest

#: Largest batch written at once (bounds a transaction and a waiter's latency).
MAX_BATCH = 256

RunBatch = Callable[[Sequence[SubmitRequest]], Sequence[Submission | BaseException]]


class SubmitBatcher:
    """Batches concurrent :meth:`submit` calls of one event loop (see the module docstring)."""

    def __init__(self, run_batch: RunBatch) -> None:
        self._run_batch = run_batch
        self._queue: list[tuple[SubmitRequest, asyncio.Future[Submission]]] = []
        self._writing = False
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps weak references

    async def submit(self, request: SubmitRequest) -> Submission:
        """Store ``request`` in the next batch; its own submission, or raise its own error."""
        done: asyncio.Future[Submission] = asyncio.get_running_loop().create_future()
        self._queue.append((request, done))
        if not self._writing:
            self._writing = True
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return await done

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                try:
                    outcomes: Sequence[Submission | BaseException] = await anyio.to_thread.run_sync(
                        self._run_batch, [r for r, _ in batch]
                    )
                except Exception as exc:  # the whole batch failed: each waiter gets the error
                    outcomes = [exc] * len(batch)
                for (_, done), outcome in zip(batch, outcomes, strict=True):
                    if done.cancelled():  # the client went away; the job is stored anyway
                        continue
                    if isinstance(outcome, BaseException):
                        done.set_exception(outcome)
                    else:
                        done.set_result(outcome)
        finally:
            self._writing = False
