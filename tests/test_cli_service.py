"""``budgeteer submit | run | status | cancel | ledger`` on a real SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

from test_cli import budgeteer

CONFIG = """
store: sqlite:///state.db
interval_seconds: 1
backend:
  kind: sandbox
  time_scale: 2000
  workdir: work
"""


@pytest.fixture
def home(tmp_path: Path, job_python: str) -> Path:
    (tmp_path / "budgeteer.yaml").write_text(CONFIG)
    (tmp_path / "jobs.yaml").write_text(
        f"- {{name: hello, team: t, work: {{reference_hours: 0.01}},"
        f" command: [{job_python}, -c, \"print('hello')\"]}}\n"
        f"- {{name: later, team: t, work: {{reference_hours: 0.01}},"
        f" depends_on: [{{job: hello, on: failure}}], command: [{job_python}, -c, '0']}}\n"
    )
    return tmp_path


def test_submit_reads_a_pipe_once_and_keys_it_by_what_it_read(home: Path) -> None:
    """``submit <(…)``: the file is read once (it was read twice, the second time empty, so
    every piped file had the key of empty content and the second one was "already
    submitted"); the same content piped again is still accepted once."""
    cfg = str(home / "budgeteer.yaml")
    (home / "other.yaml").write_text(
        '- {name: other, team: t, work: {reference_hours: 0.01}, command: ["true"]}\n'
    )

    def piped(name: str) -> subprocess.CompletedProcess[str]:
        shell = f"{sys.executable} -m budgeteer submit <(cat {home / name}) --config {cfg}"
        return subprocess.run(
            ["bash", "-c", shell], capture_output=True, text=True, timeout=120, check=False
        )

    first, second, again = piped("jobs.yaml"), piped("other.yaml"), piped("other.yaml")
    assert first.stdout.splitlines() == ["submitted: hello", "submitted: later"], first.stderr
    assert second.stdout.splitlines() == ["submitted: other"], second.stderr
    assert again.stdout.splitlines() == ["already submitted: other"], again.stderr
    from_file = budgeteer("submit", str(home / "other.yaml"), "--config", cfg)
    assert from_file.stdout.splitlines() == ["already submitted: other"]  # the same bytes


def test_submit_run_status_ledger(home: Path) -> None:
    cfg = str(home / "budgeteer.yaml")
    out = budgeteer("submit", str(home / "jobs.yaml"), "--config", cfg)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["submitted: hello", "submitted: later"]
    again = budgeteer("submit", str(home / "jobs.yaml"), "--config", cfg)
    assert again.stdout.splitlines()[0] == "already submitted: hello"
    run = budgeteer("run", "--config", cfg, "--until-idle", "--cycles", "2000")
    assert run.returncode == 0, run.stderr
    status = budgeteer("status", "--config", cfg)
    assert "succeeded" in status.stdout
    assert "dependency_failed" in status.stdout  # 'later' needed hello to fail
    events = budgeteer("status", "hello", "--config", cfg)
    assert "provisioning" in events.stdout
    assert "running" in events.stdout
    ledger = budgeteer("ledger", "--config", cfg, "--job", "hello")
    assert ledger.returncode == 0
    total = ledger.stdout.strip().splitlines()[-1].split()[1]  # to the cent
    rows = [line for line in ledger.stdout.splitlines() if "hello" in line]
    assert len(rows) == 1  # one row per attempt by default, numbered within the job
    assert "│ 1 " in rows[0]
    detail = budgeteer("ledger", "--config", cfg, "--job", "hello", "--detail")
    stretches = [line for line in detail.stdout.splitlines() if "hello" in line]
    assert len(stretches) >= len(rows)
    exact = Decimal(detail.stdout.strip().splitlines()[-1].split()[1])  # exact in --detail
    assert exact > 0
    assert total == f"{exact.quantize(Decimal('0.01'), ROUND_HALF_EVEN):,}"


def test_cancel_a_pending_job(home: Path) -> None:
    cfg = str(home / "budgeteer.yaml")
    budgeteer("submit", str(home / "jobs.yaml"), "--config", cfg)
    out = budgeteer("cancel", "hello", "--config", cfg)
    assert out.stdout.strip() == "hello: cancelled (it had not started)"
    again = budgeteer("cancel", "hello", "--config", cfg)  # it has ended: nothing to cancel
    assert again.returncode == 1
    assert "already cancelled; nothing to cancel" in again.stderr
    out = budgeteer("cancel", "nobody", "--config", cfg)
    assert out.returncode == 2
    assert "no job 'nobody'" in out.stderr
    ledger = budgeteer("ledger", "--job", "nobody", "--config", cfg)
    assert ledger.returncode == 2  # unknown ids are errors everywhere
    assert "no job 'nobody'" in ledger.stderr


def test_store_commands_without_a_config_say_so_instead_of_making_a_store(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "budgeteer", "status"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "BUDGETEER_CONFIG"},
        check=False,
    )
    assert out.returncode == 2
    assert "--config" in out.stderr
    assert "budgeteer.yaml" in out.stderr
    assert list(tmp_path.iterdir()) == []  # no budgeteer.db appeared
    (tmp_path / "budgeteer.yaml").write_text(CONFIG)
    found = subprocess.run(
        [sys.executable, "-m", "budgeteer", "status"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert found.returncode == 0, found.stderr  # the config in the folder is used


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            "backend: {kind: nomad}",
            "backend.kind: unknown backend 'nomad'; available: sandbox, slurm, ray, ec2, kubernetes",
        ),
        ("interval_seconds: -1", "interval_seconds: Input should be greater than 0"),
        ("stroe: sqlite:///x.db", "stroe: unknown field"),
        ("backend: {time_scale: 0}", "backend.time_scale: Input should be greater than 0"),
        (
            "store: state.db",
            "store: not a database URL (sqlite:///state.db, postgresql+psycopg://user@host/db)",
        ),
        (
            "store: mysql://u@db/x",
            "store: driver 'mysql' is not one of sqlite, sqlite+pysqlite, postgresql+psycopg",
        ),
        ('backend: {workdir: "a\\0b"}', "backend.workdir: holds a NUL byte"),
        (f"catalog: {'c' * 256}", "catalog: has a name longer than 255 bytes"),
        ("backend: {grace_seconds: .inf}", "backend.grace_seconds: Input should be a finite"),
        ("backend: {workdir: c.yaml}", "backend.workdir: {tmp}/c.yaml is not a folder"),
        ("store: sqlite:///c.yaml/s.db", "store: cannot make the folder {tmp}/c.yaml: File exists"),
        (  # numpy's generators take no negative seed: it would fail in the loop, not here
            "backend: {market: {seed: -3}}",
            "backend.market.RateMarketConfig.seed: Input should be greater than or equal to 0",
        ),
    ],
)
def test_bad_config_is_named(tmp_path: Path, config: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(config)
    out = budgeteer("status", "--config", str(path))
    assert out.returncode == 2
    assert message.format(tmp=tmp_path) in out.stderr
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == [path]  # nothing made


def test_run_wakes_up_on_a_submission_and_on_an_exit(tmp_path: Path, job_python: str) -> None:
    cfg = tmp_path / "budgeteer.yaml"
    # a minute of real time between cycles: only events can make this run finish in time
    cfg.write_text(
        "store: sqlite:///state.db\ninterval_seconds: 3600\n"
        "backend: {kind: sandbox, workdir: work, time_scale: 60}\n"
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "budgeteer", "run", "--config", str(cfg), "--until-idle"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert run.stderr is not None
    assert run.stderr.readline().strip() == "leading"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        f"- {{name: quick, team: t, work: {{reference_hours: 0.01}}, spot: "
        f"{{allowed: false}}, command: [{job_python}, -c, '0']}}\n"
    )
    assert budgeteer("submit", str(jobs), "--config", str(cfg)).returncode == 0
    # submission, start-up and exit each wake the loop (see test_loop_guards for the wake-up
    # itself on a manual clock); the timeout only guards against a hang
    assert run.wait(timeout=300) == 0
    assert "succeeded" in budgeteer("status", "--config", str(cfg)).stdout


def test_team_tokens_from_the_cli_work_on_the_api_until_revoked(home: Path) -> None:
    from fastapi.testclient import TestClient  # noqa: PLC0415

    from api_world import ADMIN, CATALOG, T0  # noqa: PLC0415 - the API test world
    from budgeteer.api import ApiContext, create_app  # noqa: PLC0415
    from budgeteer.clock import ManualClock  # noqa: PLC0415
    from budgeteer.store import SqlStore  # noqa: PLC0415

    cfg = str(home / "budgeteer.yaml")
    out = budgeteer("token", "create", "--name", "growth ci", "--team", "growth", "--config", cfg)
    assert out.returncode == 0, out.stderr
    token_id, secret = out.stdout.split(" (growth): ")
    bad = budgeteer("token", "create", "--name", "x", "--team", "no spaces", "--config", cfg)
    assert bad.returncode == 2
    assert "teams[0]" in bad.stderr

    def api() -> TestClient:
        store = SqlStore(f"sqlite:///{home / 'state.db'}")
        ctx = ApiContext(store, CATALOG, ManualClock(T0), lambda: None, ADMIN, b"k" * 32)  # type: ignore[arg-type, return-value]
        return TestClient(create_app(ctx))

    headers = {"Authorization": f"Bearer {secret.strip()}"}
    assert api().get("/v1/jobs", headers=headers).status_code == 200
    assert budgeteer("token", "revoke", token_id, "--config", cfg).returncode == 0
    assert api().get("/v1/jobs", headers=headers).status_code == 401
    listed = budgeteer("token", "list", "--config", cfg)
    assert token_id in listed.stdout
    assert secret.strip() not in listed.stdout


def test_submit_refuses_a_job_without_a_command(home: Path) -> None:
    cfg = str(home / "budgeteer.yaml")
    jobs = home / "nocmd.yaml"
    jobs.write_text("- {name: idle, team: t, work: {reference_hours: 1}}\n")
    out = budgeteer("submit", str(jobs), "--config", cfg)
    assert out.returncode == 2
    assert "jobs[0].command" in out.stderr
    assert "required" in out.stderr
    status = budgeteer("status", "--config", cfg)
    assert "idle" not in status.stdout  # nothing stored


def test_the_ledger_shows_what_pools_charged_their_teams(home: Path) -> None:
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    from budgeteer.store import PoolCharge, SqlStore  # noqa: PLC0415

    cfg = str(home / "budgeteer.yaml")
    assert budgeteer("submit", str(home / "jobs.yaml"), "--config", cfg).returncode == 0
    store = SqlStore(f"sqlite:///{home / 'state.db'}")
    start = datetime(2026, 12, 4, 1, tzinfo=UTC)
    store.add_pool_charge(
        PoolCharge(
            "aws/us-east-1/use1-az2/g4dn.xlarge/spot",
            "ml",
            start,
            start + timedelta(minutes=30),
            Decimal("0.5"),
            Decimal("0.25000001"),
            "idle in pool: catalog",
            ("boot-1",),
        )
    )
    store.close()
    out = budgeteer("ledger", "--config", cfg)
    assert out.returncode == 0, out.stderr
    assert "pool charges" in out.stdout
    assert any("ml" in line and "boot" not in line for line in out.stdout.splitlines())
    assert "total: 0.25 USD" in out.stdout  # nothing ran yet: the pool's charge alone
    assert "of which idle (pooled instances with no job on them): 0.25 USD" in out.stdout
    detail = budgeteer("ledger", "--config", cfg, "--detail")
    assert "total: 0.25000001 USD" in detail.stdout  # exact in --detail
    mine = budgeteer("ledger", "--config", cfg, "--job", "hello")
    assert "pool charges" not in mine.stdout  # a job's ledger is its own
    assert "total: 0.00 USD" in mine.stdout
