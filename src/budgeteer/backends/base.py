"""The ``ComputeBackend`` port: launch a job attempt on an offering, watch it, stop it.

Contract (``tests/test_backend_contract.py`` runs it against every backend):

- ``launch`` returns a :class:`Handle` at once; the attempt is ``provisioning`` until its
  instances are up (start-up delay), then ``running``. It raises :class:`CapacityUnavailable`
  (transient: retry later or elsewhere) when the offering is full, and :class:`LaunchFailed`
  (final) for what retrying cannot fix: a command that does not exist, an unwritable checkpoint
  folder, an unsupported request.
- ``status`` reports ``succeeded`` (exit 0), ``failed`` (other exits, with the code),
  ``preempted`` (the market revoked the capacity: the job got the notice — SIGTERM — and the
  grace period before being killed), or ``stopped`` (``stop`` was called).
- ``stop`` sends the notice (SIGTERM) and kills after the grace period if the job is still there.
- Backends declare :class:`Capabilities`; the scheduler never asks for more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from budgeteer.backends.jobuser import JobUser, prepare_private_folder
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Offering
from budgeteer.domain.tier import Tier
from budgeteer.errors import BudgeteerError


class CapacityUnavailable(BudgeteerError):
    """The offering has no room now (transient). ``retry_at`` is when room is known to come
    back, when the backend knows (an on-prem pool's calendar; never a spot market's)."""

    transient = True

    def __init__(self, message: str, retry_at: datetime | None = None) -> None:
        super().__init__(message)
        self.retry_at = retry_at


class LaunchFailed(BudgeteerError):
    """The attempt cannot be launched as asked (final); the message names the cause."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do."""

    spot: bool
    preemption_notice: bool
    multi_node: bool
    gpu_types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One attempt of a job on ``instances`` instances of ``offering``, running ``workers``
    training workers in all (handed to the job as ``BUDGETEER_WORKERS``)."""

    job_id: str
    attempt: int
    offering: Offering
    command: tuple[str, ...]
    checkpoint_dir: Path
    instances: int = 1
    workers: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    #: the job's tier (a backend that bids for spot bids by it)
    tier: Tier | None = None
    #: when the scheduler bills the attempt from (its start): a warm instance it takes stops
    #: idling there, so no moment is billed twice (``None``: the backend's clock)
    billed_from: datetime | None = None
    #: the job's dataset (``data.uri``): a pooled backend takes a warm instance holding it
    #: first, and remembers it on the instances this attempt leaves warm
    data_uri: str | None = None
    #: the job's team: a pool whose ``teams`` leave it out neither lends it warm instances nor
    #: keeps its instances warm (``None``: not known — every pool serves it)
    team: str | None = None

    def taken_at(self, now: datetime) -> datetime:
        """When a warm instance this attempt takes stops idling: its billing start, never
        after ``now``."""
        return now if self.billed_from is None else min(now, self.billed_from)


@dataclass(frozen=True, slots=True)
class Handle:
    """What a backend hands back for a launched attempt."""

    backend: str
    id: str
    job_id: str
    attempt: int
    offering_id: str
    instance_ids: tuple[str, ...]
    launched_at: datetime

    @classmethod
    def of(
        cls,
        backend: str,
        handle_id: str,
        request: LaunchRequest,
        instance_ids: tuple[str, ...],
        launched_at: datetime,
    ) -> Handle:
        """The handle of ``request``'s attempt, known to ``backend`` as ``handle_id``."""
        return cls(
            backend,
            handle_id,
            request.job_id,
            request.attempt,
            request.offering.id,
            instance_ids,
            launched_at,
        )


class RunState(StrEnum):
    """Where an attempt stands on its backend."""

    PROVISIONING = "provisioning"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    STOPPED = "stopped"

    @property
    def is_final(self) -> bool:
        """True once the attempt has ended."""
        return self not in {RunState.PROVISIONING, RunState.RUNNING}


@dataclass(frozen=True, slots=True)
class Status:
    """An attempt's state, exit code when it ended, and why."""

    state: RunState
    exit_code: int | None = None
    reason: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None


class ComputeBackend(Protocol):
    """See the module docstring."""

    name: str
    capabilities: Capabilities

    def launch(self, request: LaunchRequest) -> Handle:
        """Start an attempt (see the contract)."""
        ...

    def status(self, handle: Handle) -> Status:
        """The attempt's current status."""
        ...

    def stop(self, handle: Handle, reason: str) -> None:
        """Send the notice now and kill after the grace period."""
        ...

    def price(self, offering: Offering, at: datetime) -> tuple[Decimal, str]:
        """The price per instance-hour in force at ``at`` and its source (an attempt on n
        instances costs n times this)."""
        ...

    def price_segments(
        self, offering: Offering, start: datetime, end: datetime
    ) -> list[tuple[datetime, datetime, Decimal, str]]:
        """``[start, end)`` cut where the price per instance-hour changes, each piece with its
        price and source (the ledger bills each piece at its own price)."""
        ...

    def adopt(self, request: LaunchRequest) -> Handle | None:
        """Re-attach to this attempt if an earlier process of ours launched it (after a
        scheduler restart); ``None`` when the backend has no trace of it (never launched)."""
        ...


