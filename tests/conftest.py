"""Shared fixtures: stores over every backend (PostgreSQL when CI provides one)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from budgeteer.store import MemoryStore, SqlStore, Store

POSTGRES_URL = os.environ.get("BUDGETEER_TEST_POSTGRES_URL")


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
