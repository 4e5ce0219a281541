"""The ``Clock`` port: the only place budgeteer reads the time or sleeps.

``SystemClock`` is the real one (optionally time-scaled, so a day of simulated market passes in
a minute); ``ManualClock`` is moved by hand (tests, the simulator). Both return aware UTC times.
"""

from __future__ import annotations

import threading
import time
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
