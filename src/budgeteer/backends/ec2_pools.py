"""The EC2 backend's pools: instances kept running between attempts on pooled offerings.

A pooled offering's instances boot with a job-less bootstrap (:func:`render_pool_user_data`):
the agent waits for work in S3 (``PREFIX/DEPLOYMENT/instances/INSTANCE_ID/next.json``, see
:class:`~budgeteer.backends.ec2_agent.Assignment`). Every attempt on a pooled offering — on
instances just launched or on warm ones — is handed out that way, one assignment per instance
(its rank), and the instances are tagged with the attempt (``budgeteer:job``,
``budgeteer:attempt``, ``budgeteer:taken``: a restarted backend re-attaches by them).

When such an attempt ends with every agent's exit written and the market not in it (not a
spot interruption), its instances stay running, warm (:class:`~budgeteer.backends.warm.
WarmInstances`): the next launch there that fits in them is an assignment, not a
``RunInstances`` — no boot, no image pulled again, the data the last job left on the disk still
there. An instance is given back — ``release`` put in its mailbox and ``TerminateInstances`` —
when the pool's sizing says so (idle past ``idle_timeout`` above ``min``), to make room under
the pool's ``max`` for a fresh launch, or when it was found gone (terminated by the market or
someone else: billed until seen, never taken again). Idle time is billed as in the sandbox: to
the attempt that left the instance warm, up to the pool's ``idle_timeout``, then to the pool's
team while its floor keeps it. A pool with a floor (``min``, ``warm`` windows) boots what it
lacks with no job (:meth:`Ec2Pools.boot`: the same bootstrap, tagged ``budgeteer:pool-team``),
charged to its team until a job takes the instance. The warm instances and idle stretches not
yet billed live in S3 (``PREFIX/DEPLOYMENT/pools.json``), read back by a restarted backend.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from budgeteer.backends.base import (
    CapacityUnavailable,
    Handle,
    IdleTime,
    LaunchFailed,
    LaunchRequest,
    job_variables,
)
from budgeteer.backends.ec2_launch import (
    MAX_USER_DATA,
    Ec2Settings,
    agent_script,
    attempt_key,
    client_error,
    deployment_root,
    pool_boot_args,
)
from budgeteer.backends.warm import PoolStateError, WarmInstances
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Offering

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How much longer than its pool's ``idle_timeout`` a pooled instance's agent waits with
#: nothing to run before it leaves on its own (the scheduler gives instances back at the
#: timeout; this is for a scheduler gone for good). A pool with a ``min`` keeps its agents
#: waiting for ever: those instances are meant to stay.
WARM_GRACE_SECONDS = 3600.0


def warm_limit(pool: PoolSettings) -> float:
    """How long the agents of ``pool``'s instances wait with nothing to run (see
    :data:`WARM_GRACE_SECONDS`; a ``warm`` window's instances wait it out too)."""
    if pool.minimum > 0:
        return math.inf
    window = max((w.seconds for w in pool.warm), default=0.0)
    return window + pool.idle_timeout_seconds + WARM_GRACE_SECONDS


def render_pool_user_data(settings: Ec2Settings, namespace: str, limit: float) -> str:
    """A pooled instance's bootstrap: the agent waiting for its jobs (no job in it)."""
    mode = [
        "--pool-prefix",
        f"{deployment_root(settings, namespace)}/instances",
        "--warm-limit",
        f"{limit:g}",
    ]
    return agent_script(settings, f"a pooled instance of deployment {namespace}", {}, mode)


def assignment(
    settings: Ec2Settings, namespace: str, request: LaunchRequest, rank: int
) -> dict[str, Any]:
    """What the agent of rank ``rank`` runs for ``request`` (see the agent's
    :class:`~budgeteer.backends.ec2_agent.Assignment`)."""
    base = deployment_root(settings, namespace)
    return {
        "attempt_prefix": f"{base}/attempts/{attempt_key(request, namespace)}",
        "checkpoint_prefix": f"{base}/checkpoints/{request.job_id}",
        "nodes": request.instances,
        "rank": rank,
        "env": job_variables(request),
        "command": list(request.command),
    }


@dataclass(frozen=True, slots=True)
class S3Doc:
    """The pools' state as one S3 object (a put replaces it whole)."""

    call: Callable[..., Any]
    bucket: str
    key: str

    @property
    def where(self) -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.bucket}/{self.key}"

    def read(self) -> str | None:
        """The object's text, or ``None`` when there is none."""
        try:
            reply = self.call("s3", "get_object", Bucket=self.bucket, Key=self.key)
        except Exception as exc:
            code = client_error(exc)
            if code is not None and code[0] in {"NoSuchKey", "404"}:
                return None
            raise
        return str(reply["Body"].read().decode("utf-8"))

    def write(self, text: str) -> None:
        """Put the object."""
        self.call("s3", "put_object", Bucket=self.bucket, Key=self.key, Body=text.encode())


