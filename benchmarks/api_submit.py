"""Submission throughput and latency of ``budgeteer serve`` (``make bench-api``).

Starts a real ``budgeteer serve`` process (uvicorn, the scheduler loop running beside the API,
as in production) on a fresh store, then N concurrent async clients (httpx) each submit their
share of jobs with their own idempotency keys, through a team token, over keep-alive
connections (a minimal HTTP/1.1 client: the load generator shares the machine, so it must cost
little). Prints jobs/s and latency
percentiles per store; nothing is asserted. PostgreSQL runs when ``BUDGETEER_BENCH_POSTGRES_URL``
names a server (``.ci/run`` style: ``postgresql+psycopg://postgres@127.0.0.1:PORT/postgres``).

The submitted jobs are P3 work for a team whose budget holds them, so the loop plans a growing
queue (as a busy service does) without spawning thousands of processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import sqlalchemy as sa
import yaml

ADMIN = "bench-admin-token-0123456789"
WORKERS = 1


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _postgres_db(url: str) -> str:
    name = f"bench_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine.dispose()
    return sa.engine.make_url(url).set(database=name).render_as_string(hide_password=False)


def serve(store: str, work: Path, scheduler: bool) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server; return it and its URL once it answers."""
    port = _port()
    budgets = [{"id": "bench", "scope": {"team": "bench"}, "limit_usd": 1}]
    (work / "budgets.yaml").write_text(yaml.safe_dump({"budgets": budgets}))
    config = {
        "store": store,
        "budgets": "budgets.yaml",
        "api": {"host": "127.0.0.1", "port": port, "allowed_commands": [["true"]]},
        "backend": {"workdir": ".budgeteer"},
    }
    (work / "cfg.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "budgeteer",
            "serve",
            "--config",
            str(work / "cfg.yaml"),
            "--scheduler" if scheduler else "--no-scheduler",
            "--workers",
            str(WORKERS),
        ],
        cwd=work,
        env={**os.environ, "BUDGETEER_ADMIN_TOKEN": ADMIN},
        stdout=subprocess.DEVNULL,
        stderr=open(work / "serve.log", "wb"),  # noqa: SIM115 - lives as long as the server
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not start; see {work / 'serve.log'}")


def spec(i: int) -> dict[str, object]:
    """One submission (held by the bench budget once planned)."""
    return {
        "name": f"job{i}",
        "team": "bench",
        "priority": "P3",
        "work": {"reference_hours": 4},
        "sla": "3d",
        "command": ["true"],
    }


class _Connection:
    """A minimal HTTP/1.1 keep-alive client over one socket (asyncio streams): what a load
    generator written in C (wrk, hey) spends per request, rather than an HTTP library's
    milliseconds, so that on a small machine the server, not the load generator, is measured.
    Latency is still taken around each whole request."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.writer.write(
            (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{head}\r\n"
            ).encode()
            + body
        )
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        payload = await self.reader.readexactly(length)
        return int(status_line.split()[1]), payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


async def run_clients(url: str, token: str, clients: int, jobs: int) -> list[float]:
    """Submit ``jobs`` in all from ``clients`` concurrent keep-alive connections; per-request
    latencies."""
    latencies: list[float] = []
    per_client = jobs // clients
    host, port = url.removeprefix("http://").split(":")

    async def client(c: int) -> None:
        conn = _Connection(host, int(port))
        try:
            for k in range(per_client):
                i = c * per_client + k
                body = json.dumps(spec(i)).encode()
                headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": f"b{i}"}
                t0 = time.perf_counter()
                status, payload = await conn.post("/v1/jobs", body, headers)
                latencies.append(time.perf_counter() - t0)
                if status != 201:
                    raise RuntimeError(f"{status}: {payload[:300]!r}")
        finally:
            await conn.close()

    await asyncio.gather(*(client(c) for c in range(clients)))
    return latencies


def measure(
    store_name: str, url_for: str, clients: int, jobs: int, scheduler: bool
) -> dict[str, object]:
    """One store: start, warm up, measure, stop."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # under root the jobs' user passes through it to its folder
        proc, url = serve(url_for, work, scheduler)
        try:
            r = httpx.post(
                f"{url}/v1/tokens",
                json={"name": "bench", "teams": ["bench"]},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            token = r.json()["token"]
            asyncio.run(run_clients(url, token, clients, clients * 5))  # warm-up
            t0 = time.perf_counter()
            lat = asyncio.run(run_clients(url, token, clients, jobs))
            wall = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    lat.sort()
    return {
        "store": store_name,
        "loop": "yes" if scheduler else "no",
        "workers": WORKERS,
        "clients": clients,
        "jobs": len(lat),
        "jobs_per_s": len(lat) / wall,
        "p50_ms": 1000 * statistics.median(lat),
        "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))],
        "max_ms": 1000 * lat[-1],
    }


def main() -> None:
    """Measure and print the table."""
    p = argparse.ArgumentParser()
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--workers", type=int, default=1, help="serve --workers")
    args = p.parse_args()
    global WORKERS  # noqa: PLW0603 - a script-level setting
    WORKERS = args.workers
    pg = os.environ.get("BUDGETEER_BENCH_POSTGRES_URL")
    rows = []
    for scheduler in (False, True):
        rows.append(measure("sqlite", "sqlite:///bench.db", args.clients, args.jobs, scheduler))
        if pg:
            rows.append(measure("postgresql", _postgres_db(pg), args.clients, args.jobs, scheduler))
    print(
        f"{'store':<11} {'loop':>4} {'workers':>7} {'clients':>7} {'jobs':>6} {'jobs/s':>8} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    )
    for r in rows:
        print(
            f"{r['store']:<11} {r['loop']:>4} {r['workers']:>7} {r['clients']:>7} {r['jobs']:>6} "
            f"{r['jobs_per_s']:>8.0f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>8.1f}"
        )


if __name__ == "__main__":
    main()
