"""Restart safety: SIGKILL the scheduler at random points of a multi-job run, ten times; every
job still ends exactly once, no attempt runs twice, and the ledger has no gap and no overlap."""

from __future__ import annotations

import itertools
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from budgeteer.domain.job import JobState
from budgeteer.store import SqlStore
from builders import job_env
from test_cli import budgeteer

SCRIPT = Path(__file__).parents[1] / "examples" / "train_linear.py"
ARGS = ["--epochs", "15", "--step-seconds", "0.003"]


def test_sigkill_the_scheduler_ten_times(tmp_path: Path, job_python: str) -> None:
    baseline = tmp_path / "baseline.npy"
    subprocess.run(
        [sys.executable, str(SCRIPT), *ARGS, "--out", str(baseline)],
        check=True,
        env=job_env(BUDGETEER_CHECKPOINT_DIR=str(tmp_path / "base")),
    )
    cfg = tmp_path / "budgeteer.yaml"
    cfg.write_text(
        "store: sqlite:///state.db\ninterval_seconds: 1\n"
        "backend: {kind: sandbox, time_scale: 600, workdir: work}\n"
    )
    jobs = tmp_path / "jobs.json"
    specs = [
        {
            "name": f"job{i}",
            "team": "t",
            "work": {"reference_hours": 0.01},
            "spot": {"allowed": False},
            "command": [
                job_python,
                str(SCRIPT),
                *ARGS,
                "--out",  # in the job's own folder: writable whoever the job runs as
                str(tmp_path / "work" / "checkpoints" / f"job{i}" / "model.npy"),
            ],
        }
        for i in range(3)
    ]
    jobs.write_text(json.dumps(specs))
    assert budgeteer("submit", str(jobs), "--config", str(cfg)).returncode == 0

    rng = random.Random(7)
    reattached = 0
    for _ in range(10):
        proc = subprocess.Popen(
            [sys.executable, "-m", "budgeteer", "run", "--config", str(cfg)],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        # kill only once this process has acted on the jobs (a launch, or a re-attach of an
        # earlier process's attempts), then at a seeded random moment after
        for line in proc.stderr:
            reattached += line.startswith("re-attached")
            if line.startswith(("launched", "re-attached", "attempt of")):
                break
        time.sleep(rng.uniform(0.0, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        if _all_ended(tmp_path):
            break
    final = budgeteer("run", "--config", str(cfg), "--until-idle", "--cycles", "1000000")
    assert final.returncode == 0, final.stderr
    reattached += final.stderr.count("re-attached")
    assert reattached >= 1  # a later process took over attempts an earlier one launched

    store = SqlStore(f"sqlite:///{tmp_path / 'state.db'}")
    for i in range(3):
        job_id = f"job{i}"
        folder = tmp_path / "work" / "checkpoints" / job_id  # the job's working folder
        assert store.job(job_id).state is JobState.SUCCEEDED
        states = [e.to_state for e in store.events(job_id)]
        assert sum(s.is_terminal for s in states) == 1  # ended exactly once
        assert np.array_equal(np.load(baseline), np.load(folder / "model.npy"))
        progress = folder / "progress.jsonl"
        epochs = [json.loads(line)["epoch"] for line in progress.read_text().splitlines()]
        assert epochs == sorted(set(epochs))  # never two trainers at once, never restarted
        attempts = store.attempts(job_id)
        assert [a.number for a in attempts] == list(range(1, len(attempts) + 1))
        for attempt in attempts:
            entries = [e for e in store.ledger(job_id) if e.attempt_id == attempt.id]
            if not entries:
                continue
            assert entries[0].start == attempt.started_at
            assert all(b.start == a.end for a, b in itertools.pairwise(entries))
            assert attempt.ended_at is not None
            assert entries[-1].end == attempt.ended_at
    store.close()


def _all_ended(tmp_path: Path) -> bool:
    store = SqlStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        return all(store.job(f"job{i}").state.is_terminal for i in range(3))
    finally:
        store.close()
