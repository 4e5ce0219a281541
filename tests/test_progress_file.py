"""The progress file a job's SDK appends to (``scheduler/progress.py::FileProgress``): read from
where the last read stopped, complete lines only — and, since the job writes it and the loop
reads it, a job that writes without end (or one line without end) costs the loop one bounded
read a cycle, and its later reports still arrive."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from budgeteer.scheduler import progress as progress_module
from budgeteer.scheduler.progress import FileProgress
from budgeteer.store import MemoryStore

T0 = datetime(2026, 12, 8, tzinfo=UTC)


def _report(step: int, total: int = 100) -> bytes:
    return json.dumps({"step": step, "total_steps": total, "loss": 0.5}).encode() + b"\n"


@pytest.fixture
def source(tmp_path: Path) -> tuple[FileProgress, Path]:
    fp = FileProgress(MemoryStore(), tmp_path)
    path = fp.path("job")
    path.parent.mkdir()
    path.write_bytes(b"")
    return fp, path


def test_reports_are_read_once_and_a_cut_line_waits(source: tuple[FileProgress, Path]) -> None:
    fp, path = source
    path.write_bytes(_report(1) + _report(2) + b'{"step": 3, "tot')
    assert [r.step for r in fp.new_records("job", 7, T0)] == [1, 2]
    assert fp.new_records("job", 7, T0) == []
    with path.open("ab") as fh:
        fh.write(b'al_steps": 100}\nnot json\n' + _report(4))
    assert [r.step for r in fp.new_records("job", 7, T0)] == [3, 4]
    assert fp.done("job") == pytest.approx(0.04)


def test_a_job_writing_garbage_without_end_costs_one_bounded_read_a_cycle(
    source: tuple[FileProgress, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line of 10,000 bytes with no newline, read 1,000 at a time: each read returns nothing
    and moves on by 1,000 bytes; the report after it arrives on the read that reaches it."""
    monkeypatch.setattr(progress_module, "MAX_READ_BYTES", 1000)
    monkeypatch.setattr(progress_module, "MAX_LINE_BYTES", 200)
    fp, path = source
    path.write_bytes(_report(5) + b"x" * 10_000 + b"\n" + _report(6))
    reads = [[r.step for r in fp.new_records("job", 1, T0)] for _ in range(13)]
    # the first read ends with the first report; ten more pass over the 10,000 bytes; the
    # twelfth finds the newline and the report after it
    assert reads == [[5]] + [[]] * 10 + [[6]] + [[]]


def test_a_line_too_long_is_no_report_even_when_it_is_json(
    source: tuple[FileProgress, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_module, "MAX_LINE_BYTES", 200)
    fp, path = source
    padded = json.dumps({"step": 99, "total_steps": 100, "pad": "x" * 300}).encode() + b"\n"
    path.write_bytes(_report(10) + padded + _report(20))
    assert [r.step for r in fp.new_records("job", 1, T0)] == [10, 20]
    assert fp.done("job") == pytest.approx(0.2)


def test_done_reads_the_files_tail(
    source: tuple[FileProgress, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file larger than a read: the share done is the newest reports' (the tail's), the cut
    first line of the tail passed over."""
    monkeypatch.setattr(progress_module, "MAX_READ_BYTES", 1000)
    fp, path = source
    path.write_bytes(b"".join(_report(step) for step in range(100)))  # about 4,500 bytes
    assert fp.done("job") == pytest.approx(0.99)
    path.write_bytes(_report(50) + b"y" * 5000 + b"\n")  # only garbage in the tail
    assert fp.done("job") == 0.0