def job_variables(request: LaunchRequest) -> dict[str, str]:
    """What every backend tells a job about itself (beside ``request.env``: its API URL and
    token): its id, attempt, checkpoint folder and progress file, market, offering, workers."""
    return {
        **request.env,
        "BUDGETEER_JOB_ID": request.job_id,
        "BUDGETEER_ATTEMPT": str(request.attempt),
        "BUDGETEER_CHECKPOINT_DIR": str(request.checkpoint_dir),
        "BUDGETEER_PROGRESS_FILE": str(request.checkpoint_dir / "progress.jsonl"),
        "BUDGETEER_MARKET": request.offering.market.value,
        "BUDGETEER_OFFERING": request.offering.id,
        "BUDGETEER_WORKERS": str(request.workers),
    }


def check_request(request: LaunchRequest, *, max_instances: int | None = None) -> None:
    """What no backend can launch (:class:`LaunchFailed`): no instance or worker, more instances
    than the backend runs in one attempt, an empty command."""
    if request.instances < 1 or request.workers < 1:
        raise LaunchFailed(
            f"instances and workers must be ≥ 1; got {request.instances} and {request.workers}"
        )
    if max_instances is not None and request.instances > max_instances:
        raise LaunchFailed(
            f"this backend runs attempts on at most {max_instances} node(s); "
            f"{request.instances} asked for"
        )
    if not request.command:
        raise LaunchFailed("empty command")


def prepare_checkpoint_dir(request: LaunchRequest, user: JobUser | None = None) -> None:
    """Create the attempt's checkpoint folder — with ``user``, that user's alone
    (:func:`~budgeteer.backends.jobuser.prepare_private_folder`); :class:`LaunchFailed` when
    it cannot be."""
    try:
        prepare_private_folder(request.checkpoint_dir, user)
    except OSError as exc:
        raise LaunchFailed(
            f"checkpoint dir {request.checkpoint_dir} is not writable: {exc.strerror}"
        ) from None


@dataclass(frozen=True, slots=True)
class IdleTime:
    """``instances`` pooled instances idle over ``[start, end)``, billed as idle at the
    offering's price: left warm when attempt ``attempt`` of ``job_id`` ended, whose ledger pays
    for them — or, with ``job_id`` ``None``, booted by their pool with no job (for its ``min``
    or a ``warm`` window), paid by the pool's ``team``. ``instance_ids`` names them."""

    offering_id: str
    start: datetime
    end: datetime
    job_id: str | None
    attempt: int
    instances: int = 1
    team: str | None = None
    instance_ids: tuple[str, ...] = ()


@runtime_checkable
class IdleBilling(Protocol):
    """A pooled backend that the scheduler sizes at the end of each cycle and whose idle time
    it bills into the ledger (the sandbox; the simulator keeps both on its own timeline)."""

    def release_idle(self) -> None:
        """Give back the idle instances each pool's sizing releases now (after the cycle's
        launches took what they could)."""
        ...

    def take_idle(self) -> list[IdleTime]:
        """The idle stretches that ended since the last call (each handed out once)."""
        ...


def check_pool_max(
    pools: Mapping[str, PoolSettings], request: LaunchRequest, live: Iterable[Handle]
) -> None:
    """Refuse (as transient) a launch that would put more than its pool's ``max`` instances of
    its offering to work at once (``live``: the backend's attempts that have not ended) — for
    a backend whose warm instances are the cluster's (Kubernetes, Ray, Slurm)."""
    pool = pools.get(request.offering.id)
    if pool is None or pool.maximum is None:
        return
    oid = request.offering.id
    used = sum(len(h.instance_ids) for h in live if h.offering_id == oid)
    if used + request.instances > pool.maximum:
        raise CapacityUnavailable(
            f"{oid}: {used} of {pool.maximum} instances in use (the pool's max), "
            f"{request.instances} asked for"
        )


@runtime_checkable
class WarmPools(Protocol):
    """A backend that keeps instances warm between attempts (pools): its pools' settings, and
    how many idle instances each pooled offering holds now, which the planner prices as a start
    without a boot."""

    def pool_settings(self) -> Mapping[str, PoolSettings]:
        """Each pooled offering's settings, by offering id."""
        ...

    def warm_instances(self) -> dict[str, int]:
        """Idle instances by offering id (offerings without any may be left out)."""
        ...

    def warm_data(self) -> dict[str, dict[str, int]]:
        """By offering id, the datasets (``uri``) its idle instances hold and on how many:
        those the last job on each instance ran with (offerings without any left out)."""
        ...
