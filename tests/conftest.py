"""Shared fixtures: stores over every backend (PostgreSQL when CI provides one)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from api_world import World, make_world
from budgeteer.backends.jobuser import SDK_PACKAGES, python_for, resolve_job_user
from budgeteer.backends.slurm_local import LocalSlurm
from budgeteer.backends.slurm_local import available as slurm_available
from budgeteer.store import MemoryStore, SqlStore, Store
from ec2_world import have_moto, moto_server
from engines import RayTestCluster, engine_missing

POSTGRES_URL = os.environ.get("BUDGETEER_TEST_POSTGRES_URL")


def _passable(tmp: Path) -> Path:
    """Under root, a served sandbox runs its jobs as ``nobody``, which must pass through the
    test's folder to reach its checkpoint folder (pytest makes them 0700): let others pass
    through (not list) ``tmp`` and its parents up to the system's temporary folder."""
    if os.geteuid() == 0:
        for folder in (tmp, *tmp.parents):
            if folder == Path(tempfile.gettempdir()):
                break
            folder.chmod(folder.stat().st_mode | 0o011)
    return tmp


@pytest.fixture(autouse=True)
def _jobs_can_reach_tmp(request: pytest.FixtureRequest) -> None:
    if "tmp_path" in request.fixturenames:
        _passable(request.getfixturevalue("tmp_path"))


@pytest.fixture(scope="session")
def job_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python the served sandbox's jobs can run, with budgeteer and numpy: this one, unless
    the jobs run as another user (the tests run as root) who cannot reach it."""
    stage = _passable(tmp_path_factory.mktemp("job-python"))
    return python_for(resolve_job_user(None), stage, (*SDK_PACKAGES, "numpy"))


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the server CI started (dropped afterwards)."""
    if not POSTGRES_URL:
        if os.environ.get("CI") == "true":  # CI starts PostgreSQL: its absence is a failure
            pytest.fail("BUDGETEER_TEST_POSTGRES_URL is not set under CI=true")
        pytest.skip("BUDGETEER_TEST_POSTGRES_URL is not set (.ci/run starts PostgreSQL)")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(POSTGRES_URL).set(database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The same contract over the in-memory store, SQLite (a file, WAL) and PostgreSQL."""
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'budgeteer.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    sql = SqlStore(url)
    try:
        yield sql
    finally:
        sql.close()


class PrivatePostgres:
    """A PostgreSQL server of the test's own (initdb + pg_ctl on a temporary folder and a free
    port), so that a test may stop and start it without disturbing the others."""

    def __init__(self, root: Path) -> None:
        bindir = _pg_bindir()
        if bindir is None:
            if os.environ.get("CI") == "true":
                pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) are missing under CI")
            pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.bindir = bindir
        self.data = root / "pgdata"
        self.log = root / "pg.log"
        self.sock = root
        self.as_pg: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            shutil.chown(root, "postgres")
            self.as_pg = ["runuser", "-u", "postgres", "--"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_pg, str(self.bindir / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        opts = f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-o", opts, "start")

    def stop(self) -> None:
        """Stop the server now (open connections are cut)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


def _pg_bindir() -> Path | None:
    for candidate in (shutil.which("pg_config"),):
        if candidate:
            out = subprocess.run(
                [candidate, "--bindir"], capture_output=True, text=True, check=False
            )
            path = Path(out.stdout.strip())
            if (path / "initdb").exists():
                return path
    found = shutil.which("initdb") or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))), None
    )
    return Path(found).parent if found else None


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A server of the test's own (see :class:`PrivatePostgres`), stopped afterwards. Its
    folder is a fresh one under the system's temporary folder, which the ``postgres`` user can
    reach (pytest's own are private to root)."""
    root = Path(tempfile.mkdtemp(prefix="budgeteer-pg-"))
    try:
        server = PrivatePostgres(root)
        try:
            yield server
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """The API test world (``api_world.py``) over SQLite and over PostgreSQL."""
    url = (
        f"sqlite:///{tmp_path / 'api.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    w = make_world(url, tmp_path)
    yield w
    w.store.close()


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """One moto server for the session (``ec2_world``): the EC2 backend's AWS; a missing moto
    fails under CI and skips elsewhere."""
    if not have_moto():
        engine_missing("moto[server] is not installed (pip install 'budgeteer[aws-test]')")
    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayTestCluster]:
    """One real Ray cluster for the session (``engines.RayTestCluster``); a missing Ray fails
    under CI and skips elsewhere."""
    try:
        import ray  # noqa: F401, PLC0415
    except ImportError:
        engine_missing("ray is not installed (pip install 'budgeteer[ray]')")
    cluster = RayTestCluster()
    yield cluster
    cluster.cluster.shutdown()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalSlurm]:
    """One real local Slurm for the session (slurmctld + two slurmd); missing Slurm (or not
    root, which its daemons need here) fails under CI and skips elsewhere."""
    if not slurm_available():
        engine_missing("Slurm is not installed (apt-get install slurmctld slurmd slurm-client)")
    if os.geteuid() != 0:
        engine_missing("the local test cluster runs its daemons as root")
    cluster = LocalSlurm(kill_wait=5).start()
    yield cluster
    cluster.stop()
