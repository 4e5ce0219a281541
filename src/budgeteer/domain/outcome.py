"""How an attempt ended, as data: the store keeps it beside the human exit reason, and the
scheduler decides from it (a job preempted ``max_preemptions`` times loses spot; a stop for a
market switch or a scale-up relaunches) — never from the reason's text."""

from __future__ import annotations

from enum import StrEnum


class AttemptOutcome(StrEnum):
    """Why an attempt ended."""

    SUCCEEDED = "succeeded"  # the job's command exited 0
    FAILED = "failed"  # the job's own failure (counts against its retries)
    PREEMPTED = "preempted"  # the market took the capacity back (spot, an on-prem calendar)
    CAPACITY = "capacity"  # the backend had no room when asked (never ran)
    LAUNCH_FAILED = "launch_failed"  # the backend refused the launch for good
    BACKEND_ERROR = "backend_error"  # the backend raised unexpectedly for this attempt
    LOST = "lost"  # never launched before a restart
    EARLY_STOP = "early_stop"  # runtime control: the loss stalled
    TO_ON_DEMAND = "to_on_demand"  # runtime control: moved off spot for good (rule, late)
    BRIDGE_ON_DEMAND = "bridge_on_demand"  # the spot decider: on-demand until spot is back
    TO_SPOT = "to_spot"  # the spot decider: back to spot from on-demand
    SCALE_UP = "scale_up"  # runtime control: relaunched with more workers
    SHUTDOWN = "shutdown"  # the service stopped; resumes on the next start
    CANCELLED = "cancelled"  # stopped on request

    @property
    def relaunches(self) -> bool:
        """Whether the job goes back to the queue to resume from its checkpoint."""
        return self in _RELAUNCH


_RELAUNCH = frozenset(
    {
        AttemptOutcome.TO_ON_DEMAND,
        AttemptOutcome.BRIDGE_ON_DEMAND,
        AttemptOutcome.TO_SPOT,
        AttemptOutcome.SCALE_UP,
        AttemptOutcome.SHUTDOWN,
    }
)
