"""The EC2 backend's pure half: its settings, the attempt's key, the user data an instance boots
with and the ``RunInstances`` arguments, AWS's error codes, the interruption warning's shape and
its queue, and an attempt's status from what EC2 and the agents say (see
:mod:`budgeteer.backends.ec2`)."""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np

from budgeteer.backends.base import Handle, LaunchFailed, LaunchRequest, RunState, Status
from budgeteer.core.spot.bids import bid_for
from budgeteer.domain.offering import Market, Offering
from budgeteer.domain.tier import Tier
from budgeteer.errors import BudgeteerError

log = logging.getLogger("budgeteer.backends.ec2")

#: AWS error codes that mean "no room now" (try later or elsewhere).
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "InsufficientFreeAddressesInSubnet",
    }
)
#: AWS error codes that mean "AWS is busy" (try again).
TRANSIENT_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ServiceUnavailable",
        "Unavailable",
        "InternalError",
        "InternalFailure",
    }
)
#: The detail-type of AWS's two-minute warning (EventBridge → SQS).
INTERRUPTION_WARNING = "EC2 Spot Instance Interruption Warning"
#: The state reason of an instance AWS took back.
SPOT_TERMINATION = "Server.SpotInstanceTermination"
#: User data is at most 16 KB (before base64).
MAX_USER_DATA = 16 * 1024
#: Days of live spot prices a bid is made from, and the fewest readings it needs.
BID_HISTORY_DAYS = 7
MIN_BID_HISTORY = 3
#: Seconds between two reads of the interruption queue.
QUEUE_POLL_SECONDS = 1.0


class Ec2Unavailable(BudgeteerError):
    """EC2, S3 or SQS did not answer or throttled (transient)."""

    transient = True


@dataclass(frozen=True, slots=True)
class Ec2Settings:
    """Where and how attempts launch (the ``ec2`` backend's configuration, see the module
    docstring); ``bucket``/``prefix``: where checkpoints, exits and stops live in S3."""

    region: str
    bucket: str
    images: Mapping[str, str]
    prefix: str = "budgeteer"
    subnets: Mapping[str, str] = field(default_factory=dict)
    security_groups: tuple[str, ...] = ()
    instance_profile: str | None = None
    key_name: str | None = None
    interruption_queue_url: str | None = None
    python: str = "python3"
    instance_workdir: str = "/var/lib/budgeteer"
    grace_seconds: float = 110.0
    poll_seconds: float = 5.0
    sync_seconds: float = 60.0
    shutdown: bool = True
    spot_max_price_fraction: float | None = None
    limits: Mapping[str, int] = field(default_factory=dict)
    endpoint_url: str | None = None

    def image(self, offering: Offering) -> str | None:
        """The AMI for ``offering``'s accelerator (or the default)."""
        return self.images.get(offering.accelerator) or self.images.get("*")

    def subnets_for(self, offering: Offering) -> list[str | None]:
        """The subnets to try for ``offering``, in order: those configured for its zones, then
        ``"*"``; a zonal offering (one zone) only its zone's. ``[None]``: the default VPC."""
        own = list(dict.fromkeys(self.subnets[z] for z in offering.zones if z in self.subnets))
        if len(offering.zones) == 1:
            return list(own)
        if "*" in self.subnets and self.subnets["*"] not in own:
            own.append(self.subnets["*"])
        return list(own) or [None]

    def serves(self, offering: Offering) -> bool:
        """Whether attempts on ``offering`` can launch here: AWS, this region, an AMI, and a
        subnet when the offering is zonal."""
        return (
            offering.provider == "aws"
            and offering.region == self.region
            and self.image(offering) is not None
            and bool(self.subnets_for(offering))
        )


def run_instances_args(
    settings: Ec2Settings,
    request: LaunchRequest,
    namespace: str,
    user_data: str,
    spot_max_price: str | None,
) -> dict[str, Any]:
    """``RunInstances``' arguments for ``request`` (see :mod:`budgeteer.backends.ec2`; the
    subnet is added per try): tagged with the deployment ``namespace`` and the attempt, whose
    key makes the client token; ``spot_max_price`` is the ``MaxPrice`` of a spot launch
    (``None``: AWS's cap, on-demand)."""
    key = attempt_key(request, namespace)
    tags = {"budgeteer:job": request.job_id, "budgeteer:attempt": str(request.attempt)}
    count = (request.instances, request.instances)
    return _run_args(
        settings, request.offering, namespace, count, tags, key, user_data, spot_max_price
    )


