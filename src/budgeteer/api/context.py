"""What the API reads and writes, wired once by the composition root (``serve``) or a test."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from budgeteer.api.batcher import SubmitBatcher
from budgeteer.catalog import Catalog
from budgeteer.clock import Clock, SystemClock
from budgeteer.core import FrontCache, Plan, Policy, Snapshot
from budgeteer.core.quarantine import plan_isolated
from budgeteer.ledger.accounting import OnDemandPrices
from budgeteer.store import ApiToken, Store
from budgeteer.triggers.policy import TriggerPolicy

#: How long a token lookup is remembered: revocation through another replica takes effect
#: within this many seconds (at once through this one).
TOKEN_CACHE_SECONDS = 2.0


@dataclass
class ApiContext:
    """The API's collaborators: the store, the catalog, the clock, the policy, and how to take a
    snapshot of the scheduler's world (for ``explain`` and budget status)."""

    store: Store
    catalog: Catalog
    clock: Clock
    snapshot: Callable[[], Snapshot]
    admin_token: str
    secret_key: bytes
    policy: Policy = field(default_factory=Policy)
    max_body_bytes: int = 1_000_000
    is_leader: Callable[[], bool] = lambda: True
    #: the trigger policy and its folder (``triggers:`` in the config), for ``/v1/signals``
    triggers: tuple[TriggerPolicy, Path] | None = None
    #: a live price older than this is shown stale (the ``prices`` config's max age)
    max_price_age_seconds: float = 6 * 3600.0
    checkpoint_root: Path | None = None
    #: whether the scheduler loop keeps up: (ready, why) — see ``/readyz``
    loop_ready: Callable[[], tuple[bool, str]] = lambda: (True, "no scheduler in this process")
    #: ``/metrics`` without a token (``api.metrics_public``), and the scrape token if any
    metrics_public: bool = False
    metrics_token: str | None = None
    #: the execution policy (:mod:`budgeteer.commands`): allowed command prefixes, or any
    allowed_commands: tuple[tuple[str, ...], ...] = ()
    run_any_command: bool = False
    #: whether submissions must carry a command (the backend runs commands)
    require_command: bool = True
    #: whether webhooks may point at private addresses (``api.webhook_allow_private``)
    webhook_allow_private: bool = False
    #: jobs the scheduler found to raise in planning (not tried again by the API's plans)
    quarantined: Callable[[], Mapping[str, str]] = dict
    #: time shown to people and login expiry: wall-clock time, whatever ``clock`` is
    wall_clock: Clock = field(default_factory=SystemClock)
    #: how long a dashboard login lasts
    session_hours: float = 12.0
    front_cache: FrontCache = field(init=False, default_factory=FrontCache)
    prices: OnDemandPrices = field(init=False)
    #: concurrent submissions share a trip to the store (:mod:`budgeteer.api.batcher`)
    submissions: SubmitBatcher = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _seq: int | None = field(init=False, default=None)
    _tokens: dict[str, tuple[float, ApiToken | None]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.prices = OnDemandPrices(self.catalog)
        self.submissions = SubmitBatcher(self.store.submit_many)

    def next_seq(self, count: int = 1) -> int:
        """The first of ``count`` submission sequence numbers for new jobs: read from the store
        once, then counted in process (they order ties; job ids keep listings unique across
        replicas)."""
        with self._lock:
            if self._seq is None:
                self._seq = self.store.next_seq()
            self._seq += count
            return self._seq - count

    def token(self, token_hash: str) -> ApiToken | None:
        """The token record for a secret's hash, remembered for ``TOKEN_CACHE_SECONDS``
        (wall clock: a cache of the database, not a scheduling decision)."""
        now = time.monotonic()
        with self._lock:
            hit = self._tokens.get(token_hash)
            if hit is not None and now - hit[0] < TOKEN_CACHE_SECONDS:
                return hit[1]
        record = self.store.token_by_hash(token_hash)
        with self._lock:
            if len(self._tokens) > 10_000:
                self._tokens.clear()
            self._tokens[token_hash] = (now, record)
        return record

    def forget_tokens(self) -> None:
        """Drop remembered lookups (after a revocation)."""
        with self._lock:
            self._tokens.clear()

    def plan(self, snapshot: Snapshot | None = None) -> Plan:
        """The plan the core would make now, or from ``snapshot`` (pure; nothing is
        applied)."""
        snapshot = snapshot if snapshot is not None else self.snapshot()
        return plan_isolated(snapshot, self.policy, self.front_cache, self.quarantined())