class Ec2Pools:
    """The warm instances of the EC2 backend's pooled offerings (see the module docstring);
    ``call``: the backend's AWS call (its errors and retries), ``terminate``: how it ends
    instances. Thread-safe (its own lock; AWS is called outside it)."""

    def __init__(
        self,
        settings: Ec2Settings,
        namespace: str,
        pools: Mapping[str, PoolSettings],
        offerings: Mapping[str, Offering],
        call: Callable[..., Any],
        terminate: Callable[[tuple[str, ...]], None],
        now: Callable[[], datetime],
    ) -> None:
        self.ec2 = settings
        self.namespace = namespace
        self.settings = dict(pools)
        self.offerings = offerings
        self.call = call
        self.terminate = terminate
        self.now = now  # the backend's clock
        doc = S3Doc(call, settings.bucket, f"{deployment_root(settings, namespace)}/pools.json")
        self._warm = WarmInstances(pools, doc)
        self._restored = False
        self._lock = threading.Lock()

    def pooled(self, offering_id: str, team: str | None = None) -> bool:
        """Whether the offering keeps the instances of jobs of ``team`` warm (``None``: any)."""
        return self._warm.serves(offering_id, team)

    def _ready(self, now: datetime) -> WarmInstances:
        """The warm instances, read back from S3 on first use (a restarted backend); under
        the lock."""
        if not self._restored:
            self._warm.restore(self.offerings, now)
            self._restored = True
        return self._warm

    def counts(self) -> dict[str, int]:
        """Warm instances by pooled offering (none while the state cannot be read back from
        S3: the planner then plans without them, and the read is tried again next time)."""
        return self._read(lambda warm: warm.counts(self.now()))

    def data(self) -> dict[str, dict[str, int]]:
        """The datasets warm instances hold, by pooled offering (none while the state cannot
        be read back, as for :meth:`counts`)."""
        return self._read(lambda warm: warm.data(self.now()))

    def _read(self, what: Callable[[WarmInstances], dict[str, T]]) -> dict[str, T]:
        """``what`` of the warm instances, or nothing while S3 does not answer (a warning);
        a document that is there but wrong raises (nothing is guessed)."""
        if not self.settings:
            return {}
        with self._lock:
            try:
                return what(self._ready(self.now()))
            except PoolStateError:
                raise
            except Exception as exc:
                log.warning("pools: cannot read the warm instances back from S3: %s", exc)
                return {}

    def warm_ids(self) -> set[str]:
        """The ids of every warm instance."""
        if not self.settings:
            return set()
        with self._lock:
            return set(self._ready(self.now()).instance_ids())

    def take_idle(self) -> list[IdleTime]:
        """The idle stretches ended since the last call."""
        if not self.settings:
            return []
        with self._lock:
            return self._ready(self.now()).take_billed()

    def user_data(self, offering_id: str) -> str:
        """The bootstrap of a pooled offering's new instances."""
        limit = warm_limit(self.settings[offering_id])
        script = render_pool_user_data(self.ec2, self.namespace, limit)
        if len(script.encode()) > MAX_USER_DATA:  # pragma: no cover - a fixed, short script
            raise LaunchFailed("the pooled bootstrap is beyond 16 KB")
        return script

    def take(self, request: LaunchRequest, now: datetime) -> tuple[str, ...] | None:
        """``request``'s job given to warm instances of its offering (their ids), or ``None``
        when the pool has not that many."""
        with self._lock:
            warm = self._ready(now)
            ids = warm.take(
                request.offering.id, request.instances, now, request.data_uri, request.team
            )
        if ids is None:
            return None
        try:
            self._assign(ids, request, now)
        except Exception:
            self._end(ids)  # they may hold half an assignment: not warm any more
            raise
        return ids

    def launched(self, ids: tuple[str, ...], request: LaunchRequest, now: datetime) -> None:
        """Fresh instances of a pooled offering: give them ``request``'s job (terminated
        when that fails: nothing would ever run on them)."""
        try:
            self._assign(ids, request, now)
        except Exception:
            self.terminate(ids)
            raise

    def left(
        self,
        offering: Offering,
        handle: Handle,
        at: datetime,
        data: str | None = None,
        team: str | None = None,
    ) -> None:
        """The attempt of a job of ``team`` ended at ``at`` with its instances still running:
        they go warm, holding its job's dataset ``data``."""
        with self._lock:
            warm = self._ready(at)
            warm.left(offering, handle.job_id, handle.attempt, handle.instance_ids, at, data, team)

    def make_room(self, offering_id: str, short: int, now: datetime) -> None:
        """Give back up to ``short`` + the pool's warm instances beyond what a launch leaves
        room for (``short``: busy + asked − the limit)."""
        with self._lock:
            warm = self._ready(now)
            warm.make_room(offering_id, short + warm.held(offering_id), now)
        self._end(())

    def release_idle(
        self, busy: Mapping[str, int], lost: set[str], now: datetime
    ) -> dict[str, int]:
        """Drop the ``lost`` warm instances (billed until ``now``) and give back what each
        pool's sizing releases (``busy``: instances running attempts, by offering); the
        instances each pool's floor lacks, by offering id (for :meth:`boot`)."""
        with self._lock:
            warm = self._ready(now)
            if lost:
                warm.lost(lost, now)
            boots = warm.release(lambda oid: busy.get(oid, 0), now)
        self._end(())
        return boots

    def floors(self, now: datetime) -> bool:
        """Whether any pool has a floor now (its ``min``, an open ``warm`` window)."""
        return any(p.floor(now) for p in self.settings.values())

    def boot(
        self,
        offering: Offering,
        wanted: int,
        now: datetime,
        spot_price: str | None,
        run: Callable[[Offering, str, dict[str, Any]], Any],
    ) -> None:
        """Boot 1 to ``wanted`` instances of a pooled offering with no job, for its pool's
        floor, in one ``RunInstances`` (``run``: the backend's, which fails over between
        subnets): their agents wait for work in their mailboxes; warm (taken by a launch)
        after the offering's start-up, idle from now at the pool's team's cost. A refusal
        (capacity, a bad request) is logged and tried again at the next cycle."""
        team = self.settings[offering.id].team or ""
        stamp = zlib.crc32(offering.id.encode())
        token = f"bgt-{self.namespace}-boot-{stamp:08x}-{now:%Y%m%dT%H%M%S}"
        user_data = self.user_data(offering.id)
        kwargs = pool_boot_args(
            self.ec2, offering, self.namespace, user_data, wanted, team, token, spot_price
        )
        try:
            reply = run(offering, token, kwargs)
        except (CapacityUnavailable, LaunchFailed) as exc:
            log.warning("pool %s: cannot boot %d instance(s): %s", offering.id, wanted, exc)
            return
        ids = tuple(sorted(str(i["InstanceId"]) for i in reply.get("Instances", [])))
        ready = now + timedelta(seconds=offering.startup_seconds)
        with self._lock:
            self._ready(now).booted(offering, ids, now, ready)
        log.info("pool %s: booted %s with no job for its floor", offering.id, ", ".join(ids))

    def _end(self, ids: tuple[str, ...]) -> None:
        """End ``ids`` and every instance the pools gave back: ``release`` in each mailbox
        (its agent leaves), then terminate."""
        with self._lock:
            ended = tuple(dict.fromkeys([*ids, *self._warm.take_released()]))
        if not ended:
            return
        base = deployment_root(self.ec2, self.namespace)
        for iid in ended:
            self.call(
                "s3",
                "put_object",
                Bucket=self.ec2.bucket,
                Key=f"{base}/instances/{iid}/release",
                Body=b"1",
            )
        self.terminate(ended)

    def _assign(self, ids: Sequence[str], request: LaunchRequest, now: datetime) -> None:
        """Give ``request``'s job to the instances ``ids`` (rank by order) and tag them with
        its attempt."""
        base = deployment_root(self.ec2, self.namespace)
        key = attempt_key(request, self.namespace)
        self.call(
            "ec2",
            "create_tags",
            Resources=list(ids),
            Tags=[
                {"Key": "budgeteer:job", "Value": request.job_id},
                {"Key": "budgeteer:attempt", "Value": str(request.attempt)},
                {"Key": "budgeteer:taken", "Value": now.isoformat()},
                {"Key": "Name", "Value": key},
            ],
        )
        for rank, iid in enumerate(ids):
            doc = assignment(self.ec2, self.namespace, request, rank)
            self.call(
                "s3",
                "put_object",
                Bucket=self.ec2.bucket,
                Key=f"{base}/instances/{iid}/next.json",
                Body=json.dumps(doc).encode(),
            )