def pool_boot_args(
    settings: Ec2Settings,
    offering: Offering,
    namespace: str,
    user_data: str,
    count: int,
    team: str,
    token: str,
    spot_max_price: str | None,
) -> dict[str, Any]:
    """``RunInstances``' arguments for a pool's boot with no job: 1 to ``count`` instances of
    ``offering`` (as many as EC2 has), tagged with the deployment and ``budgeteer:pool-team``
    (who pays while they idle); ``token`` makes the boot idempotent."""
    tags = {"budgeteer:pool-team": team}
    return _run_args(
        settings, offering, namespace, (1, count), tags, token, user_data, spot_max_price
    )


def _run_args(
    settings: Ec2Settings,
    offering: Offering,
    namespace: str,
    count: tuple[int, int],
    own_tags: Mapping[str, str],
    name: str,
    user_data: str,
    spot_max_price: str | None,
) -> dict[str, Any]:
    """The arguments every ``RunInstances`` of the deployment shares (see
    :func:`run_instances_args`): ``count`` is ``(MinCount, MaxCount)``, ``name`` the ``Name``
    tag and client token."""
    tags = [
        {"Key": "budgeteer:deployment", "Value": namespace},
        *({"Key": k, "Value": v} for k, v in own_tags.items()),
        {"Key": "budgeteer:offering", "Value": offering.id},
        {"Key": "Name", "Value": name},
    ]
    kwargs: dict[str, Any] = {
        "ImageId": settings.image(offering),
        "InstanceType": offering.instance_type,
        "MinCount": count[0],
        "MaxCount": count[1],
        "UserData": user_data,
        "ClientToken": name[-64:],
        "InstanceInitiatedShutdownBehavior": "terminate",
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    if settings.security_groups:
        kwargs["SecurityGroupIds"] = list(settings.security_groups)
    if settings.instance_profile:
        profile = settings.instance_profile
        kwargs["IamInstanceProfile"] = (
            {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
        )
    if settings.key_name:
        kwargs["KeyName"] = settings.key_name
    if offering.market is Market.SPOT:
        spot: dict[str, Any] = {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        }
        if spot_max_price is not None:
            spot["MaxPrice"] = spot_max_price
        kwargs["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    return kwargs


def attempt_key(request: LaunchRequest | Handle, namespace: str) -> str:
    """``bgt-<deployment>-<job>-<attempt>``: tags, client token and S3 paths."""
    return f"bgt-{namespace}-{request.job_id}-{request.attempt}"


def deployment_root(settings: Ec2Settings, namespace: str) -> str:
    """The deployment's S3 prefix (attempts, checkpoints, pooled instances' mailboxes)."""
    return f"{settings.prefix.strip('/')}/{namespace}"


def agent_script(
    settings: Ec2Settings, comment: str, env: Mapping[str, str], mode: list[str]
) -> str:
    """A bootstrap: a bash script exporting ``env`` and running the agent with the settings'
    flags and ``mode`` (one job's prefixes and command, or a pool's mailbox)."""
    agent = [
        settings.python,
        "-m",
        "budgeteer.backends.ec2_agent",
        "--bucket",
        settings.bucket,
        "--workdir",
        settings.instance_workdir,
        "--grace",
        f"{settings.grace_seconds:g}",
        "--poll",
        f"{settings.poll_seconds:g}",
        "--sync",
        f"{settings.sync_seconds:g}",
        *(["--shutdown"] if settings.shutdown else []),
        *mode,
    ]
    lines = [
        "#!/bin/bash",
        f"# budgeteer: {comment}",
        "set -eu",
        *(f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())),
        f"export AWS_DEFAULT_REGION={shlex.quote(settings.region)}",
        "exec " + shlex.join(agent),
    ]
    return "\n".join(lines) + "\n"


def render_user_data(
    settings: Ec2Settings, request: LaunchRequest, namespace: str, env: Mapping[str, str]
) -> str:
    """The instance's bootstrap: a bash script exporting ``env`` (the job's variables) and
    running the agent with the command. Raises :class:`LaunchFailed` beyond 16 KB."""
    key = attempt_key(request, namespace)
    root = deployment_root(settings, namespace)
    mode = [
        "--attempt-prefix",
        f"{root}/attempts/{key}",
        "--checkpoint-prefix",
        f"{root}/checkpoints/{request.job_id}",
        "--nodes",
        str(request.instances),
        "--",
        *request.command,
    ]
    comment = f"job {request.job_id}, attempt {request.attempt} ({key})"
    script = agent_script(settings, comment, env, mode)
    if len(script.encode()) > MAX_USER_DATA:
        raise LaunchFailed(
            f"user data is {len(script.encode())} bytes; EC2 takes at most {MAX_USER_DATA} "
            "(a shorter command or fewer pass_env variables)"
        )
    return script


def warned_instance(body: str) -> str | None:
    """The instance of an ``EC2 Spot Instance Interruption Warning`` event; ``None`` for
    anything else (a malformed body, another event)."""
    try:
        event = json.loads(body)
    except (json.JSONDecodeError, TypeError):
        return None
    if not isinstance(event, dict) or event.get("detail-type") != INTERRUPTION_WARNING:
        return None
    detail = event.get("detail")
    instance = detail.get("instance-id") if isinstance(detail, dict) else None
    return instance if isinstance(instance, str) and instance.startswith("i-") else None


def max_price(
    settings: Ec2Settings, tier: Tier | None, ceiling: Decimal | None, recent: list[Decimal]
) -> str | None:
    """``MaxPrice`` for a spot launch: the job's bid from the last week's live spot prices
    (:func:`~budgeteer.core.spot.bids.bid_for`: a quantile by tier, never above ``ceiling``,
    the on-demand price) when the service keeps live prices; else ``spot_max_price_fraction``
    × on-demand; else ``None`` (AWS caps at on-demand)."""
    if tier is not None and ceiling is not None and len(recent) >= MIN_BID_HISTORY:
        prices = np.array([float(p) for p in recent])
        bid = bid_for(tier, prices, np.ones(len(prices), dtype=bool), 1.0, float(ceiling))
        return f"{Decimal(repr(bid.max_usd_per_hour)).quantize(Decimal('0.000001'))}"
    fraction = settings.spot_max_price_fraction
    if fraction is None or ceiling is None:
        return None
    return f"{(ceiling * Decimal(repr(fraction))).quantize(Decimal('0.000001'))}"


def client_error(exc: Exception) -> tuple[str, str] | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    err = response.get("Error") or {}
    return str(err.get("Code", "")), str(err.get("Message", ""))


def state_reason(instance: Mapping[str, Any]) -> str:
    return str((instance.get("StateReason") or {}).get("Code", ""))


def as_utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    parsed = parse_time(value)
    return parsed or datetime.now(UTC)


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def attempt_status(
    handle: Handle,
    exits: Mapping[int, Mapping[str, Any]],
    instances: Mapping[str, Mapping[str, Any]],
    *,
    stop_reason: str | None,
    stop_at: datetime | None,
    interrupted: bool,
    grace_seconds: float,
    now: datetime,
) -> Status:
    """An attempt's status from its agents' ``exits`` (by rank), what EC2 says of its
    ``instances``, budgeteer's stop (``stop_reason`` at ``stop_at``) and whether the market
    interrupted it (see :mod:`budgeteer.backends.ec2`)."""
    started = handle.launched_at
    notice = stop_reason
    if len(exits) >= len(handle.instance_ids):
        ended = max((parse_time(e.get("ended_at")) or now) for e in exits.values())
        ended = min(max(ended, started), now)
        codes = [int(exits[r].get("code", 1)) for r in sorted(exits)]
        noticed = {e.get("notice") for e in exits.values()} - {None}
        if not noticed and all(c == 0 for c in codes):
            return Status(RunState.SUCCEEDED, 0, "", started, ended)
        if interrupted or "interruption" in noticed:
            return Status(RunState.PREEMPTED, codes[0], "spot interruption", started, ended)
        if notice is not None:
            return Status(RunState.STOPPED, codes[0], notice, started, ended)
        bad = next((c for c in codes if c != 0), 1)
        return Status(RunState.FAILED, bad, f"exit code {bad}", started, ended)
    gone = {
        iid: x
        for iid, x in instances.items()
        if x.get("State", {}).get("Name") in {"shutting-down", "terminated", "stopped"}
    }
    missing = [i for i in handle.instance_ids if i not in instances]
    if gone or missing:
        if interrupted:
            return Status(RunState.PREEMPTED, None, "spot interruption", started, now)
        if notice is not None:
            return Status(RunState.STOPPED, None, notice, started, now)
        why = ", ".join(f"{i}: {state_reason(x) or 'terminated'}" for i, x in sorted(gone.items()))
        if missing:
            why = ", ".join(filter(None, [why, f"{', '.join(missing)}: unknown to EC2"]))
        return Status(RunState.FAILED, None, f"instance ended: {why}", started, now)
    if (
        notice is not None
        and stop_at is not None
        and now - stop_at >= timedelta(seconds=grace_seconds)
    ):
        state = RunState.PREEMPTED if interrupted else RunState.STOPPED
        reason = "spot interruption" if interrupted else notice
        return Status(state, None, f"{reason} (killed after the grace)", started, now)
    states = {x.get("State", {}).get("Name") for x in instances.values()}
    if states == {"running"}:
        return Status(RunState.RUNNING, None, "", started)
    return Status(RunState.PROVISIONING, None, "", None)


def attempt_started(instance: Mapping[str, Any]) -> datetime:
    """When an instance began its current attempt: ``budgeteer:taken`` (a warm instance
    given the attempt), else its launch."""
    tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags", [])}
    taken = parse_time(tags.get("budgeteer:taken"))
    return taken if taken is not None else as_utc(instance["LaunchTime"])


class InterruptionQueue:
    """The SQS queue EventBridge delivers AWS's interruption warnings to (``url``; ``None``:
    none configured): :meth:`read` drains it at most once a second; the instances warned of
    gather in :attr:`warned`."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self.warned: set[str] = set()
        self._read = datetime.min.replace(tzinfo=UTC)

    def read(self, call: Callable[..., Any], ours: set[str], now: datetime) -> None:
        """Read the queue with the backend's ``call``: warnings for ``ours`` are remembered
        and deleted; malformed messages are deleted with a warning; others' are left for
        their owner."""
        url = self.url
        if url is None or (now - self._read).total_seconds() < QUEUE_POLL_SECONDS:
            return
        self._read = now
        for _ in range(10):  # at most 100 messages a read
            reply = call(
                "sqs", "receive_message", QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            )
            messages = reply.get("Messages", [])
            if not messages:
                return
            for message in messages:
                instance = warned_instance(message.get("Body", ""))
                if instance is None:
                    log.warning("dropping a malformed interruption message: %.200s", message)
                elif instance not in ours:
                    continue
                else:
                    self.warned.add(instance)
                call("sqs", "delete_message", QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def on_demand_sibling(offerings: Iterable[Offering], offering: Offering) -> Offering | None:
    """The on-demand offering of ``offering``'s provider, region and instance type (whose
    price caps a spot bid), if the catalog has one."""
    key = (offering.provider, offering.region, offering.instance_type)
    return next(
        (
            o
            for o in offerings
            if o.market is Market.ON_DEMAND and (o.provider, o.region, o.instance_type) == key
        ),
        None,
    )


@dataclass
class Ec2Attempt:
    """An attempt the EC2 backend follows: its handle and key (the S3 prefix), a stop asked
    for (why, when), whether the market interrupted it, its final status once ended (and
    ``ending`` while one caller ends it), its job's dataset and team (whether its pool
    keeps its instances)."""

    handle: Handle
    key: str
    stop_reason: str | None = None
    stop_at: datetime | None = None
    interrupted: bool = False
    final: Status | None = None
    ending: bool = False
    data_uri: str | None = None
    team: str | None = None

    @classmethod
    def of(cls, handle: Handle, key: str, request: LaunchRequest) -> Ec2Attempt:
        """The record of ``request``'s attempt (launched, taken warm or found again)."""
        return cls(handle, key, data_uri=request.data_uri, team=request.team)
