"""Throughput learned from the jobs themselves (pure).

The planner's runtime model is the catalog's: an accelerator's relative throughput (peak-TFLOPS
ratios, ``gpu_throughput.csv``) × GPUs × the scaling efficiency. Real jobs differ — a model
bound by memory bandwidth runs slower on an A10G than its TFLOPS say. So each job *family* (its
``name``: a nightly ``churn`` retrain submits under one name) learns a **speed factor** per
accelerator: measured progress per hour ÷ the model's, folded in as an average that starts at
the prior (1.0, the catalog, worth :data:`PRIOR_WEIGHT` runs) and becomes exponentially
weighted (at least :data:`MIN_ALPHA` for the newest) as runs accumulate. The planner divides a
job's work on that accelerator by its family's factor (``Snapshot.speeds``).

Example: ``churn`` planned at 2 h on an A10G takes 4 h: measured 0.5; the factor goes
1.0 → 0.75 → 0.67 → 0.63 → 0.6 … → 0.5, and the next ``churn`` is planned at 2.7 h, then 3 h …
on A10Gs — and may go elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from budgeteer.core.policy import Policy
from budgeteer.core.runtime import scaling_efficiency

#: How many runs the prior (the catalog's speed) is worth.
PRIOR_WEIGHT = 1.0
#: The newest run's weight once many are seen (an exponentially weighted average).
MIN_ALPHA = 0.2
#: A measurement outside this range is taken as a broken report, clamped.
FACTOR_RANGE = (0.05, 20.0)
#: Factors this close to 1 are the catalog's speed: not planned with (keeps plans, and the
#: planner's caches, as they are while the catalog is right).
SNAPSHOT_TOLERANCE = 0.03


@dataclass(frozen=True, slots=True)
class Speed:
    """A family's learned speed factor on one accelerator, and how many runs taught it."""

    family: str
    accelerator: str
    factor: float = 1.0
    runs: int = 0

    def observe(self, measured: float) -> Speed:
        """This speed with one more run's measured factor folded in."""
        lo, hi = FACTOR_RANGE
        measured = min(max(measured, lo), hi)
        alpha = max(MIN_ALPHA, 1.0 / (self.runs + 1 + PRIOR_WEIGHT))
        return Speed(
            self.family,
            self.accelerator,
            self.factor + alpha * (measured - self.factor),
            self.runs + 1,
        )


def modelled_fraction_per_hour(
    reference_hours: float,
    relative_throughput: float,
    workers: int,
    gpus_per_worker: int,
    instances: int,
    policy: Policy,
) -> float:
    """The share of a job's work the runtime model expects done per hour on this placement
    (the simulator runs jobs at exactly this speed)."""
    gpus = workers * gpus_per_worker
    per_instance = max(1.0, gpus / max(1, instances))
    eff = float(
        scaling_efficiency(np.array([per_instance]), np.array([float(instances)]), policy)[0]
    )
    return relative_throughput * gpus * eff / reference_hours


def measured_factor(
    steps_per_second: float, total_steps: int, modelled_per_hour: float
) -> float | None:
    """The run's speed ÷ the model's (``None`` when either is unknown or zero)."""
    if steps_per_second <= 0 or total_steps <= 0 or modelled_per_hour <= 0:
        return None
    return steps_per_second * 3600.0 / total_steps / modelled_per_hour


def snapshot_speeds(speeds: list[Speed]) -> tuple[tuple[str, str, float], ...]:
    """What the planner reads: (family, accelerator, factor) for factors that differ from the
    catalog's by more than :data:`SNAPSHOT_TOLERANCE`, rounded to 1%, sorted."""
    return tuple(
        sorted(
            (s.family, s.accelerator, round(s.factor, 2))
            for s in speeds
            if abs(s.factor - 1.0) > SNAPSHOT_TOLERANCE
        )
    )
