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


class FileProgress(StoreProgress):
    """The store's reports and the progress file of each job (``ROOT/JOB/progress.jsonl``),
    the file read from where the last read stopped (complete lines only)."""

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
            chunk = fh.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset[attempt_id] = self._offset.get(attempt_id, 0) + len(complete)
        for line in complete.decode(errors="replace").splitlines():
            record = parse_progress_line(line)
            if record is not None:
                records.append(record)
        return records

    def done(self, job_id: str) -> float:
        """See :class:`ProgressSource`."""
        done = super().done(job_id)
        path = self.path(job_id)
        if path.exists():
            lines = path.read_text(errors="replace").splitlines()
            parsed = (parse_progress_line(line) for line in lines)
            done = max(done, max_fraction(r for r in parsed if r is not None))
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
