"""The orchestrator integrations against a real ``budgeteer serve`` (sandbox backend, SQLite).

These tests run in their own environment (``make orchestrators``: Airflow, kfp and Metaflow pin
their own worlds); the service they talk to runs from ``BUDGETEER_SERVE_PYTHON`` (the main
environment's Python under ``make``; this one otherwise). Under ``CI=true`` a missing
orchestrator is a failure, never a skip.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ADMIN = "orchestrator-test-admin-token-0123456789"


def _job_python() -> str:
    """The jobs' interpreter: the system's, which the sandbox's job user can run, through a link
    whose path does not hold ``python3`` — kfp's local runner rewrites that string in every
    argument of a task (the spec JSON too) into its own interpreter's path."""
    folder = Path(tempfile.mkdtemp(prefix="bg-orch-py-"))
    folder.chmod(0o755)
    link = folder / "jobpy"
    link.symlink_to("/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable)
    return str(link)


JOB_PYTHON = _job_python()


def need(module: str) -> None:
    """Skip when ``module`` is not installed — a failure under ``CI=true``."""
    if importlib.util.find_spec(module) is not None:
        return
    message = f"{module} is not installed (make orchestrators installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class Service:
    url: str
    token: str
    work: Path


def job(name: str, code: str = "import time; time.sleep(1)", **extra: Any) -> dict[str, Any]:
    """A short job whose command runs ``code``."""
    return {
        "name": name,
        "team": "growth",
        "work": {"reference_hours": 0.01},
        "spot": {"allowed": False},
        "command": [JOB_PYTHON, "-c", code],
        **extra,
    }


def reporting(metric: str, value: float) -> str:
    """Job code that reports ``metric`` in a progress report (a gate reads it)."""
    return (
        "import json, os; open(os.environ['BUDGETEER_PROGRESS_FILE'], 'a').write("
        f"json.dumps({{'step': 1, 'total_steps': 1, {metric!r}: {value}}}) + '\\n')"
    )


@pytest.fixture(scope="session")
def service() -> Iterator[Service]:
    """One served budgeteer for the session (each test submits its own jobs)."""
    work = Path(tempfile.mkdtemp(prefix="bg-orch-"))
    work.chmod(0o755)  # the sandbox's job user passes through to its checkpoint folders
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {
        "store": "sqlite:///serve.db",
        "interval_seconds": 1,
        "backend": {"kind": "sandbox", "workdir": ".budgeteer", "time_scale": 60},
        "api": {"port": port, "run_any_command": True},
    }
    (work / "cfg.yaml").write_text(yaml.safe_dump(config))
    python = os.environ.get("BUDGETEER_SERVE_PYTHON", sys.executable)
    log = work / "serve.log"
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [python, "-m", "budgeteer", "serve", "--config", str(work / "cfg.yaml")],
            cwd=work,
            env={**os.environ, "BUDGETEER_ADMIN_TOKEN": ADMIN},
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise AssertionError(log.read_text())
        yield Service(url, ADMIN, work)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
