"""The ``Clock`` port: the only place budgeteer reads the time or sleeps.

``SystemClock`` is the real one (optionally time-scaled, so a day of simulated market passes in
a minute); ``ManualClock`` is moved by hand (tests, the simulator). Both return aware UTC times.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Now, and a way to wait. ``sleep`` takes *clock* seconds (scaled by the implementation)."""

    def now(self) -> datetime:
        """The current time (aware, UTC)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of clock time."""
        ...


class SystemClock:
    """Wall-clock time, optionally scaled: with ``scale=1440`` a day passes in a minute.

    Scaled time runs from ``anchor`` (a wall-clock instant; default: now):
    ``now = anchor + (wall now − anchor) × scale``. Processes that share an anchor (the service
    keeps it in its work folder) share one scaled timeline, across restarts.
    """

    def __init__(self, scale: float = 1.0, anchor: datetime | None = None) -> None:
        if scale <= 0:
            raise ValueError("scale must be positive")
        self.scale = scale
        self.anchor = anchor or datetime.now(UTC)

    def now(self) -> datetime:
        """The (scaled) time."""
        wall = datetime.now(UTC)
        if self.scale == 1.0:
            return wall
        return self.anchor + (wall - self.anchor) * self.scale

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds / scale`` of real time."""
        time.sleep(max(0.0, seconds) / self.scale)


class ManualClock:
    """A clock that moves only when told (``advance``); ``sleep`` advances it."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The current manual time."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        with self._lock:
            self._now += timedelta(seconds=seconds)

    def sleep(self, seconds: float) -> None:
        """Advance instead of waiting."""
        self.advance(max(0.0, seconds))


@dataclass(frozen=True, slots=True)
class SimulatedTime:
    """What people need to read times of an accelerated clock: how fast it runs, what it reads
    and what the wall clock reads at the same moment."""

    scale: float
    clock_now: datetime
    wall_now: datetime

    def sentence(self) -> str:
        """One line for messages and pages."""
        return (
            f"times are the service's simulated clock ({self.scale:g}× real time): it reads "
            f"{self.clock_now:%Y-%m-%d %H:%M:%S} UTC while the wall clock reads "
            f"{self.wall_now:%Y-%m-%d %H:%M:%S} UTC"
        )

    def as_json(self) -> dict[str, object]:
        """For API answers (``clock``)."""
        return {
            "simulated": True,
            "scale": self.scale,
            "clock_now": self.clock_now.isoformat(),
            "wall_now": self.wall_now.isoformat(),
        }


def simulated_time(clock: Clock, wall: Clock | None = None) -> SimulatedTime | None:
    """The labels for ``clock`` when it is accelerated (a time-scaled sandbox), else ``None``
    (its times are wall-clock times and need no label)."""
    scale = float(getattr(clock, "scale", 1.0))
    if scale == 1.0:
        return None
    return SimulatedTime(scale, clock.now(), (wall or SystemClock()).now())
