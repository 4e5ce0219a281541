"""Only one scheduler acts: leader locks, and two `budgeteer run` processes on one store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from budgeteer.store.leader import FileLeaderLock, PostgresLeaderLock
from test_cli import budgeteer


def _eventually(check: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition never held")


def test_file_lock_is_exclusive_and_dies_with_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "db.leader"
    a, b = FileLeaderLock(path), FileLeaderLock(path)
    assert a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert b.try_acquire()
    b.release()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pathlib import Path; "
                "from budgeteer.store.leader import FileLeaderLock; "
                f"lock = FileLeaderLock(Path({str(path)!r})); assert lock.try_acquire(); "
                "print('held', flush=True); "
                "time.sleep(600)"
            ),
        ],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == b"held"
    assert not a.try_acquire()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert a.try_acquire()


def test_postgres_advisory_lock(postgres_url: str) -> None:
    one, two = sa.create_engine(postgres_url), sa.create_engine(postgres_url)
    a, b = PostgresLeaderLock(one), PostgresLeaderLock(two)
    assert a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert b.try_acquire()
    b.release()
    one.dispose()
    two.dispose()


def _config(tmp_path: Path, store: str) -> Path:
    cfg = tmp_path / "budgeteer.yaml"
    cfg.write_text(
        f"store: {store}\ninterval_seconds: 1\n"
        "backend: {kind: sandbox, time_scale: 2000, workdir: work}\n"
    )
    return cfg


def _run(cfg: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "budgeteer", "run", "--config", str(cfg), *extra],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _read_until(proc: subprocess.Popen[str], text: str) -> str:
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if text in line:
            return seen
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"never saw {text!r}; got {seen!r}")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_schedulers_one_acts_and_the_other_takes_over(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest, job_python: str
) -> None:
    store = (
        f"sqlite:///{tmp_path / 'state.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    cfg = _config(tmp_path, store)
    first = _run(cfg)
    _read_until(first, "leading")
    second = _run(cfg, "--until-idle", "--cycles", "5000")
    _read_until(second, "another scheduler is the leader; waiting")
    first.send_signal(signal.SIGKILL)  # the leader dies without a word
    first.wait()
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        f"- {{name: hello, team: t, work: {{reference_hours: 0.01}}, "
        f"command: [{job_python}, -c, '0']}}\n"
    )
    assert budgeteer("submit", str(jobs), "--config", str(cfg)).returncode == 0
    log = _read_until(second, "launched hello")
    assert "leading" in log
    assert second.wait(timeout=120) == 0
    status = budgeteer("status", "--config", str(cfg))
    assert "succeeded" in status.stdout
    assert "│ 1 " in status.stdout  # one attempt: nobody launched it twice
