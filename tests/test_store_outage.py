"""A short database outage costs retries, not the process: PostgreSQL is stopped for a few
seconds while ``budgeteer run`` runs jobs, then started again; the run finishes, every job
succeeds once, nothing is launched twice, and the ledger is exact and contiguous."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

from budgeteer.domain.job import JobState
from budgeteer.store import SqlStore
from builders import NOW, make_job
from conftest import PrivatePostgres
from test_cli import budgeteer


def test_postgres_restarting_during_a_run(
    tmp_path: Path, private_postgres: PrivatePostgres, job_python: str
) -> None:
    cfg = tmp_path / "budgeteer.yaml"
    cfg.write_text(
        f"store: {private_postgres.url}\ninterval_seconds: 1\n"
        "backend: {kind: sandbox, time_scale: 60, workdir: work}\n"
    )
    specs = [
        {
            "name": f"job{i}",
            "team": "t",
            "work": {"reference_hours": 0.05},
            "spot": {"allowed": False},
            "command": [job_python, "-c", "import time; time.sleep(6)"],
        }
        for i in range(3)
    ]
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps(specs))
    assert budgeteer("submit", str(jobs), "--config", str(cfg)).returncode == 0
    run = subprocess.Popen(
        [sys.executable, "-m", "budgeteer", "run", "--config", str(cfg), "--until-idle"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert run.stderr is not None
    lines: list[str] = []
    for line in run.stderr:  # wait until the jobs run: then the database goes away
        lines.append(line)
        if line.startswith("launched"):
            break
    private_postgres.stop()
    time.sleep(4)
    private_postgres.start()
    _, rest = run.communicate(timeout=180)
    assert run.returncode == 0, "".join(lines) + rest

    store = SqlStore(private_postgres.url)
    try:
        for spec in specs:
            job = store.job(str(spec["name"]))
            assert job.state is JobState.SUCCEEDED
            assert sum(e.to_state.is_terminal for e in store.events(job.id)) == 1
            [attempt] = store.attempts(job.id)  # launched once
            entries = store.ledger(job.id)
            assert entries[0].start == attempt.started_at
            assert all(b.start == a.end for a, b in itertools.pairwise(entries))
            assert entries[-1].end == attempt.ended_at
            seconds = Decimal(str((attempt.ended_at - attempt.started_at).total_seconds()))
            price = entries[0].usd_per_hour
            expected = price * attempt.instances * seconds / 3600
            billed = sum((e.amount_usd for e in entries), Decimal(0))
            # each entry is rounded half-even to the ledger's 10⁻⁸ USD, and no further
            assert abs(billed - expected) <= len(entries) * Decimal("0.5e-8")
    finally:
        store.close()


def test_after_a_restart_the_first_call_reconnects_every_pooled_connection(
    private_postgres: PrivatePostgres,
) -> None:
    """Connections in the pool die with the server; the store keeps no ``pre_ping`` (a round
    trip per transaction), so the first call meets a dead one: SQLAlchemy then discards the
    whole pool and the store's retry reconnects — each call after the restart succeeds, from
    any thread, without ``StoreUnavailable``."""
    store = SqlStore(private_postgres.url)
    try:
        store.submit([make_job("a")], at=NOW)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # fill the pool
            assert all(
                j == ["a"] for j in pool.map(lambda _: [x.id for x in store.jobs()], range(8))
            )
        private_postgres.stop()
        private_postgres.start()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            seen = list(pool.map(lambda _: [x.id for x in store.jobs()], range(8)))
        assert seen == [["a"]] * 8
        store.submit([make_job("b")], at=NOW)
        assert [j.id for j in store.jobs()] == ["a", "b"]
    finally:
        store.close()
