"""The EC2 backend's pure half: its settings, the attempt's key, the user data an instance boots
with, AWS's error codes and the interruption warning's shape (see :mod:`budgeteer.backends.ec2`)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np

from budgeteer.backends.base import Handle, LaunchFailed, LaunchRequest
from budgeteer.core.spot.bids import bid_for
from budgeteer.domain.offering import Offering
from budgeteer.domain.tier import Tier
from budgeteer.errors import BudgeteerError

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


def attempt_key(request: LaunchRequest | Handle, namespace: str) -> str:
    """``bgt-<deployment>-<job>-<attempt>``: tags, client token and S3 paths."""
    return f"bgt-{namespace}-{request.job_id}-{request.attempt}"


def render_user_data(
    settings: Ec2Settings, request: LaunchRequest, namespace: str, env: Mapping[str, str]
) -> str:
    """The instance's bootstrap: a bash script exporting ``env`` (the job's variables) and
    running the agent with the command. Raises :class:`LaunchFailed` beyond 16 KB."""
    key = attempt_key(request, namespace)
    root = f"{settings.prefix.strip('/')}/{namespace}"
    agent = [
        settings.python,
        "-m",
        "budgeteer.backends.ec2_agent",
        "--bucket",
        settings.bucket,
        "--attempt-prefix",
        f"{root}/attempts/{key}",
        "--checkpoint-prefix",
        f"{root}/checkpoints/{request.job_id}",
        "--workdir",
        settings.instance_workdir,
        "--nodes",
        str(request.instances),
        "--grace",
        f"{settings.grace_seconds:g}",
        "--poll",
        f"{settings.poll_seconds:g}",
        "--sync",
        f"{settings.sync_seconds:g}",
    ]
    if settings.shutdown:
        agent.append("--shutdown")
    lines = [
        "#!/bin/bash",
        f"# budgeteer: job {request.job_id}, attempt {request.attempt} ({key})",
        "set -eu",
        *(f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())),
        f"export AWS_DEFAULT_REGION={shlex.quote(settings.region)}",
        "exec " + shlex.join([*agent, "--", *request.command]),
    ]
    script = "\n".join(lines) + "\n"
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
