"""Compute backends: the ``ComputeBackend`` port and the embedded ``sandbox`` backend."""

from budgeteer.backends.base import (
    Capabilities,
    CapacityUnavailable,
    ComputeBackend,
    Handle,
    LaunchFailed,
    LaunchRequest,
    RunState,
    Status,
)
from budgeteer.backends.market import (
    CalendarMarket,
    Closed,
    RateMarket,
    SandboxMarket,
    TraceMarket,
    ZonedMarket,
)
from budgeteer.backends.sandbox import SandboxBackend

__all__ = [
    "CalendarMarket",
    "Capabilities",
    "CapacityUnavailable",
    "Closed",
    "ComputeBackend",
    "Handle",
    "LaunchFailed",
    "LaunchRequest",
    "RateMarket",
    "RunState",
    "SandboxBackend",
    "SandboxMarket",
    "Status",
    "TraceMarket",
    "ZonedMarket",
]
