"""Schemathesis through a served instance (issue 13): ``budgeteer serve`` as a real process, its
scheduler loop running, fuzzed over HTTP from its own OpenAPI document with the admin's and a
team's tokens. No answer is a 5xx; afterwards the service is still ready and a normal job still
runs to success."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings

from budgeteer.client import Client

ADMIN = "fuzz-served-admin-token-0123456789"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_served_instance_survives_fuzzing_and_still_runs_a_job(
    tmp_path: Path, job_python: str
) -> None:
    port = _port()
    command = [job_python, "-c", "print('trained')"]
    config = {
        "store": "sqlite:///fuzz.db",
        "interval_seconds": 1,
        "backend": {"workdir": ".budgeteer", "time_scale": 60},
        "api": {"port": port, "allowed_commands": [command]},
    }
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    server = subprocess.Popen(
        [sys.executable, "-m", "budgeteer", "serve", "--config", "cfg.yaml"],
        cwd=tmp_path,
        env={**os.environ, "BUDGETEER_ADMIN_TOKEN": ADMIN},
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "serve.log", "wb"),  # noqa: SIM115 - the server's log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        with Client(url, ADMIN) as admin:
            team_token = admin.create_token("fuzz", ["growth"])
        tokens = (ADMIN, team_token)
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12
        answered = 0
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=10,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
            )
            def no_5xx(case: Any) -> None:
                nonlocal answered
                for token in tokens:
                    response = case.call(headers={"Authorization": f"Bearer {token}"})
                    answered += 1
                    assert response.status_code < 500, (case.method, case.path, response.text)

            no_5xx()
        assert answered >= 2 * len(operations)

        ready = httpx.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        team = f"after-fuzz-{uuid.uuid4().hex[:8]}"
        with Client(url, ADMIN) as admin:
            spec = {"name": "normal", "team": team, "priority": "P0", "command": command}
            job_id = admin.submit({**spec, "work": {"reference_hours": 0.01}}).id
            end = time.monotonic() + 180
            while not admin.get(job_id).done and time.monotonic() < end:
                time.sleep(0.3)
            assert admin.get(job_id).state == "succeeded", admin.events(job_id)
        assert server.poll() is None  # the service never fell over
    finally:
        server.terminate()
        server.wait(timeout=60)
