"""Group commit: concurrent submissions share a transaction, each keeps its own outcome."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from budgeteer.store import IdempotencyConflict, Store, Submission
from budgeteer.store.group_commit import GroupCommit
from builders import NOW, make_job


def test_concurrent_requests_are_batched_and_each_gets_its_own_outcome() -> None:
    batches: list[list[int]] = []
    gate = threading.Event()

    def run(requests: Sequence[int]) -> list[int | BaseException]:
        batches.append(list(requests))
        if len(batches) == 1:
            gate.wait(10)  # hold the first batch while the others queue up
        return [ValueError(f"odd {r}") if r % 2 else r * 10 for r in requests]

    group: GroupCommit[int, int] = GroupCommit(run)
    with ThreadPoolExecutor(16) as pool:
        first = pool.submit(group.submit, 0)
        while not batches:
            time.sleep(0.001)
        rest = [pool.submit(group.submit, i) for i in range(1, 16)]
        while sum(len(b) for b in batches) + len(group._queue) < 16:
            time.sleep(0.001)
        gate.set()
        assert first.result() == 0
        for i, future in enumerate(rest, start=1):
            if i % 2:
                with pytest.raises(ValueError, match=f"odd {i}"):
                    future.result()
            else:
                assert future.result() == i * 10
    assert batches[0] == [0]
    assert sorted(r for b in batches for r in b) == list(range(16))  # each exactly once
    assert len(batches) < 16  # the queued ones went together
    assert max(len(b) for b in batches) > 1


def test_a_failing_batch_fails_each_of_its_requests_and_the_next_batch_runs() -> None:
    calls = 0

    def run(requests: Sequence[str]) -> list[str | BaseException]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database went away")
        return [r.upper() for r in requests]

    group: GroupCommit[str, str] = GroupCommit(run)
    with pytest.raises(RuntimeError, match="went away"):
        group.submit("a")
    assert group.submit("b") == "B"  # not stuck leading after a failure


def test_a_store_under_concurrent_submissions_keeps_every_outcome(store: Store) -> None:
    def submit(i: int) -> Submission | Exception:
        if i < 40:  # distinct jobs
            jobs, key, digest = [make_job(f"j{i}")], f"k{i}", f"h{i}"
        elif i < 50:  # the same key and body as j0…j9: replays
            jobs, key, digest = [make_job(f"other{i}")], f"k{i - 40}", f"h{i - 40}"
        elif i < 55:  # the same key, another body: conflict
            jobs, key, digest = [make_job(f"x{i}")], f"k{i - 40}", "different"
        else:  # a job id already taken, no key
            jobs, key, digest = [make_job(f"j{i - 55}")], None, ""
        try:
            return store.submit(jobs, at=NOW, idempotency_key=key, request_hash=digest)
        except IdempotencyConflict as exc:
            return exc

    with ThreadPoolExecutor(12) as pool:
        outcomes = list(pool.map(submit, range(40)))  # concurrent, distinct
        outcomes += list(pool.map(submit, range(40, 60)))  # concurrent replays and clashes
    for i in range(40):
        assert outcomes[i] == Submission((f"j{i}",), replayed=False)
    for i in range(40, 50):
        assert outcomes[i] == Submission((f"j{i - 40}",), replayed=True)
    for i in range(50, 55):
        assert isinstance(outcomes[i], IdempotencyConflict)
        assert "different request" in str(outcomes[i])
    for i in range(55, 60):
        assert isinstance(outcomes[i], IdempotencyConflict)
    stored = sorted(j.id for j in store.jobs())
    assert stored == sorted(f"j{i}" for i in range(40))  # each once; nothing else
    for i in range(40):
        assert len(store.events(f"j{i}")) == 1
