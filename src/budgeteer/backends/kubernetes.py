"""The ``kubernetes`` backend: each attempt is one ``batch/v1`` Job in the team's cluster (EKS,
GKE, AKS — usually with Karpenter or a cluster autoscaler that brings nodes for pending pods),
through the official ``kubernetes`` client (the optional extra ``budgeteer[kubernetes]``). The
manifest is :func:`budgeteer.backends.k8s_manifest.render_job`.

Status, from the Job and its pods (label ``budgeteer.io/key``):

- a pod with the condition ``DisruptionTarget`` (preemption, eviction, a node drained or taken
  away: the kubelet gave the container SIGTERM and the grace) → ``preempted``; the Job is
  deleted (its ``podFailurePolicy`` ignores the disruption, so Kubernetes would otherwise make
  a new pod wherever it could — where to go next is budgeteer's decision);
- the Job's condition ``Complete`` → ``succeeded``; ``Failed`` (or a pod ``Failed``) →
  ``failed`` with the container's exit code;
- every pod ``Running`` → ``running``; otherwise ``provisioning``;
- a pod ``Unschedulable`` for longer than ``unschedulable_seconds`` (no node of that kind
  came) → the Job is deleted and the attempt ``preempted`` ("no capacity"); the offering then
  refuses launches with :class:`CapacityUnavailable` for as long again (the scheduler backs
  off and may place elsewhere).

Pools (``pools``: offering id → settings; docs/pools.md): the cluster's autoscaler owns the
nodes — it brings them for pending pods and removes them after its own scale-down delay (set
``min`` and the idle time on the node pool, e.g. Karpenter's ``consolidateAfter``; budgeteer
refuses them here). budgeteer reads each pooled offering's idle nodes (Ready, schedulable, no
budgeteer pod on them) as its warm instances — the planner prices a start there without a boot
and batches short jobs behind them — and holds launches to the pool's ``max``. Idle nodes are
the cluster's bill, not a job's: nothing is billed as idle.

Stop: the Job is deleted (foreground) with the grace: the kubelet sends SIGTERM, SIGKILL after
``terminationGracePeriodSeconds``; the attempt is ``stopped`` once its pods are gone. Re-attach:
the Job's name is the attempt's, so a restarted service reads it back. Billing: per second from
launch to the end the backend saw, at the catalog's price of the offering (a node shared with
other pods is billed whole to the attempt: the conservative side).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
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
)
from budgeteer.backends.k8s_manifest import K8sSettings, job_name, node_selector, render_job
from budgeteer.backends.market import CatalogPrices
from budgeteer.clock import Clock
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Offering
from budgeteer.errors import BudgeteerError

log = logging.getLogger(__name__)


class KubernetesUnavailable(BudgeteerError):
    """The API server did not answer, or answered 429/5xx (transient)."""

    transient = True


@dataclass
class _Attempt:
    handle: Handle
    stop_reason: str | None = None
    final: Status | None = None


class KubernetesBackend(CatalogPrices):
    """Attempts as Kubernetes Jobs (see the module docstring)."""

    name = "kubernetes"
    capabilities = Capabilities(spot=True, preemption_notice=True, multi_node=True)

    def __init__(
        self,
        clock: Clock,
        settings: K8sSettings,
        api_client: Callable[[], Any],
        *,
        deployment: str,
        pass_env: tuple[str, ...] = (),
        pools: Mapping[str, PoolSettings] | None = None,
        offerings: Mapping[str, Offering] | None = None,
    ) -> None:
        self.clock = clock
        #: pooled offerings (their node pools, scaled by the cluster's autoscaler) and the
        #: offerings by id (to find a pool's nodes)
        self.pools = dict(pools or {})
        self.offerings = dict(offerings or {})
        self._warned: set[str] = set()
        self.settings = settings
        self.deployment = deployment
        self.pass_env = pass_env
        self._api_factory = api_client
        self._api: Any = None
        self._lock = threading.Lock()
        self._attempts: dict[str, _Attempt] = {}
        self._full_until: dict[str, datetime] = {}  # offering → no capacity until

    # -- clients --------------------------------------------------------------------------
    def _apis(self) -> tuple[Any, Any]:
        from kubernetes import client  # noqa: PLC0415 - the kubernetes extra

        if self._api is None:
            self._api = self._api_factory()
        return client.BatchV1Api(self._api), client.CoreV1Api(self._api)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        try:
            return fn()
        except ApiException as exc:
            if exc.status in {429, 500, 502, 503, 504}:
                raise KubernetesUnavailable(f"{what}: HTTP {exc.status} {exc.reason}") from None
            raise
        except OSError as exc:  # urllib3's connection errors are OSErrors
            raise KubernetesUnavailable(f"{what}: {exc}") from None

    # -- the port -------------------------------------------------------------------------
    def manifest(self, request: LaunchRequest) -> dict[str, Any]:
        """The Job this backend would create for ``request``."""
        passed = {n: os.environ[n] for n in self.pass_env if n in os.environ}
        return render_job(self.settings, request, self.deployment, passed | job_variables(request))

    def launch(self, request: LaunchRequest) -> Handle:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        check_request(request)
        offering = request.offering
        if self.settings.image(offering) is None:
            raise LaunchFailed(f"no image for {offering.accelerator} (backend.images)")
        until = self._full_until.get(offering.id)
        now = self.clock.now()
        if until is not None and until > now:
            raise CapacityUnavailable(
                f"{offering.id}: pods found no node for {self.settings.unschedulable_seconds:.0f}"
                f" s; not asked again before {until:%H:%M:%S}"
            )
        self._check_pool_max(request)
        manifest = self.manifest(request)
        batch, _ = self._apis()
        name = manifest["metadata"]["name"]
        try:
            self._call(
                "create Job",
                lambda: batch.create_namespaced_job(self.settings.namespace, manifest),
            )
        except ApiException as exc:
            if exc.status == 409:  # already there (a retried launch): adopt it
                adopted = self.adopt(request)
                if adopted is not None:
                    return adopted
            raise LaunchFailed(
                f"the API server refused Job {name}: HTTP {exc.status}: {_body(exc)}"
            ) from None
        instances = tuple(f"{name}-{i}" for i in range(request.instances))
        handle = Handle.of(self.name, name, request, instances, now)
        with self._lock:
            self._attempts[name] = _Attempt(handle)
        return handle

    def adopt(self, request: LaunchRequest) -> Handle | None:
        """Re-attach by the Job's name; ``None`` when the cluster has no such Job."""
        name = job_name(request, self.deployment)
        job = self._job(name)
        if job is None:
            return None
        created = job.metadata.creation_timestamp or self.clock.now()
        instances = tuple(f"{name}-{i}" for i in range(request.instances))
        handle = Handle.of(self.name, name, request, instances, _utc(created))
        attempt = _Attempt(handle)
        if job.metadata.deletion_timestamp is not None:
            attempt.stop_reason = "stopped before the restart"
        with self._lock:
            self._attempts[name] = attempt
        return handle

    def status(self, handle: Handle) -> Status:
        """See the module docstring."""
        with self._lock:
            attempt = self._attempts[handle.id]
            if attempt.final is not None:
                return attempt.final
        status = self._status(attempt)
        if status.state.is_final:
            with self._lock:
                attempt.final = status
        return status

    def stop(self, handle: Handle, reason: str) -> None:
        """Delete the Job (the kubelet's SIGTERM, SIGKILL after the grace)."""
        with self._lock:
            attempt = self._attempts[handle.id]
            if attempt.final is not None or attempt.stop_reason is not None:
                return
            attempt.stop_reason = reason
        self._delete(handle.id)

    def live(self) -> list[Handle]:
        """Attempts that have not ended."""
        with self._lock:
            handles = [a.handle for a in self._attempts.values() if a.final is None]
        return [h for h in handles if not self.status(h).state.is_final]

    def poll(self) -> None:
        """Nothing to advance: the cluster runs the pods."""

    # -- pools: the node pools' idle nodes -----------------------------------------------
    def pool_settings(self) -> dict[str, PoolSettings]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        return dict(self.pools)

    def warm_data(self) -> dict[str, dict[str, int]]:
        """See :class:`~budgeteer.backends.base.WarmPools`: none known — a node's disk is the
        cluster's, and a pod's emptyDir goes with the pod."""
        return {}

    def warm_instances(self) -> dict[str, int]:
        """See :class:`~budgeteer.backends.base.WarmPools`: per pooled offering, its nodes
        (by :func:`~budgeteer.backends.k8s_manifest.node_selector`) that are Ready, schedulable
        and run no pod of budgeteer's — the autoscaler keeps them until its scale-down, and a
        job placed there starts without waiting for a node. An offering whose nodes cannot be
        listed (the service account may not list nodes: a ClusterRole is needed) counts none,
        with one warning."""
        out: dict[str, int] = {}
        if not self.pools:
            return out
        _, core = self._apis()
        try:
            pods = self._call(
                "list pods",
                lambda: core.list_namespaced_pod(
                    self.settings.namespace, label_selector="app.kubernetes.io/managed-by=budgeteer"
                ),
            )
        except Exception as exc:
            self._warn("pods", f"cannot list budgeteer's pods: {exc}")
            return out
        busy = {
            p.spec.node_name
            for p in pods.items
            if p.spec is not None
            and p.spec.node_name
            and (p.status is None or p.status.phase not in {"Succeeded", "Failed"})
        }
        for oid in self.pools:
            offering = self.offerings.get(oid)
            if offering is None:
                continue
            selector = ",".join(
                f"{k}={v}" for k, v in node_selector(self.settings, offering).items()
            )
            try:
                nodes = self._call("list nodes", partial(core.list_node, label_selector=selector))
            except Exception as exc:
                self._warn(oid, f"cannot list the nodes of {oid}: {exc}")
                continue
            idle = [n for n in nodes.items if _ready(n) and n.metadata.name not in busy]
            if idle:
                out[oid] = len(idle)
        return out

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("pools: %s", message)

    def _check_pool_max(self, request: LaunchRequest) -> None:
        """Refuse a launch beyond its pool's ``max`` instances at once."""
        with self._lock:
            live = [a.handle for a in self._attempts.values() if a.final is None]
        check_pool_max(self.pools, request, live)

    # -- reading ----------------------------------------------------------------------------
    def _status(self, attempt: _Attempt) -> Status:
        handle = attempt.handle
        now = self.clock.now()
        started = handle.launched_at
        job = self._job(handle.id)
        pods = self._pods(handle.id)
        if job is None or job.metadata.deletion_timestamp is not None:
            if attempt.stop_reason is not None:
                if pods and job is not None:
                    return Status(RunState.RUNNING, None, "", started)  # still in its grace
                return Status(RunState.STOPPED, None, attempt.stop_reason, started, now)
            if job is None:
                return Status(
                    RunState.FAILED, None, "the Job was deleted outside budgeteer", started, now
                )
        for pod in pods:
            disrupted = _condition(pod, "DisruptionTarget")
            if disrupted is not None and disrupted.status == "True":
                self._delete(handle.id)
                why = f"{disrupted.reason or 'disrupted'}: {disrupted.message or ''}".strip(": ")
                return Status(RunState.PREEMPTED, _exit_code(pod), why, started, now)
        conditions = {c.type: c for c in (job.status.conditions or [])} if job.status else {}
        if "Complete" in conditions and conditions["Complete"].status == "True":
            return Status(RunState.SUCCEEDED, 0, "", started, now)
        failed = [p for p in pods if p.status and p.status.phase == "Failed"]
        if failed or ("Failed" in conditions and conditions["Failed"].status == "True"):
            code = next((c for p in failed if (c := _exit_code(p)) is not None), None)
            reason = conditions["Failed"].message if "Failed" in conditions else ""
            self._delete(handle.id)  # the other ranks stop with it
            return Status(RunState.FAILED, code, reason or f"exit code {code}", started, now)
        unschedulable = [p for p in pods if _unschedulable(p)]
        limit = timedelta(seconds=self.settings.unschedulable_seconds)
        if unschedulable and now - started >= limit:
            self._delete(handle.id)
            self._full_until[handle.offering_id] = now + limit
            why = _condition(unschedulable[0], "PodScheduled")
            detail = why.message if why is not None and why.message else "no node"
            return Status(
                RunState.PREEMPTED,
                None,
                f"no capacity: unschedulable for {limit.total_seconds():.0f} s ({detail})",
                started,
                now,
            )
        wanted = len(handle.instance_ids)
        running = [p for p in pods if p.status and p.status.phase in {"Running", "Succeeded"}]
        if len(running) >= wanted:
            return Status(RunState.RUNNING, None, "", started)
        return Status(RunState.PROVISIONING, None, "", None)

    def _job(self, name: str) -> Any:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        batch, _ = self._apis()
        try:
            return self._call(
                "read Job", lambda: batch.read_namespaced_job(name, self.settings.namespace)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _pods(self, name: str) -> list[Any]:
        _, core = self._apis()
        reply = self._call(
            "list pods",
            lambda: core.list_namespaced_pod(
                self.settings.namespace, label_selector=f"budgeteer.io/key={name}"
            ),
        )
        return list(reply.items or [])

    def _delete(self, name: str) -> None:
        from kubernetes import client  # noqa: PLC0415
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        batch, _ = self._apis()
        body = client.V1DeleteOptions(
            propagation_policy="Foreground",
            grace_period_seconds=int(self.settings.grace_seconds),
        )
        try:
            self._call(
                "delete Job",
                lambda: batch.delete_namespaced_job(name, self.settings.namespace, body=body),
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


def _condition(pod: Any, kind: str) -> Any:
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == kind:
            return c
    return None


def _unschedulable(pod: Any) -> bool:
    c = _condition(pod, "PodScheduled")
    return c is not None and c.status == "False" and c.reason == "Unschedulable"


def _exit_code(pod: Any) -> int | None:
    for cs in (pod.status.container_statuses if pod.status else None) or []:
        terminated = cs.state.terminated if cs.state else None
        if terminated is not None:
            return int(terminated.exit_code)
    return None


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _body(exc: Any) -> str:
    return str(getattr(exc, "body", "") or exc.reason)[:300]


def api_client_factory(kubeconfig: str | None, context: str | None) -> Callable[[], Any]:
    """How to reach the cluster: a kubeconfig file (and context), else in-cluster (the
    service account of the service's own pod)."""

    def make() -> Any:
        from kubernetes import config  # noqa: PLC0415

        if kubeconfig is not None:
            return config.new_client_from_config(config_file=kubeconfig, context=context)
        config.load_incluster_config()
        from kubernetes import client  # noqa: PLC0415

        return client.ApiClient()

    return make


def _ready(node: Any) -> bool:
    """A node that takes pods: its ``Ready`` condition true, not cordoned."""
    if node.spec is not None and node.spec.unschedulable:
        return False
    conditions = (node.status.conditions if node.status is not None else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)
