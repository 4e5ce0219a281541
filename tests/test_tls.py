"""``serve --tls-cert/--tls-key`` serves HTTPS with Secure session cookies; binding beyond
loopback without TLS is warned about (issue 13)."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from budgeteer.api.sessions import COOKIE
from engines import engine_missing

ADMIN = "tls-test-admin-token-0123456789"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "cfg.yaml").write_text("store: sqlite:///tls.db\n")
    return subprocess.Popen(
        [sys.executable, "-m", "budgeteer", "serve", "--config", "cfg.yaml", *args],
        cwd=tmp_path,
        env={**os.environ, "BUDGETEER_ADMIN_TOKEN": ADMIN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _log_until(proc: subprocess.Popen[str], words: str) -> str:
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if words in line:
            return "".join(seen)
    raise AssertionError("".join(seen))


def test_https_with_a_secure_session_cookie(tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        engine_missing("openssl is needed to make the test certificate")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(tmp_path / "key.pem"),
            "-out",
            str(tmp_path / "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )
    port = _port()
    proc = _serve(tmp_path, "--port", str(port), "--tls-cert", "cert.pem", "--tls-key", "key.pem")
    try:
        log = _log_until(proc, "Uvicorn running on")
        assert f"serving on https://127.0.0.1:{port}" in log
        trust = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
        with httpx.Client(verify=trust, timeout=10) as http:
            base = f"https://127.0.0.1:{port}"
            assert http.get(f"{base}/healthz").json()["ok"] is True
            r = http.post(f"{base}/login", data={"token": ADMIN}, follow_redirects=False)
            assert r.status_code == 303
            cookie = r.headers["set-cookie"]
            assert cookie.startswith(f"{COOKIE}=")
            assert "Secure" in cookie
            assert "HttpOnly" in cookie
        with pytest.raises(httpx.TransportError):  # no plain HTTP on that port
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_binding_beyond_loopback_without_tls_is_warned_and_half_tls_refused(
    tmp_path: Path,
) -> None:
    proc = _serve(tmp_path, "--host", "0.0.0.0", "--port", str(_port()))
    try:
        log = _log_until(proc, "Uvicorn running on")
        assert "without TLS" in log
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    loopback = _serve(tmp_path, "--port", str(_port()))
    try:
        log = _log_until(loopback, "Uvicorn running on")
        assert "without TLS" not in log
    finally:
        loopback.terminate()
        loopback.wait(timeout=60)
    half = _serve(tmp_path, "--tls-cert", "cert.pem")
    _, err = half.communicate(timeout=60)
    assert half.returncode == 2
    assert "tls_key" in err
