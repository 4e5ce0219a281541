"""Jobs never run as root and cannot reach the service's secrets (issue 13).

A served sandbox under root runs a hostile job — it reports who it is and tries to read the
signing key, the config, the store and the admin token from its environment; everything it
learned is written to its own folder, which the test reads afterwards. The rules around it
(who jobs may run as, what environment crosses over, a config holding a secret that others can
read) are checked directly."""

from __future__ import annotations

import json
import os
import pwd
import socket
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from budgeteer.backends import RateMarket, SandboxBackend
from budgeteer.backends.base import LaunchFailed, LaunchRequest
from budgeteer.backends.jobuser import (
    JobUser,
    blocked_for,
    job_environment,
    resolve_job_user,
)
from budgeteer.backends.shim import _parse
from budgeteer.client import Client
from budgeteer.clock import ManualClock
from budgeteer.errors import SpecError
from builders import make_offering
from engines import engine_missing
from test_serve import ADMIN, _start, _until

ROOT = os.geteuid() == 0

#: what a hostile job tries, reported as JSON into its working folder
SPY = """
import json, os, pathlib, sys
work = pathlib.Path(sys.argv[1])
def readable(p):
    try:
        pathlib.Path(p).read_bytes()
        return True
    except OSError:
        return False
def listable(p):
    try:
        os.listdir(p)
        return True
    except OSError:
        return False
report = {
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "cwd": os.getcwd(), "home": os.environ.get("HOME"),
    "env": sorted(os.environ),
    "secret_key": readable(work / ".budgeteer" / "secret-key"),
    "config": readable(work / "cfg.yaml"),
    "store": readable(work / "serve.db"),
    "logs": readable(work / ".budgeteer" / "logs"),
    "listing": listable(work / ".budgeteer"),
}
pathlib.Path("spy.json").write_text(json.dumps(report))
"""


def _require_root() -> None:
    if not ROOT:  # CI runs as root: there, this must be checked
        engine_missing("jobs switch users only under a service running as root")


def test_a_served_job_runs_unprivileged_and_cannot_read_the_services_secrets(
    tmp_path: Path, job_python: str
) -> None:
    _require_root()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [job_python, "-c", SPY, str(tmp_path)]
    config = {
        "store": "sqlite:///serve.db",
        "interval_seconds": 1,
        "backend": {"workdir": ".budgeteer", "time_scale": 60},
        "api": {"port": port, "allowed_commands": [command]},
    }
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(config))
    cfg.chmod(0o644)  # no secret in it: readable is allowed, but the job still must not see
    server = _start(tmp_path, port)
    try:
        with Client(f"http://127.0.0.1:{port}", ADMIN) as client:
            spec = {"name": "spy", "team": "t", "work": {"reference_hours": 0.01}}
            job_id = client.submit({**spec, "command": command}).id
            _until(lambda: client.get(job_id).done, 120)
            assert client.get(job_id).state == "succeeded"
    finally:
        server.terminate()
        server.wait(timeout=60)
    folder = tmp_path / ".budgeteer" / "checkpoints" / job_id
    report = json.loads((folder / "spy.json").read_text())
    nobody = pwd.getpwnam("nobody")
    assert report["uid"] == nobody.pw_uid != 0
    assert report["gid"] == nobody.pw_gid
    assert 0 not in report["groups"]  # no supplementary group of the service
    assert report["cwd"] == report["home"] == str(folder)
    assert not report["secret_key"]
    assert not report["store"]
    assert not report["logs"]
    assert not report["listing"]
    assert "BUDGETEER_ADMIN_TOKEN" not in report["env"]
    assert "BUDGETEER_JOB_TOKEN" in report["env"]  # its own token, to report progress
    st = folder.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (nobody.pw_uid, 0o700)
    key = tmp_path / ".budgeteer" / "secret-key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "serve.db").stat().st_mode) == 0o600


def test_a_config_holding_a_secret_must_be_private(tmp_path: Path) -> None:
    cfg = tmp_path / "budgeteer.yaml"
    cfg.write_text(yaml.safe_dump({"api": {"admin_token": "x" * 32}}))
    cfg.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if k != "BUDGETEER_ADMIN_TOKEN"}
    out = subprocess.run(
        [sys.executable, "-m", "budgeteer", "serve", "--config", str(cfg)],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2
    assert "api.admin_token" in out.stderr
    assert f"chmod 600 {cfg}" in out.stderr


def test_who_jobs_run_as() -> None:
    nobody = pwd.getpwnam("nobody")
    assert resolve_job_user(None, euid=0) == JobUser("nobody", nobody.pw_uid, nobody.pw_gid)
    assert resolve_job_user(str(nobody.pw_uid), euid=0) == resolve_job_user("nobody", euid=0)
    assert resolve_job_user(None, euid=1000) is None  # an ordinary service: its own user
    for bad, words in (
        ("root", "jobs never run as root"),
        ("0", "jobs never run as root"),
        ("no-such-user-here", "no such user"),
    ):
        with pytest.raises(SpecError) as err:
            resolve_job_user(bad, euid=0)
        assert err.value.field == "backend.run_as"
        assert words in err.value.problem
    with pytest.raises(SpecError, match="cannot run jobs as 'nobody'"):
        resolve_job_user("nobody", euid=nobody.pw_uid + 1)


def test_a_jobs_environment_is_built_not_inherited() -> None:
    service = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "BUDGETEER_ADMIN_TOKEN": "secret",
        "BUDGETEER_METRICS_TOKEN": "secret",
        "DATABASE_URL": "postgresql://u:p@db/x",
        "WANDB_API_KEY": "k",
        "OPENBLAS_CORETYPE": "Haswell",
        "OMP_NUM_THREADS": "4",
        "OPENBLAS_L2_SIZE": "512",
    }
    env = job_environment(service, ["WANDB_API_KEY"], {"BUDGETEER_JOB_ID": "j"})
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "WANDB_API_KEY": "k",
        "OPENBLAS_CORETYPE": "Haswell",
        "OMP_NUM_THREADS": "4",
        "BUDGETEER_JOB_ID": "j",
    }


def test_the_shim_never_starts_a_command_as_root() -> None:
    assert _parse(["s", "--user", "0:0", "--", "true"]) is None
    assert _parse(["s", "--user", "x:1", "--", "true"]) is None
    parsed = _parse(["s", "--instances", "2", "--user", "65534:65534", "--", "true"])
    assert parsed is not None
    assert (parsed.instances, parsed.user, parsed.command) == (2, (65534, 65534), ["true"])


def test_a_command_the_jobs_user_cannot_reach_is_refused_at_launch(tmp_path: Path) -> None:
    _require_root()
    user = resolve_job_user(None)
    assert user is not None
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    tool = closed / "train.sh"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    assert blocked_for(user, tool) == closed
    t0 = datetime(2026, 1, 5, tzinfo=UTC)
    backend = SandboxBackend(ManualClock(t0), RateMarket(t0), tmp_path / "work", run_as=user)
    request = LaunchRequest("j", 1, make_offering("od"), (str(tool),), tmp_path / "ck" / "j")
    with pytest.raises(LaunchFailed, match="cannot be run by the jobs' user 'nobody'"):
        backend.launch(request)
