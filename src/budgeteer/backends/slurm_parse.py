"""Reading what Slurm says (pure): a node's ``sinfo`` state, a job's raw wait status, its
times in epoch seconds, and the attempt records the Slurm backend keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from budgeteer.backends.base import RunState, Status


def idle_state(state: str) -> bool:
    """Whether a node's ``sinfo`` state (``%t``, its flags after) is idle."""
    return state.rstrip("*~#!%$@^-") == "idle"


def exit_code(raw: object) -> int | None:
    """The exit status from Slurm's raw wait status: ``N`` for ``exit N``, ``-S`` when killed
    by signal ``S``."""
    if not isinstance(raw, int):
        return None
    signal = raw & 0x7F
    return -signal if signal else raw >> 8


def epoch_time(epoch: object) -> datetime | None:
    if not isinstance(epoch, int) or epoch <= 0:
        return None
    return datetime.fromtimestamp(epoch, UTC)


def end_time(epoch: object, seen: datetime) -> datetime:
    """When a job ended, for billing: Slurm keeps whole seconds (the true end lies within the
    second after its ``end_time``), so its end rounded up — but never past the moment the end
    was seen. (Truncated, a job ending within the second it was launched in ended "before" its
    launch and was billed nothing.)"""
    end = epoch_time(epoch)
    if end is None:
        return seen
    return min(end + timedelta(seconds=1), seen)


def status_from(d: dict[str, Any]) -> Status:
    return Status(
        RunState(d["state"]),
        d.get("exit_code"),
        str(d.get("reason", "")),
        datetime.fromisoformat(d["started_at"]) if d.get("started_at") else None,
        datetime.fromisoformat(d["ended_at"]) if d.get("ended_at") else None,
    )
