"""The API's group commit on the event loop (budgeteer.api.batcher)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from budgeteer.api.batcher import SubmitBatcher
from budgeteer.store import IdempotencyConflict, Submission, SubmitRequest
from builders import NOW, make_job


def _request(name: str) -> SubmitRequest:
    return SubmitRequest((make_job(name),), NOW, None, "")


class _Recorder:
    """A store's ``submit_many`` that records its batches; the first waits to be released,
    so that requests arriving meanwhile queue for the next batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = threading.Event()

    def __call__(self, requests: Sequence[SubmitRequest]) -> list[Submission | BaseException]:
        names = [r.jobs[0].id for r in requests]
        self.batches.append(names)
        if len(self.batches) == 1:
            self.release.wait(5)
        return [
            IdempotencyConflict(f"{n} clashes") if n.startswith("bad") else Submission((n,), False)
            for n in names
        ]


async def _writing(recorder: _Recorder) -> None:
    """Until the first batch is being written."""
    while not recorder.batches:
        await asyncio.sleep(0.005)


def test_requests_arriving_while_a_batch_is_written_share_the_next_one() -> None:
    recorder = _Recorder()

    async def scenario() -> list[Submission | BaseException]:
        batcher = SubmitBatcher(recorder)
        first = asyncio.create_task(batcher.submit(_request("a")))
        await _writing(recorder)
        rest = [asyncio.create_task(batcher.submit(_request(n))) for n in ("b", "bad1", "c")]
        await asyncio.sleep(0)
        recorder.release.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    out = asyncio.run(scenario())
    assert recorder.batches == [["a"], ["b", "bad1", "c"]]
    assert out[0] == Submission(("a",), False)
    assert out[1] == Submission(("b",), False)
    assert isinstance(out[2], IdempotencyConflict)  # its own error, not its neighbours'
    assert out[3] == Submission(("c",), False)


def test_a_batch_that_fails_as_a_whole_fails_each_waiter_and_the_next_batch_runs() -> None:
    calls: list[int] = []

    def flaky(requests: Sequence[SubmitRequest]) -> list[Submission | BaseException]:
        calls.append(len(requests))
        if len(calls) == 1:
            raise RuntimeError("database gone")
        return [Submission((r.jobs[0].id,), False) for r in requests]

    async def scenario() -> tuple[list[BaseException | Submission], Submission]:
        batcher = SubmitBatcher(flaky)
        failed = await asyncio.gather(
            batcher.submit(_request("a")), batcher.submit(_request("b")), return_exceptions=True
        )
        return failed, await batcher.submit(_request("c"))

    failed, later = asyncio.run(scenario())
    assert all(isinstance(f, RuntimeError) for f in failed)
    assert later == Submission(("c",), False)


def test_a_client_that_goes_away_does_not_stop_the_batch() -> None:
    recorder = _Recorder()

    async def scenario() -> Submission:
        batcher = SubmitBatcher(recorder)
        gone = asyncio.create_task(batcher.submit(_request("a")))
        await _writing(recorder)
        stays = asyncio.create_task(batcher.submit(_request("b")))
        await asyncio.sleep(0)
        gone.cancel()
        recorder.release.set()
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await stays

    assert asyncio.run(scenario()) == Submission(("b",), False)
    assert recorder.batches == [["a"], ["b"]]
