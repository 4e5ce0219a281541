"""The imperative shell: the scheduler loop that plans from the store and acts through a
backend."""

from budgeteer.service.loop import CycleReport, Scheduler

__all__ = ["CycleReport", "Scheduler"]
