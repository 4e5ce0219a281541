"""The driver: lead → cycle → retry → wait, the one loop that ``budgeteer run`` and
``budgeteer serve`` share.

It waits for leadership (a second replica on the same PostgreSQL waits), then runs cycles on
the interval and sooner on events (:meth:`~budgeteer.scheduler.cycle.Scheduler.wait_for_event`),
at least ``min_gap_seconds`` of real time apart — and at least twice as long as the last cycle
took, so that under a burst of submissions the loop keeps to about a third of the process's CPU
and the API the rest (a burst is planned in a few large cycles, not many small ones).
A cycle that raises is logged and tried again a second later — a transient store error (a
database restart) costs retries, not the process. On stop (``stopping`` set, Ctrl-C, the
cycle budget spent, or idle with ``until_idle``) every live attempt gets the notice and
checkpoints, its end is recorded and its job resumes on the next start; then leadership is
released.

``last_success`` (monotonic seconds) is when the last cycle succeeded: ``/readyz`` reads it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from budgeteer.errors import BudgeteerError
from budgeteer.scheduler.cycle import Scheduler
from budgeteer.scheduler.reconcile import CycleReport
from budgeteer.store.leader import LeaderLock

log = logging.getLogger("budgeteer.scheduler")
#: Real seconds to wait before trying again after a failed cycle, or for leadership.
#: Rest after a cycle, in multiples of its duration (see the module docstring).
CYCLE_SHARE_FACTOR = 2.0
RETRY_SECONDS = 1.0
#: ``ready`` allows at least this many real seconds since the last successful cycle.
STALE_FLOOR_SECONDS = 15.0


class Driver:
    """Runs a scheduler's cycles as the leader (see the module docstring)."""

    def __init__(
        self,
        sched: Scheduler,
        lock: LeaderLock,
        interval_seconds: float,
        *,
        min_gap_seconds: float = 0.5,
        on_report: Callable[[CycleReport, float], None] | None = None,
        stopping: threading.Event | None = None,
        say: Callable[[str], None] = log.info,
    ) -> None:
        self.sched = sched
        self.lock = lock
        self.interval = interval_seconds  # clock seconds
        self.min_gap = min_gap_seconds
        self.last_cycle_seconds = 0.0  # how long the last successful cycle took (real)
        self.on_report = on_report  # each successful cycle's report and its real duration
        self.stopping = stopping or threading.Event()
        self.leading = False
        self.last_success: float | None = None
        self.last_error: str | None = None
        self.say = say  # "leading", "another scheduler is the leader; waiting"
        self._said_waiting = False

    def run(self, cycles: int | None = None, *, until_idle: bool = False) -> None:
        """Cycle until stopped (or ``cycles`` cycles, or every job ended with
        ``until_idle``); then shut down gracefully and release leadership."""
        done = 0
        try:
            while not self.stopping.is_set() and (cycles is None or done < cycles):
                if not self.step():
                    continue
                done += 1
                if self._between_cycles(until_idle):
                    break
        except KeyboardInterrupt:
            log.info("interrupted: stopping")
        finally:
            self.close()

    def ready(self, now: float | None = None) -> tuple[bool, str]:
        """Whether the loop keeps up: not leading (another replica runs the cycles), or the
        last cycle succeeded within ``max(5 intervals, 15 s)`` of real time; and why."""
        if not self.leading:
            return True, "standing by: another replica leads"
        if self.last_success is None:
            return False, "no cycle has succeeded yet" + (
                f" (last error: {self.last_error})" if self.last_error else ""
            )
        age = (time.monotonic() if now is None else now) - self.last_success
        limit = max(5 * self.real_interval_seconds(), STALE_FLOOR_SECONDS)
        if age > limit:
            error = f"; last error: {self.last_error}" if self.last_error else ""
            return (
                False,
                f"the last successful cycle was {age:.0f} s ago (limit {limit:.0f} s){error}",
            )
        return True, f"last cycle {age:.1f} s ago"

    def real_interval_seconds(self) -> float:
        """The interval in real seconds (a scaled clock runs faster)."""
        return self.interval / float(getattr(self.sched.clock, "scale", 1.0))

    def step(self) -> bool:
        """Lead if this replica can, then run one cycle: True when a cycle succeeded (a failed
        one is logged, and waited a second after)."""
        return self._lead() and self._cycle()

    def _lead(self) -> bool:
        """Take or keep leadership (checked before every cycle: a lock can be lost, e.g. with
        the database session that held it)."""
        was = self.leading
        self.leading = self.lock.try_acquire()
        if was and not self.leading:
            log.warning("lost leadership: another replica may run the scheduler now")
            self.sched.forget_live()
        if self.leading and not was:
            self.say("leading")
        elif not self.leading:
            if not self._said_waiting:
                self.say("another scheduler is the leader; waiting")
                self._said_waiting = True
            self.stopping.wait(RETRY_SECONDS)
        return self.leading

    def _cycle(self) -> bool:
        started = time.perf_counter()
        try:
            report = self.sched.cycle()
        except BudgeteerError as exc:
            kind = "transient" if exc.transient else "final"
            self.last_error = f"{kind}: {exc}"
            log.warning("cycle failed (%s): %s", kind, exc)
            self.stopping.wait(RETRY_SECONDS)
            return False
        except Exception as exc:  # the top of the loop: log, keep serving, try again
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("cycle crashed")
            self.stopping.wait(RETRY_SECONDS)
            return False
        self.last_success = time.monotonic()
        self.last_cycle_seconds = time.perf_counter() - started
        self.last_error = None
        if self.on_report is not None:
            self.on_report(report, time.perf_counter() - started)
        return True

    def _between_cycles(self, until_idle: bool) -> bool:
        """Wait for the next cycle; True when idle with ``until_idle`` (time to stop). A
        store that fails here is waited out like a failed cycle."""
        try:
            if until_idle:
                jobs = self.sched.store.jobs()
                if jobs and all(j.state.is_terminal for j in jobs):
                    return True
            self._wait()
        except BudgeteerError as exc:
            self.last_error = str(exc)
            log.warning("waiting for the next cycle failed: %s", exc)
            self.stopping.wait(RETRY_SECONDS)
        return False

    def _wait(self) -> None:
        """Until the interval passes, an event happens, or we are asked to stop — but at least
        ``min_gap_seconds`` of real time after a cycle."""
        self.stopping.wait(self.gap_seconds())
        waited = 0.0
        slice_seconds = min(self.interval, 1.0 * float(getattr(self.sched.clock, "scale", 1.0)))
        while waited < self.interval and not self.stopping.is_set():
            if self.sched.wait_for_event(slice_seconds):
                return
            waited += slice_seconds

    def gap_seconds(self) -> float:
        """Real seconds to rest after a cycle: ``min_gap_seconds``, or
        ``CYCLE_SHARE_FACTOR`` × the last cycle's duration when that is longer, never more
        than the interval."""
        busy = CYCLE_SHARE_FACTOR * self.last_cycle_seconds
        return min(max(self.min_gap, busy), max(self.min_gap, self.real_interval_seconds()))

    def close(self) -> None:
        """Shut down gracefully (running attempts checkpoint and resume on the next start)
        and release leadership, if this replica leads."""
        if not self.leading:
            return
        try:
            grace = float(getattr(self.sched.backend, "grace_seconds", 30.0))
            left = self.sched.shutdown(grace + 30.0)
            if left:
                log.warning("%d attempts still running at exit; adopted on the next start", left)
        finally:
            self.lock.release()
            self.leading = False


def log_report(report: CycleReport, seconds: float) -> None:
    """Log what a cycle did, one line per launch, end, quarantine and backend error."""
    for job_id in report.adopted:
        log.info("re-attached %s", job_id, extra={"job_id": job_id})
    for job_id in report.launched:
        log.info("launched %s", job_id, extra={"job_id": job_id})
    for job_id, state in report.finished:
        log.info("attempt of %s ended: %s", job_id, state.value, extra={"job_id": job_id})
    for job_id in report.quarantined:
        log.warning("quarantined %s: its planning raised", job_id, extra={"job_id": job_id})
    for job_id, error in report.errors:
        log.warning("backend error for %s: %s", job_id, error, extra={"job_id": job_id})
