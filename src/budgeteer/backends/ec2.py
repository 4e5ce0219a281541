"""The ``ec2`` backend: each attempt is one ``RunInstances`` call in the team's AWS account
(boto3, the optional extra ``budgeteer[aws]``).

Launch. The offering's instance type, ``instances`` of them, in the subnet configured for its
zone (``subnets``: zone or AZ id → subnet; ``"*"`` for regional offerings), the AMI configured
for its accelerator (``images``: accelerator → AMI, ``"*"`` for the rest), the security groups,
instance profile and key; spot offerings with ``InstanceMarketOptions`` (one-time, terminate on
interruption, ``MaxPrice`` when ``spot_max_price_fraction`` of the on-demand price is set — AWS
caps at on-demand otherwise); shutdown behaviour *terminate*; tags ``budgeteer:deployment``,
``budgeteer:job``, ``budgeteer:attempt`` (a restarted scheduler finds its instances by them) and
a ``ClientToken`` per attempt (AWS launches a retried call once). The user data
(:func:`render_user_data`) exports the job's environment — its API URL and token, ids, market —
and runs :mod:`budgeteer.backends.ec2_agent` with the command: the agent restores the checkpoint
from S3, runs the job, passes it the notice, saves the checkpoint back, and writes the exit.

Errors: ``InsufficientInstanceCapacity`` and its kin (``SpotMaxPriceTooLow``, the account's
instance and vCPU limits, ``MaxSpotInstanceCountExceeded``) → :class:`CapacityUnavailable`
(transient: the scheduler backs off and may place elsewhere); throttling and AWS's own errors →
:class:`Ec2Unavailable` (transient); anything else (a bad AMI, subnet or parameter) →
:class:`LaunchFailed` with AWS's code and message.

Status. ``DescribeInstances`` and the agents' exit records in S3; the attempt is
``provisioning`` until every instance runs, ``running`` until every rank wrote its exit (then
``succeeded`` if all exited 0, else ``failed`` with the first non-zero code), ``stopped`` after
budgeteer's stop, ``preempted`` after a spot interruption — learned from the ``EC2 Spot
Instance Interruption Warning`` events EventBridge delivers to an SQS queue
(``interruption_queue_url``; the backend polls it), from an agent that saw the instance-action,
or from the instance's state reason ``Server.SpotInstanceTermination``. An instance terminated
with no exit record and no interruption is ``failed`` with its state reason. When an attempt
ends, its instances are terminated (the agent also powers its instance off): billing is per
second from launch to termination, at the catalog's price of the offering.

Stop. ``stop`` puts ``ATTEMPT/stop`` in S3 (the agents poll it and send the job SIGTERM); once
``grace_seconds`` have passed, or the agents have written their exits, the instances are
terminated.

Pools (``pools``: offering id → settings; :mod:`budgeteer.backends.ec2_pools`): a pooled
offering's instances are kept running between attempts and take the next job from S3.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from budgeteer.backends.base import (
    Capabilities,
    CapacityUnavailable,
    Handle,
    IdleTime,
    LaunchFailed,
    LaunchRequest,
    RunState,
    Status,
    check_request,
    job_variables,
)
from budgeteer.backends.ec2_launch import (
    BID_HISTORY_DAYS,
    CAPACITY_CODES,
    SPOT_TERMINATION,
    TRANSIENT_CODES,
    Ec2Attempt,
    Ec2Settings,
    Ec2Unavailable,
    InterruptionQueue,
    attempt_key,
    attempt_started,
    attempt_status,
    client_error,
    deployment_root,
    max_price,
    on_demand_sibling,
    render_user_data,
    run_instances_args,
    state_reason,
)
from budgeteer.backends.ec2_pools import Ec2Pools
from budgeteer.backends.market import CatalogPrices
from budgeteer.clock import Clock
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Market, Offering
from budgeteer.domain.tier import Tier

log = logging.getLogger(__name__)

_NO_INSTANCE = frozenset({"InvalidInstanceID.NotFound"})
_NO_KEY = frozenset({"NoSuchKey", "404"})

__all__ = [
    "Ec2Backend",
    "Ec2Settings",
    "Ec2Unavailable",
    "attempt_key",
    "render_user_data",
]


class Ec2Backend(CatalogPrices):
    """Attempts as EC2 instances (see the module docstring)."""

    name = "ec2"
    capabilities = Capabilities(spot=True, preemption_notice=True, multi_node=True)

    def __init__(
        self,
        clock: Clock,
        settings: Ec2Settings,
        offerings: Mapping[str, Offering],
        *,
        namespace: str,
        session: Callable[[str], Any] | None = None,
        pools: Mapping[str, PoolSettings] | None = None,
    ) -> None:
        self.clock = clock
        self.settings = settings
        self.namespace = namespace
        self.offerings = dict(offerings)
        self._client = session or self._boto_client
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._attempts: dict[str, Ec2Attempt] = {}
        self.interruptions = InterruptionQueue(settings.interruption_queue_url)
        self._interrupted = self.interruptions.warned  # instance ids AWS warned about
        self.pools = Ec2Pools(
            settings, namespace, pools or {}, self.offerings, self._call, self._terminate, clock.now
        )
        self.warm_starts: set[str] = set()  # attempts (keys) started on warm instances

    # -- clients --------------------------------------------------------------------------
    def _boto_client(self, service: str) -> Any:
        import boto3  # noqa: PLC0415 - the aws extra

        return boto3.client(
            service, region_name=self.settings.region, endpoint_url=self.settings.endpoint_url
        )

    def client(self, service: str) -> Any:
        """The boto3 client for ``service`` (made once)."""
        if service not in self._clients:
            self._clients[service] = self._client(service)
        return self._clients[service]

    def _call(self, service: str, op: str, **kwargs: Any) -> Any:
        """``service.op(**kwargs)``, AWS's busy answers and unreachable endpoints turned into
        :class:`Ec2Unavailable`; other errors raised as they are."""
        try:
            return getattr(self.client(service), op)(**kwargs)
        except Exception as exc:
            code = client_error(exc)
            if code is not None and code[0] in TRANSIENT_CODES:
                raise Ec2Unavailable(f"{service} {op}: {code[0]}: {code[1]}") from None
            if code is None and type(exc).__name__ in {
                "EndpointConnectionError",
                "ConnectTimeoutError",
                "ReadTimeoutError",
                "ConnectionClosedError",
            }:
                raise Ec2Unavailable(f"{service} {op}: {exc}") from None
            raise

    # -- the port -------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Handle:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        check_request(request)
        offering = request.offering
        if not self.settings.serves(offering):
            raise LaunchFailed(
                f"{offering.id} cannot launch on ec2 in {self.settings.region}: "
                "needs provider aws, this region, an image for its accelerator and, for a "
                "zonal offering, a subnet for its zone"
            )
        key = attempt_key(request, self.namespace)
        pooled = self.pools.pooled(offering.id, request.team)
        if pooled:
            warm = self._take_warm(request, key)
            if warm is not None:
                return warm
        self._check_limit(request)
        if pooled:
            user_data = self.pools.user_data(offering.id)
        else:
            user_data = render_user_data(
                self.settings, request, self.namespace, job_variables(request)
            )
        spot_price = (
            self._max_price(offering, request.tier) if offering.market is Market.SPOT else None
        )
        kwargs = run_instances_args(self.settings, request, self.namespace, user_data, spot_price)
        reply = self._run(offering, key, kwargs)
        instances = reply.get("Instances", [])
        ids = tuple(sorted(str(i["InstanceId"]) for i in instances))
        if len(ids) != request.instances:  # MinCount = MaxCount: all or nothing
            self._terminate(ids)
            raise CapacityUnavailable(f"{offering.id}: {len(ids)} of {request.instances} launched")
        handle = Handle.of(self.name, key, request, ids, self.clock.now())
        if pooled:
            self.pools.launched(ids, request, handle.launched_at)
        with self._lock:
            self._attempts[key] = Ec2Attempt.of(handle, key, request)
        return handle

    def _take_warm(self, request: LaunchRequest, key: str) -> Handle | None:
        """The attempt started on warm instances of its pool, or ``None`` when the pool has
        not that many."""
        now = request.taken_at(self.clock.now())
        ids = self.pools.take(request, now)
        if ids is None:
            return None
        handle = Handle.of(self.name, key, request, ids, now)
        with self._lock:
            self._attempts[key] = Ec2Attempt.of(handle, key, request)
            self.warm_starts.add(key)
        return handle

    def _run(self, offering: Offering, key: str, kwargs: dict[str, Any]) -> Any:
        """``RunInstances`` in each of the offering's subnets in turn until one has room (a
        zone out of capacity fails over to the next at once); :class:`CapacityUnavailable`
        when none has."""
        refusals: list[str] = []
        for subnet in self.settings.subnets_for(offering):
            args = dict(kwargs, SubnetId=subnet) if subnet else kwargs
            try:
                return self._call("ec2", "run_instances", **args)
            except Ec2Unavailable:
                raise
            except Exception as exc:
                code = client_error(exc)
                if code is None:
                    raise
                if code[0] not in CAPACITY_CODES:
                    raise LaunchFailed(f"EC2 refused {key}: {code[0]}: {code[1]}") from None
                refusals.append(f"{subnet or 'default VPC'}: {code[0]}: {code[1]}")
        raise CapacityUnavailable(f"{offering.id}: " + "; ".join(refusals))

    def adopt(self, request: LaunchRequest) -> Handle | None:
        """Re-attach by the attempt's tags; ``None`` when EC2 has no instance of it."""
        key = attempt_key(request, self.namespace)
        found = self._by_tags(request.job_id, request.attempt)
        if not found:
            return None
        launched = min(attempt_started(i) for i in found)
        ids = tuple(sorted(str(i["InstanceId"]) for i in found))
        handle = Handle.of(self.name, key, request, ids, launched)
        attempt = Ec2Attempt.of(handle, key, request)
        prefix = self._attempt_prefix(key)
        attempt.stop_reason = self._read_text(f"{prefix}/stop")
        if attempt.stop_reason is not None:
            attempt.stop_at = self.clock.now()
        attempt.interrupted = self._read_text(f"{prefix}/interrupted") is not None
        with self._lock:
            self._attempts[key] = attempt
        return handle

    def status(self, handle: Handle) -> Status:
        """See :class:`~budgeteer.backends.base.ComputeBackend` and the module docstring."""
        with self._lock:
            attempt = self._attempts[handle.id]
            if attempt.final is not None:
                return attempt.final
        self._read_interruptions()
        instances = self._describe(handle.instance_ids)
        if not attempt.interrupted and (
            any(i in self._interrupted for i in handle.instance_ids)
            or any(state_reason(x) == SPOT_TERMINATION for x in instances.values())
        ):
            attempt.interrupted = True
            self._put_text(f"{self._attempt_prefix(attempt.key)}/interrupted", "1")
        status = self._status(attempt, instances)
        if status.state.is_final:
            self._ended(attempt, status, instances)
        return status

    def _ended(
        self, attempt: Ec2Attempt, status: Status, instances: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """The attempt ended: on a pooled offering, with every agent's exit written, the market
        not in it and the instances still running, they go warm; else they are terminated."""
        handle = attempt.handle
        ids = handle.instance_ids
        keep = (
            self.pools.pooled(handle.offering_id, attempt.team)
            and status.state is not RunState.PREEMPTED
            and len(self._exits(attempt.key)) >= len(ids)
            and all(instances.get(i, {}).get("State", {}).get("Name") == "running" for i in ids)
            and not any(i in self._interrupted for i in ids)
        )
        with self._lock:
            if attempt.final is not None or attempt.ending:
                return
            attempt.ending = True  # one caller ends it (API threads read statuses too)
        try:
            if keep:  # kept warm before the end is final: a failure here is tried again
                at = status.ended_at or self.clock.now()
                offering = self.offerings[handle.offering_id]
                self.pools.left(offering, handle, at, attempt.data_uri, attempt.team)
            else:
                self._terminate(ids)
        except BaseException:
            with self._lock:
                attempt.ending = False
            raise
        with self._lock:
            attempt.final, attempt.ending = status, False

    # -- pools (see :mod:`budgeteer.backends.ec2_pools`) ------------------------------------
    def pool_settings(self) -> dict[str, PoolSettings]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        return dict(self.pools.settings)

    def warm_instances(self) -> dict[str, int]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        return self.pools.counts()

    def warm_data(self) -> dict[str, dict[str, int]]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        return self.pools.data()

    def take_idle(self) -> list[IdleTime]:
        """See :class:`~budgeteer.backends.base.IdleBilling`."""
        return self.pools.take_idle()

    def release_idle(self) -> None:
        """See :class:`~budgeteer.backends.base.IdleBilling`: the warm instances EC2 no longer
        runs (the market took them, someone terminated them) are dropped, billed until now;
        those each pool's sizing releases are given back, what a floor lacks is booted."""
        warm, now = self.pools.warm_ids(), self.clock.now()
        if not warm and not self.pools.floors(now):
            return
        self._read_interruptions()
        seen = self._describe(tuple(sorted(warm)))
        lost = {
            i
            for i in warm
            if i in self._interrupted or seen.get(i, {}).get("State", {}).get("Name") != "running"
        }
        with self._lock:
            busy = {oid: self._busy(oid) for oid in self.pools.settings}
        for oid, wanted in self.pools.release_idle(busy, lost, now).items():
            offering = self.offerings[oid]
            spot = self._max_price(offering, None) if offering.market is Market.SPOT else None
            self.pools.boot(offering, wanted, now, spot, self._run)

    def _busy(self, offering_id: str) -> int:
        """Instances of ``offering_id`` running attempts now (under the lock)."""
        return sum(
            len(a.handle.instance_ids)
            for a in self._attempts.values()
            if a.final is None and a.handle.offering_id == offering_id
        )

    def stop(self, handle: Handle, reason: str) -> None:
        """The notice: ``ATTEMPT/stop`` in S3, which the agents poll; the instances are
        terminated once the grace has passed or the agents have written their exits."""
        with self._lock:
            attempt = self._attempts[handle.id]
            if attempt.final is not None or attempt.stop_reason is not None:
                return
            attempt.stop_reason = reason
            attempt.stop_at = self.clock.now()
        self._put_text(f"{self._attempt_prefix(attempt.key)}/stop", reason)

    def live(self) -> list[Handle]:
        """Attempts that have not ended."""
        with self._lock:
            handles = [a.handle for a in self._attempts.values() if a.final is None]
        return [h for h in handles if not self.status(h).state.is_final]

    def poll(self) -> None:
        """Nothing to advance: EC2 runs the instances."""

    # -- reading the attempt's state -----------------------------------------------------
    def _status(self, attempt: Ec2Attempt, instances: Mapping[str, Mapping[str, Any]]) -> Status:
        return attempt_status(
            attempt.handle,
            self._exits(attempt.key),
            instances,
            stop_reason=attempt.stop_reason,
            stop_at=attempt.stop_at,
            interrupted=attempt.interrupted,
            grace_seconds=self.settings.grace_seconds,
            now=self.clock.now(),
        )

    def _unless(self, gone: frozenset[str], service: str, op: str, **kwargs: Any) -> Any:
        """``service.op(**kwargs)`` as :meth:`_call`, or ``None`` when AWS answers one of the
        error codes in ``gone`` (the thing is not there)."""
        try:
            return self._call(service, op, **kwargs)
        except Ec2Unavailable:
            raise
        except Exception as exc:
            code = client_error(exc)
            if code is None or code[0] not in gone:
                raise
            return None

    def _describe(self, ids: tuple[str, ...]) -> dict[str, Mapping[str, Any]]:
        out: dict[str, Mapping[str, Any]] = {}
        pages = self._unless(_NO_INSTANCE, "ec2", "describe_instances", InstanceIds=list(ids))
        if pages is None:
            return out  # every one gone from EC2's memory
        for reservation in pages.get("Reservations", []):
            for inst in reservation.get("Instances", []):
                out[str(inst["InstanceId"])] = inst
        return out

    def _by_tags(self, job_id: str, attempt: int) -> list[Mapping[str, Any]]:
        reply = self._call(
            "ec2",
            "describe_instances",
            Filters=[
                {"Name": "tag:budgeteer:deployment", "Values": [self.namespace]},
                {"Name": "tag:budgeteer:job", "Values": [job_id]},
                {"Name": "tag:budgeteer:attempt", "Values": [str(attempt)]},
            ],
        )
        return [i for r in reply.get("Reservations", []) for i in r.get("Instances", [])]

    def _exits(self, key: str) -> dict[int, dict[str, Any]]:
        """The agents' exit records by rank."""
        prefix = f"{self._attempt_prefix(key)}/exit-"
        reply = self._call("s3", "list_objects_v2", Bucket=self.settings.bucket, Prefix=prefix)
        out: dict[int, dict[str, Any]] = {}
        for obj in reply.get("Contents", []):
            name = str(obj["Key"])[len(prefix) :]
            rank = name.removesuffix(".json")
            if not rank.isdigit():
                continue
            text = self._read_text(str(obj["Key"]))
            try:
                record = json.loads(text or "")
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                log.warning("ignoring a malformed exit record %s", obj["Key"])
                continue
            out[int(rank)] = record
        return out

    def _read_interruptions(self) -> None:
        """Drain the interruption queue (see :class:`~budgeteer.backends.ec2_launch.
        InterruptionQueue`) for the instances of the attempts this backend knows."""
        with self._lock:
            ours = {i for a in self._attempts.values() for i in a.handle.instance_ids}
        self.interruptions.read(self._call, ours, self.clock.now())

    # -- helpers --------------------------------------------------------------------------
    def _attempt_prefix(self, key: str) -> str:
        return f"{deployment_root(self.settings, self.namespace)}/attempts/{key}"

    def _put_text(self, key: str, text: str) -> None:
        self._call("s3", "put_object", Bucket=self.settings.bucket, Key=key, Body=text.encode())

    def _read_text(self, key: str) -> str | None:
        reply = self._unless(_NO_KEY, "s3", "get_object", Bucket=self.settings.bucket, Key=key)
        return None if reply is None else str(reply["Body"].read().decode("utf-8", "replace"))

    def _terminate(self, ids: tuple[str, ...]) -> None:
        if ids:
            self._unless(_NO_INSTANCE, "ec2", "terminate_instances", InstanceIds=list(ids))

    def _check_limit(self, request: LaunchRequest) -> None:
        """Refuse a launch beyond the offering's limit or its pool's ``max`` (busy instances
        count; warm ones are given back, longest idle first, to make room)."""
        oid = request.offering.id
        configured = self.settings.limits.get(oid, request.offering.max_instances)
        pool = self.pools.settings.get(oid)
        caps = [c for c in (configured, pool.maximum if pool else None) if c is not None]
        if not caps:
            return
        limit = min(caps)
        now = self.clock.now()
        with self._lock:
            used = self._busy(oid)
            if used + request.instances > limit:
                pooled = configured is None or limit < configured
                what = "the pool's max" if pooled else "backend.limits"
                raise CapacityUnavailable(
                    f"{oid}: {used} of {limit} instances in use ({what}), "
                    f"{request.instances} asked for"
                )
        if pool is not None:
            self.pools.make_room(oid, used + request.instances - limit, now)

    def _max_price(self, offering: Offering, tier: Tier | None) -> str | None:
        """``MaxPrice`` of a spot launch (see :func:`~budgeteer.backends.ec2_launch.max_price`)."""
        on_demand = on_demand_sibling(self.offerings.values(), offering)
        now = self.clock.now()
        ceiling = None if on_demand is None else self.price(on_demand, now)[0]
        since, live = now - timedelta(days=BID_HISTORY_DAYS), self.live_prices
        recent = [p for _, p in live.recent(offering, since)] if live is not None else []
        return max_price(self.settings, tier, ceiling, recent)
