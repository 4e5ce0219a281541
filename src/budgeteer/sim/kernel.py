"""A small deterministic discrete-event kernel and the ``SimClock`` that reads it.

Events are ordered by ``(time, priority, seq)``: earlier first; at the same time, lower
``priority`` first (so a market change can be ordered before the scheduler cycle that should see
it); at the same time and priority, in the order they were scheduled (``seq``, a counter) — never
by anything that could differ between two runs. Every event that runs is appended to ``log``, so
two runs with the same seed can be compared event by event.

``SimClock`` implements the :class:`~budgeteer.clock.Clock` port on the kernel: ``now()`` is the
kernel's time and ``sleep(s)`` runs the events due in the next ``s`` seconds and moves time to
their end — the same code that sleeps on the wall clock in the service advances simulated time
here, with no wall-clock sleep anywhere.

Example::

    k = Kernel(start)
    k.schedule(start + timedelta(hours=1), lambda: print("an hour in"), label="tick")
    k.run(until=start + timedelta(days=1))
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

Action = Callable[[], None]

#: the scheduler's cycles run after the market and backend events of the same instant (so a
#: cycle sees everything that happened at its time); what must follow a cycle runs after that
CYCLE_PRIORITY = 10
AFTER_CYCLE = CYCLE_PRIORITY + 2


@dataclass(frozen=True, order=True, slots=True)
class Event:
    """One scheduled event; ordered by ``(at, priority, seq)`` only."""

    at: datetime
    priority: int
    seq: int
    label: str = field(compare=False)
    action: Action = field(compare=False, repr=False)


class PastEvent(ValueError):
    """An event was scheduled before the kernel's current time."""


class Kernel:
    """The event queue and simulated time (see the module docstring)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be an aware datetime")
        self.now = start
        self.log: list[tuple[datetime, int, int, str]] = []
        # (at, priority, seq, event): tuples compare in C, and seq is unique, so the event
        # itself is never compared
        self._queue: list[tuple[datetime, int, int, Event]] = []
        self._seq = 0
        self._cancelled: set[int] = set()

    def schedule(
        self, at: datetime, action: Action, *, priority: int = 0, label: str = ""
    ) -> Event:
        """Run ``action`` at ``at`` (not before now; :class:`PastEvent` otherwise)."""
        if at < self.now:
            raise PastEvent(
                f"{label or 'event'} at {at.isoformat()} is before {self.now.isoformat()}"
            )
        event = Event(at, priority, self._seq, label, action)
        self._seq += 1
        heapq.heappush(self._queue, (at, priority, event.seq, event))
        return event

    def after(self, seconds: float, action: Action, *, priority: int = 0, label: str = "") -> Event:
        """Run ``action`` ``seconds`` from now."""
        return self.schedule(
            self.now + timedelta(seconds=max(0.0, seconds)), action, priority=priority, label=label
        )

    def cancel(self, event: Event) -> None:
        """Drop a scheduled event (it will not run nor be logged)."""
        self._cancelled.add(event.seq)

    def peek(self) -> datetime | None:
        """When the next event is due, or ``None`` when none is left."""
        self._drop_cancelled()
        return self._queue[0][0] if self._queue else None

    def step(self) -> Event | None:
        """Run the next event (time moves to it); ``None`` when none is left."""
        self._drop_cancelled()
        if not self._queue:
            return None
        event = heapq.heappop(self._queue)[3]
        self.now = event.at
        self.log.append((event.at, event.priority, event.seq, event.label))
        event.action()
        return event

    def run(self, until: datetime | None = None) -> int:
        """Run events due up to ``until`` (all of them when ``None``), then move time to
        ``until``; returns how many ran. Events scheduled while running take part."""
        ran = 0
        while True:
            due = self.peek()
            if due is None or (until is not None and due > until):
                break
            self.step()
            ran += 1
        if until is not None and until > self.now:
            self.now = until
        return ran

    def _drop_cancelled(self) -> None:
        while self._queue and self._queue[0][2] in self._cancelled:
            self._cancelled.discard(heapq.heappop(self._queue)[2])


class SimClock:
    """The :class:`~budgeteer.clock.Clock` port on a :class:`Kernel`."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def now(self) -> datetime:
        """The kernel's time."""
        return self.kernel.now

    def sleep(self, seconds: float) -> None:
        """Run the events of the next ``seconds`` of simulated time (no wall-clock wait)."""
        self.kernel.run(until=self.kernel.now + timedelta(seconds=max(0.0, seconds)))
