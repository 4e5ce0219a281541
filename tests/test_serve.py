"""``budgeteer serve`` as a real process: a job submitted through the client runs, reports its
progress through the API with its job token, is checkpointed when the service gets SIGTERM, and
resumes from that checkpoint when the service starts again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from budgeteer.client import Client
from budgeteer.store import SqlStore

ADMIN = "serve-test-admin-token-0123456789"


def _start(work: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "budgeteer", "serve", "--config", str(work / "cfg.yaml")],
        cwd=work,
        env={**os.environ, "BUDGETEER_ADMIN_TOKEN": ADMIN},
        stdout=subprocess.DEVNULL,
        stderr=open(work / "serve.log", "ab"),  # noqa: SIM115 - the server's log
    )
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError((work / "serve.log").read_text())


def _until(check: object, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_sigterm_checkpoints_and_the_next_start_resumes(tmp_path: Path, job_python: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {
        "store": "sqlite:///serve.db",
        "interval_seconds": 30,
        "backend": {"workdir": ".budgeteer", "time_scale": 60, "grace_seconds": 60},
        "api": {
            "port": port,
            "allowed_commands": [[job_python, "-m", "budgeteer.examples.train_linear"]],
        },
    }
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    spec = {
        "name": "long",
        "team": "growth",
        "work": {"reference_hours": 0.5},
        "spot": {"allowed": False},
        "command": [
            job_python,
            "-m",
            "budgeteer.examples.train_linear",
            "--epochs",
            "40",
            "--step-seconds",
            "0.01",
            "--out",
            "model.npy",
        ],
    }
    url = f"http://127.0.0.1:{port}"
    server = _start(tmp_path, port)
    try:
        with Client(url, ADMIN) as client:
            job_id = client.submit(spec, idempotency_key="serve-test").id
            _until(lambda: (client.get(job_id).progress or {}).get("epoch", 0) >= 3, 120)
            assert client.get(job_id).state == "running"
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=120) in {0, -signal.SIGTERM}  # uvicorn re-raises it, after
    finally:
        if server.poll() is None:
            server.kill()

    store = SqlStore(f"sqlite:///{tmp_path / 'serve.db'}")
    first = store.attempts(job_id)
    assert len(first) == 1
    assert first[0].exit_reason is not None
    assert first[0].exit_reason.startswith("stopped: service shutdown")
    assert store.job(job_id).state.value == "queued"
    reported = [r.record for r in store.progress(job_id)]
    assert reported  # the SDK reported through the API with its job token
    stopped_at = max(r["epoch"] for r in reported)
    store.close()
    assert (tmp_path / ".budgeteer" / "checkpoints" / job_id / "LATEST").exists()

    server = _start(tmp_path, port)
    try:
        with Client(url, ADMIN) as client:
            _until(lambda: client.get(job_id).done, 180)
            assert client.get(job_id).state == "succeeded"
            events = [e["to"] for e in client.events(job_id)]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    assert events.count("running") == 2
    store = SqlStore(f"sqlite:///{tmp_path / 'serve.db'}")
    epochs = [r.record["epoch"] for r in store.progress(job_id)]
    store.close()
    # the second run went on from the checkpoint: no epoch was trained twice from scratch
    after = epochs[len(reported) :]
    assert after
    assert min(after) >= stopped_at
    assert epochs[-1] == 40
