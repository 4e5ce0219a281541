"""The ``ray`` backend: each attempt is a Ray job on an existing Ray cluster (``ray[default]``,
the optional extra ``budgeteer[ray]``).

An attempt is submitted with Ray's ``JobSubmissionClient`` (the cluster's dashboard address):
the command as the entrypoint, ``submission_id`` ``bgt-<deployment>-<job>-<attempt>`` (the
deployment: a hash of its store's URL, so that deployments sharing a cluster never meet; a restarted
scheduler re-attaches by it, and a second submission of the same attempt is impossible), its
environment as the runtime env's ``env_vars`` (built like the sandbox's: the service's own
environment stays with the service), and ``entrypoint_resources`` naming the custom resource of
its offering (``placements``: offering id → resource, e.g. nodes started with ``--resources
'{"budgeteer-spot": 1}'``), so the entrypoint runs on a node of that kind.

Status from ``get_job_info``: ``PENDING`` → provisioning, ``RUNNING`` → running, ``SUCCEEDED``,
``STOPPED`` (budgeteer's ``stop``: ``stop_job`` sends SIGTERM, Ray kills after its own wait), and
``FAILED`` — a failure whose message says the job's node died (how a spot node taken away shows
in Ray) is ``preempted``; any other is ``failed`` with the entrypoint's exit code.

With ``gcs_address`` (the cluster's GCS, ``ray start --head`` prints it), the backend also reads
the cluster's nodes (the autoscaler's view, ``ray.autoscaler.v2.sdk.get_cluster_status``):

- **capacity**: an offering's units are its resource summed over the nodes that are alive and
  not draining (start a node with ``{"budgeteer-spot": 1}`` for one instance per node); a launch
  that would use more than are free of this backend's own attempts is refused with
  :class:`CapacityUnavailable` (the scheduler backs off and may place it elsewhere) instead of
  waiting in Ray's queue;
- **the drain notice**: a node being drained (``ray drain-node --reason
  DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N``, what the autoscaler and KubeRay
  do before a spot instance goes) does not signal the jobs on it, so the backend does: each
  running attempt whose entrypoint runs there gets ``stop_job`` (SIGTERM: checkpoint and exit)
  and ends ``preempted``, not ``stopped`` or ``failed``.

Without it, nothing is refused up front and only a node's death is seen.

An attempt on ``n > 1`` nodes runs :mod:`budgeteer.backends.ray_gang` as its entrypoint (with
``python``, an interpreter on the cluster that has budgeteer): it reserves ``n`` nodes of the
offering's resource as one ``STRICT_SPREAD`` placement group and runs the command once per
node with its rank; a failed rank brings the others down, and the notice (or a drain of any of
its nodes) reaches every rank.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from budgeteer.backends.base import (
    Capabilities,
    CapacityUnavailable,
    Handle,
    LaunchFailed,
    LaunchRequest,
    RunState,
    Status,
    check_pool_max,
    check_request,
    job_variables,
    prepare_checkpoint_dir,
)
from budgeteer.backends.jobuser import job_environment
from budgeteer.backends.market import CatalogPrices
from budgeteer.clock import Clock
from budgeteer.core.pools import PoolSettings
from budgeteer.errors import BudgeteerError

#: Words of a failed job's message that mean its node went away, not that the job failed.
_NODE_DIED = re.compile(
    r"node (has )?died|NodeDiedError|node .* (was )?(preempted|removed)|is being drained", re.I
)


#: Words of a refused submission that mean "not now" (the cluster is starting or busy).
_BUSY = re.compile(r"try again later|No available agent|status code 50[23]", re.I)


class RayUnavailable(BudgeteerError):
    """The Ray cluster did not answer (transient)."""

    transient = True


#: Seconds a reading of the cluster's nodes is reused (a cache of the cluster, not a decision).
NODES_TTL_SECONDS = 1.0


@dataclass
class _Attempt:
    handle: Handle
    resource: str
    notice_reason: str | None = None
    preempted: bool = False  # the notice was the node's drain
    final: Status | None = None


@dataclass(frozen=True)
class _Node:
    id: str
    draining: bool
    units: Mapping[str, float]


class RayBackend(CatalogPrices):
    """Attempts as Ray jobs (see the module docstring)."""

    name = "ray"
    capabilities = Capabilities(spot=True, preemption_notice=True, multi_node=True)

    def __init__(
        self,
        clock: Clock,
        address: str,
        placements: Mapping[str, str],
        *,
        pass_env: tuple[str, ...] = (),
        client: Callable[[str], Any] | None = None,
        gcs_address: str | None = None,
        python: str = sys.executable,
        grace_seconds: float = 30.0,
        namespace: str = "",
        pools: Mapping[str, PoolSettings] | None = None,
    ) -> None:
        self.clock = clock
        #: pooled offerings (``max`` and ``batch_wait``; their warm instances are the free
        #: units of their resource on the cluster's live nodes)
        self.pools = dict(pools or {})
        self.address = address
        self.gcs_address = gcs_address
        self.python = python  # runs the gang entrypoint of multi-node attempts on the cluster
        self.grace_seconds = grace_seconds
        self.namespace = namespace  # in submission ids: deployments sharing a cluster never meet
        self._nodes_read: tuple[float, list[_Node]] | None = None
        self.placements = dict(placements)
        self.pass_env = pass_env
        self._client_factory = client or _job_client
        self._client: Any = None
        self._lock = threading.Lock()
        self._attempts: dict[str, _Attempt] = {}

    # -- the port -------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Handle:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        resource = self._check(request)
        with self._lock:
            live = [a.handle for a in self._attempts.values() if a.final is None]
        check_pool_max(self.pools, request, live)
        self._check_capacity(request, resource)
        sid = _submission_id(request, self.namespace)
        variables = job_variables(request)
        if request.instances == 1:
            variables |= {"BUDGETEER_NODE_RANK": "0", "BUDGETEER_NUM_NODES": "1"}
            entrypoint = shlex.join(request.command)
            where: dict[str, float] = {resource: 1}
        else:  # the gang reserves the nodes and gives each rank its number
            entrypoint = shlex.join(
                [
                    self.python,
                    "-m",
                    "budgeteer.backends.ray_gang",
                    "--resource",
                    resource,
                    "--nodes",
                    str(request.instances),
                    "--grace",
                    f"{self.grace_seconds:g}",
                    "--",
                    *request.command,
                ]
            )
            where = {}
        env = job_environment(os.environ, self.pass_env, variables)
        try:
            self._jobs().submit_job(
                entrypoint=entrypoint,
                submission_id=sid,
                runtime_env={"env_vars": env},
                entrypoint_resources=where,
                entrypoint_num_cpus=0,
                metadata={"budgeteer_job": request.job_id, "attempt": str(request.attempt)},
            )
        except RuntimeError as exc:
            if _BUSY.search(str(exc)):  # e.g. the job agent not up yet: try again next cycle
                raise RayUnavailable(f"Ray at {self.address}: {str(exc)[:300]}") from None
            raise LaunchFailed(f"Ray refused the job {sid}: {str(exc)[:300]}") from None
        except (ConnectionError, OSError) as exc:
            raise RayUnavailable(f"Ray at {self.address}: {exc}") from None
        handle = Handle.of(
            self.name, sid, request, _instances(sid, request.instances), self.clock.now()
        )
        with self._lock:
            self._attempts[sid] = _Attempt(handle, resource)
        return handle

    def adopt(self, request: LaunchRequest) -> Handle | None:
        """Re-attach by submission id; ``None`` when the cluster has no such job."""
        sid = _submission_id(request, self.namespace)
        info = self._info(sid)
        if info is None:
            return None
        started = _time(getattr(info, "start_time", None)) or self.clock.now()
        handle = Handle.of(self.name, sid, request, _instances(sid, request.instances), started)
        with self._lock:
            self._attempts[sid] = _Attempt(handle, self.placements.get(request.offering.id, ""))
        return handle

    def status(self, handle: Handle) -> Status:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        with self._lock:
            attempt = self._attempts[handle.id]
            if attempt.final is not None:
                return attempt.final
        info = self._info(handle.id)
        if info is None:
            status = Status(RunState.PREEMPTED, None, f"lost: Ray no longer knows {handle.id}")
        else:
            self._watch_drain(attempt, info)
            status = _status(info, attempt.notice_reason, attempt.preempted)
        if status.state.is_final:
            with self._lock:
                attempt.final = status
        return status

    def stop(self, handle: Handle, reason: str) -> None:
        """The notice: Ray's ``stop_job`` (SIGTERM to the entrypoint; Ray kills it after its
        own wait, ``RAY_JOB_STOP_WAIT_TIME_S``)."""
        with self._lock:
            attempt = self._attempts[handle.id]
            if attempt.final is not None or attempt.notice_reason is not None:
                return
            attempt.notice_reason = reason
        self._send_stop(handle.id)

    def _send_stop(self, sid: str) -> None:
        try:
            self._jobs().stop_job(sid)
        except RuntimeError:
            return  # it ended meanwhile
        except (ConnectionError, OSError) as exc:
            raise RayUnavailable(f"Ray at {self.address}: {exc}") from None

    def live(self) -> list[Handle]:
        """Attempts that have not ended."""
        with self._lock:
            handles = [a.handle for a in self._attempts.values() if a.final is None]
        return [h for h in handles if not self.status(h).state.is_final]

    def poll(self) -> None:
        """Nothing to advance: Ray runs the jobs."""

    # -- pools: free units on the cluster's nodes -----------------------------------------
    def pool_settings(self) -> dict[str, PoolSettings]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        return dict(self.pools)

    def warm_instances(self) -> dict[str, int]:
        """See :class:`~budgeteer.backends.base.WarmPools`: per pooled offering, the units of
        its resource on live, undrained nodes that budgeteer's attempts do not hold — a job
        placed there starts without waiting for the autoscaler. None without a GCS address,
        or while the GCS does not answer."""
        out: dict[str, int] = {}
        for oid in self.pools:
            resource = self.placements.get(oid)
            if resource is None:
                continue
            try:
                counted = self._free_units(resource)
            except RayUnavailable:
                return {}
            if counted is not None and int(counted[0]) > 0:
                out[oid] = int(counted[0])
        return out

    def warm_data(self) -> dict[str, dict[str, int]]:
        """See :class:`~budgeteer.backends.base.WarmPools`: none known (the nodes' disks are
        the cluster's)."""
        return {}

    # -- the cluster's nodes --------------------------------------------------------------
    def _free_units(self, resource: str) -> tuple[float, float, float] | None:
        """``(free, used, units)`` of ``resource``: on live, undrained nodes, and held by
        budgeteer's attempts (``None`` without a GCS address)."""
        nodes = self._nodes()
        if nodes is None:
            return None
        units = sum(n.units.get(resource, 0.0) for n in nodes if not n.draining)
        with self._lock:
            used = sum(
                len(a.handle.instance_ids)
                for a in self._attempts.values()
                if a.final is None and a.resource == resource
            )
        return units - used, float(used), units

    def _check_capacity(self, request: LaunchRequest, resource: str) -> None:
        counted = self._free_units(resource)
        if counted is None:
            return  # no GCS address: Ray queues what does not fit
        _, used, units = counted
        if used + request.instances > units:
            if units == 0:
                why = f"no node carries {resource!r} now (none, or all draining)"
            else:
                why = f"{used:g} of {units:g} {resource!r} in use, {request.instances} asked for"
            raise CapacityUnavailable(f"Ray: {why}")

    def _watch_drain(self, attempt: _Attempt, info: Any) -> None:
        """A running attempt on a draining node gets its notice (see the module docstring)."""
        if attempt.notice_reason is not None or str(getattr(info.status, "value", "")) != "RUNNING":
            return
        node = getattr(info, "driver_node_id", None)
        nodes = self._nodes()
        if not node or nodes is None:
            return
        if any(n.id == node and n.draining for n in nodes):
            with self._lock:
                attempt.notice_reason = f"preempted: its node {node[:12]} is being drained"
                attempt.preempted = True
            self._send_stop(attempt.handle.id)

    def _nodes(self) -> list[_Node] | None:
        """The live nodes (``None`` without a GCS address), read at most every
        ``NODES_TTL_SECONDS``."""
        if self.gcs_address is None:
            return None
        now = time.monotonic()
        with self._lock:
            if self._nodes_read is not None and now - self._nodes_read[0] < NODES_TTL_SECONDS:
                return self._nodes_read[1]
        nodes = _read_nodes(self.gcs_address)
        with self._lock:
            self._nodes_read = (now, nodes)
        return nodes

    # -- internals ------------------------------------------------------------------------
    def _check(self, request: LaunchRequest) -> str:
        check_request(request)
        resource = self.placements.get(request.offering.id)
        if resource is None:
            raise LaunchFailed(
                f"offering {request.offering.id!r} has no Ray placement "
                "(backend.placements in the config)"
            )
        prepare_checkpoint_dir(request)
        return resource

    def _jobs(self) -> Any:
        if self._client is None:
            try:
                self._client = self._client_factory(self.address)
            except (ConnectionError, OSError, RuntimeError) as exc:
                raise RayUnavailable(f"Ray at {self.address}: {exc}") from None
        return self._client

    def _info(self, sid: str) -> Any:
        try:
            return self._jobs().get_job_info(sid)
        except RuntimeError as exc:
            if "404" in str(exc) or "does not exist" in str(exc):
                return None
            raise RayUnavailable(f"Ray at {self.address}: {str(exc)[:300]}") from None
        except (ConnectionError, OSError) as exc:
            raise RayUnavailable(f"Ray at {self.address}: {exc}") from None


def _read_nodes(gcs_address: str) -> list[_Node]:
    """The cluster's live nodes as the autoscaler sees them (active, idle or draining)."""
    from ray.autoscaler.v2.sdk import get_cluster_status  # noqa: PLC0415 - the optional extra

    try:
        status = get_cluster_status(gcs_address, timeout=5)
    except Exception as exc:  # grpc's errors are not exported; all mean "did not answer"
        raise RayUnavailable(f"Ray GCS at {gcs_address}: {str(exc)[:300]}") from None
    return [
        _Node(
            n.node_id,
            str(n.node_status).upper().endswith("DRAINING"),
            {name: float(total) for name, total in n.total_resources().items()},
        )
        for n in (*status.active_nodes, *status.idle_nodes)
        if n.node_id
    ]


def _job_client(address: str) -> Any:
    from ray.job_submission import JobSubmissionClient  # noqa: PLC0415 - an optional extra

    return JobSubmissionClient(address)


def _instances(sid: str, n: int) -> tuple[str, ...]:
    return (f"ray-{sid}",) if n == 1 else tuple(f"ray-{sid}-{i}" for i in range(n))


def _submission_id(request: LaunchRequest, namespace: str = "") -> str:
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", request.job_id)
    prefix = f"bgt-{namespace}-" if namespace else "bgt-"
    return f"{prefix}{safe}-{request.attempt}"


def _time(ms: object) -> datetime | None:
    if not isinstance(ms, int) or ms <= 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC)


def _status(info: Any, notice_reason: str | None, preempted: bool = False) -> Status:
    state = str(getattr(info.status, "value", info.status))
    started, ended = _time(info.start_time), _time(info.end_time)
    code = info.driver_exit_code
    message = str(info.message or "")
    if state == "PENDING":
        return Status(RunState.PROVISIONING)
    if state == "RUNNING":
        return Status(RunState.RUNNING, started_at=started)
    if state == "SUCCEEDED":
        return Status(RunState.SUCCEEDED, 0, "exited 0", started, ended)
    if preempted and state in ("STOPPED", "FAILED"):
        return Status(RunState.PREEMPTED, code, notice_reason or "preempted", started, ended)
    if state == "STOPPED":
        return Status(
            RunState.STOPPED, code, notice_reason or "stopped on the cluster", started, ended
        )
    if _NODE_DIED.search(message):
        first = message.splitlines()[0] if message else "node died"
        return Status(RunState.PREEMPTED, code, f"node lost: {first[:200]}", started, ended)
    if notice_reason is not None:
        return Status(RunState.STOPPED, code, notice_reason, started, ended)
    return Status(
        RunState.FAILED,
        code,
        f"exited {code}" if code is not None else message[:200],
        started,
        ended,
    )
