"""The simulator (issue 6, in progress): a deterministic event kernel and a simulated clock that
drive the service's own loop. See :mod:`budgeteer.sim.kernel`."""

from budgeteer.sim.kernel import Event, Kernel, SimClock

__all__ = ["Event", "Kernel", "SimClock"]
