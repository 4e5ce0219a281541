"""Group commit: concurrent writers of one process share a transaction.

A thread that finds nobody writing becomes the leader: it takes every request queued so far,
runs them as one batch (one transaction, a few multi-row statements, one commit) and hands each
waiter its own result or error; while it writes, new requests queue for the next batch. With
one writer at a time nothing waits: a lone request is a batch of one. Under load the cost of a
transaction (its statements, its commit and, on SQLite, the writer lock) is paid once per
batch instead of once per request — what PostgreSQL's ``commit_delay`` does for the WAL, done
here for the whole round trip.

Each request keeps its own outcome: the batch function answers one result or one exception per
request, in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Req = TypeVar("Req")
Res = TypeVar("Res")

#: Largest batch taken at once (bounds a transaction's size and a waiter's latency).
MAX_BATCH = 256


@dataclass(eq=False)
class _Waiter(Generic[Req, Res]):
    request: Req
    wake: threading.Event = field(default_factory=threading.Event)  # finished, or now leads
    finished: bool = False
    result: Res | None = None
    error: BaseException | None = None


class GroupCommit(Generic[Req, Res]):
    """Batch concurrent calls of ``run_batch`` (see the module docstring)."""

    def __init__(self, run_batch: Callable[[Sequence[Req]], Sequence[Res | BaseException]]):
        self._run_batch = run_batch
        self._lock = threading.Lock()
        self._queue: list[_Waiter[Req, Res]] = []
        self._leading = False

    def submit(self, request: Req) -> Res:
        """Run ``request`` in the next batch; its own result, or raise its own error."""
        me: _Waiter[Req, Res] = _Waiter(request)
        with self._lock:
            self._queue.append(me)
            lead = not self._leading
            self._leading = True
        if not lead:
            me.wake.wait()
            if me.finished:
                return self._outcome(me)
            # else the previous leader handed over: this request is still queued
        while not me.finished:
            with self._lock:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            self._run(batch)
        with self._lock:  # done: hand over to the oldest waiter, or stop leading
            if self._queue:
                self._queue[0].wake.set()
            else:
                self._leading = False
        return self._outcome(me)

    def _run(self, batch: list[_Waiter[Req, Res]]) -> None:
        try:
            outcomes = self._run_batch([w.request for w in batch])
        except BaseException as exc:  # the whole batch failed: each waiter gets the error
            outcomes = [exc] * len(batch)
        for waiter, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                waiter.error = outcome
            else:
                waiter.result = outcome
            waiter.finished = True
            waiter.wake.set()

    @staticmethod
    def _outcome(me: _Waiter[Req, Res]) -> Res:
        if me.error is not None:
            raise me.error
        assert me.result is not None
        return me.result
