"""Where the scheduler reads jobs' progress reports: the store (reports sent through the API,
or posted by the simulated backend) and, for jobs that run on this machine, the progress file
the SDK appends to in the job's checkpoint folder.

Two sources behind one small port: :class:`StoreProgress` (the store alone: the simulator,
which must touch no file) and :class:`FileProgress` (the store and the files: the service).
Every record is parsed once, by :func:`budgeteer.domain.progress.parse_progress`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Protocol

from budgeteer.domain.progress import ProgressRecord, parse_progress, parse_progress_line
from budgeteer.store.base import Store


class ProgressSource(Protocol):
    """Progress reports as the scheduler reads them (loop thread only)."""

    def new_records(self, job_id: str, attempt_id: int, since: datetime) -> list[ProgressRecord]:
        """Reports of this attempt not returned before (those sent at or after ``since``)."""
        ...

    def done(self, job_id: str) -> float:
        """The largest share of the job's work any report says is done (0 when none)."""
        ...

    def marks(self, live: Iterable[tuple[str, int]]) -> tuple[float, ...]:
        """A value that changes when a live ``(job, attempt)`` reports something new."""
        ...

    def forget(self, attempt_id: int) -> None:
        """The attempt ended: drop what is kept for it."""
        ...


class StoreProgress:
    """Reports from the store only, read incrementally by report id."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._read: dict[str, int] = {}  # job → last report id returned by new_records
        self._done: dict[str, tuple[int, float]] = {}  # job → (last report id, share done)

    def new_records(self, job_id: str, attempt_id: int, since: datetime) -> list[ProgressRecord]:
        """See :class:`ProgressSource`."""
        reports = self.store.progress(job_id, self._read.get(job_id, 0))
        if not reports:
            return []
        self._read[job_id] = reports[-1].id
        return [
            dataclasses.replace(parse_progress(r.record), at=r.at) for r in reports if r.at >= since
        ]

    def done(self, job_id: str) -> float:
        """See :class:`ProgressSource`."""
        last_id, done = self._done.get(job_id, (0, 0.0))
        fresh = self.store.progress(job_id, last_id)
        if fresh:
            done = max(done, max_fraction(parse_progress(r.record) for r in fresh))
            self._done[job_id] = (fresh[-1].id, done)
        return done

    def marks(self, live: Iterable[tuple[str, int]]) -> tuple[float, ...]:
        """See :class:`ProgressSource`."""
        out = []
        for job_id, _ in live:
            reports = self.store.progress(job_id, self._read.get(job_id, 0))
            out.append(float(reports[-1].id if reports else 0))
        return tuple(out)

    def forget(self, attempt_id: int) -> None:
        """See :class:`ProgressSource`."""


#: Of a job's progress file, at most this much is read at a time (the rest at the next read):
#: a job that writes without end, or one line without end, costs the loop no more than that.
MAX_READ_BYTES = 4 * 1024 * 1024
#: A longer line is no report (the SDK writes lines of about 100 bytes) and is not parsed.
MAX_LINE_BYTES = 64 * 1024


def _reports(chunk: bytes) -> list[ProgressRecord]:
    """The reports among the lines of ``chunk`` (lines too long or not JSON are skipped)."""
    out = []
    for line in chunk.splitlines():
        if len(line) <= MAX_LINE_BYTES:
            record = parse_progress_line(line.decode(errors="replace"))
            if record is not None:
                out.append(record)
    return out


class FileProgress(StoreProgress):
    """The store's reports and the progress file of each job (``ROOT/JOB/progress.jsonl``),
    the file read from where the last read stopped (complete lines only; at most
    :data:`MAX_READ_BYTES` a read, so a job writing garbage cannot stall or swell the loop)."""

    def __init__(self, store: Store, checkpoint_root: Path) -> None:
        super().__init__(store)
        self.root = checkpoint_root
        self._offset: dict[int, int] = {}  # attempt → bytes of the file already read

    def path(self, job_id: str) -> Path:
        """The progress file the job's SDK writes in its checkpoint folder."""
        return self.root / job_id / "progress.jsonl"

    def new_records(self, job_id: str, attempt_id: int, since: datetime) -> list[ProgressRecord]:
        """See :class:`ProgressSource`."""
        records = super().new_records(job_id, attempt_id, since)
        path = self.path(job_id)
        if not path.exists():
            return records
        with open(path, "rb") as fh:
            fh.seek(self._offset.get(attempt_id, 0))
            chunk = fh.read(MAX_READ_BYTES)
        end = chunk.rfind(b"\n") + 1
        if end == 0 and len(chunk) == MAX_READ_BYTES:
            end = len(chunk)  # one line longer than a whole read: passed over, not waited for
        self._offset[attempt_id] = self._offset.get(attempt_id, 0) + end
        return records + _reports(chunk[:end])

    def done(self, job_id: str) -> float:
        """See :class:`ProgressSource` (of the file, its last :data:`MAX_READ_BYTES`: the
        newest reports, which say the most)."""
        done = super().done(job_id)
        path = self.path(job_id)
        if path.exists():
            with open(path, "rb") as fh:
                size = fh.seek(0, 2)
                fh.seek(max(size - MAX_READ_BYTES, 0))
                tail = fh.read(MAX_READ_BYTES)
            if size > MAX_READ_BYTES:
                tail = tail[tail.find(b"\n") + 1 :]  # the first line, cut, is no report
            done = max(done, max_fraction(_reports(tail)))
        return done

    def marks(self, live: Iterable[tuple[str, int]]) -> tuple[float, ...]:
        """See :class:`ProgressSource`."""
        pairs = list(live)
        files = []
        for job_id, _ in pairs:
            path = self.path(job_id)
            files.append(path.stat().st_mtime if path.exists() else 0.0)
        return (*files, *super().marks(pairs))

    def forget(self, attempt_id: int) -> None:
        """See :class:`ProgressSource`."""
        self._offset.pop(attempt_id, None)


def max_fraction(records: Iterable[ProgressRecord]) -> float:
    """The largest share done among ``records`` (0 when none says)."""
    return max((r.fraction for r in records if r.fraction is not None), default=0.0)
