"""The scheduler shell around the pure core: the cycle as numbered steps
(:mod:`~budgeteer.scheduler.cycle`), each responsibility in its own module — reconcile,
launcher, parking, snapshots, progress, live attempts — and the driver loop that ``run`` and
``serve`` share. See ``docs/architecture.md``."""

from budgeteer.scheduler.cycle import Scheduler
from budgeteer.scheduler.driver import Driver
from budgeteer.scheduler.launcher import backoff_seconds
from budgeteer.scheduler.reconcile import SHUTDOWN_REASON, CycleReport

__all__ = ["SHUTDOWN_REASON", "CycleReport", "Driver", "Scheduler", "backoff_seconds"]
