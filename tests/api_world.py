"""An API over a real store (SQLite or PostgreSQL), the bundled catalog and a manual clock, with
an admin token and one team token each for ``growth`` and ``search`` (no loop runs)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from budgeteer.api import ApiContext, create_app
from budgeteer.backends import SandboxBackend, TraceMarket
from budgeteer.catalog import load_catalog
from budgeteer.clock import ManualClock
from budgeteer.core.pools import PoolSettings
from budgeteer.scheduler import Scheduler
from budgeteer.store import LedgerEntry, SqlStore

T0 = datetime(2026, 12, 2, 9, tzinfo=UTC)
ADMIN = "admin-secret-token-0123456789"
SECRET = b"k" * 32
CATALOG = load_catalog()


@dataclass
class World:
    """The client, the context and the tokens."""

    http: TestClient
    ctx: ApiContext
    store: SqlStore
    clock: ManualClock
    sched: Scheduler
    growth: str
    search: str

    @staticmethod
    def auth(token: str) -> dict[str, str]:
        """The bearer header for ``token``."""
        return {"Authorization": f"Bearer {token}"}


def make_world(
    url: str,
    tmp_path: Path,
    max_body_bytes: int = 64 * 1024,
    pools: dict[str, PoolSettings] | None = None,
) -> World:
    """Build it (see the module docstring); ``pools`` for the sandbox."""
    store = SqlStore(url)
    clock = ManualClock(T0)
    market = TraceMarket(np.ones(100_000, dtype=bool), 60, T0)
    backend = SandboxBackend(
        clock, market, tmp_path / "work", pools=pools, offerings=CATALOG.offerings
    )
    sched = Scheduler(store, backend, CATALOG, clock, tmp_path / "ck")
    ctx = ApiContext(
        store=store,
        catalog=CATALOG,
        clock=clock,
        snapshot=sched.snapshot,
        admin_token=ADMIN,
        secret_key=SECRET,
        max_body_bytes=max_body_bytes,
        run_any_command=True,  # the tests' commands are ours; the policy is tested on its own
    )
    http = TestClient(create_app(ctx), raise_server_exceptions=False)
    tokens = {}
    for team in ("growth", "search"):
        r = http.post(
            "/v1/tokens", json={"name": f"{team} ci", "teams": [team]}, headers=World.auth(ADMIN)
        )
        assert r.status_code == 201, r.text
        tokens[team] = r.json()["token"]
    return World(http, ctx, store, clock, sched, tokens["growth"], tokens["search"])


def job_spec(name: str = "churn", team: str = "growth", **extra: object) -> dict[str, object]:
    """A small valid job spec."""
    return {
        "name": name,
        "team": team,
        "priority": "P1",
        "work": {"reference_hours": 2},
        "sla": "8h",
        "command": ["true"],
        **extra,
    }


def bill(world: World, job_id: str, usd: str, market: str = "spot") -> None:
    """An hour's attempt of ``job_id`` billed ``usd`` (at ``usd`` per hour), straight into the
    store (no loop runs in this world)."""
    now = world.clock.now()
    attempt = world.store.start_attempt(
        job_id, backend="sandbox", offering_id="x", market=market, instance_ids=[], at=now
    )
    world.store.add_ledger_entry(
        LedgerEntry(
            attempt.id, job_id, now, now + timedelta(hours=1), Decimal(usd), Decimal(usd), "test"
        )
    )
