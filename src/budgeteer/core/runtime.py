"""The runtime and cost model, vectorised over (jobs × placements).

Work is in reference hours (one A100-40GB GPU for one hour = 1). A placement of ``w`` workers
of ``k`` GPUs each, packed onto ``n`` instances, runs at ``rel × w × k × eff`` reference hours
per hour, where ``eff`` loses a fixed share per doubling of GPUs inside an instance and per
doubling of instances. On spot, a job on ``n`` instances is interrupted at ``n × λ`` per hour;
each interruption costs on average half a checkpoint interval of lost work plus the restart
overhead, so runtime inflates by ``n λ (c/2 + r)`` per hour of work (DESIGN.md), and its spread
is that of a compound Poisson sum: ``sqrt(n λ T E[X²])`` with ``X = U(0, c) + r``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from budgeteer.core.policy import Policy

FloatArray = NDArray[np.float64]


def scaling_efficiency(
    gpus_per_instance: FloatArray, instances: FloatArray, policy: Policy
) -> FloatArray:
    """Share of linear speed-up kept when spreading over GPUs and instances."""
    intra: FloatArray = policy.intra_node_efficiency_per_doubling ** np.log2(gpus_per_instance)
    inter: FloatArray = policy.inter_node_efficiency_per_doubling ** np.log2(instances)
    return intra * inter


def preemption_moments(checkpoint_seconds: float, restart_seconds: float) -> tuple[float, float]:
    """Mean and second moment (hours, hours²) of the time one interruption costs."""
    c = checkpoint_seconds / 3600.0
    r = restart_seconds / 3600.0
    return c / 2.0 + r, c * c / 3.0 + c * r + r * r


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Model outputs, each shaped like the broadcast of the inputs (jobs × placements)."""

    runtime_hours: FloatArray
    runtime_std_hours: FloatArray
    cost_usd: FloatArray
    cost_std_usd: FloatArray
    finish_hours: FloatArray
    inflation: FloatArray


def evaluate(
    work_ref_hours: FloatArray,
    speed_ref_per_hour: FloatArray,
    usd_per_hour: FloatArray,
    startup_hours: FloatArray,
    interruptions_per_hour: FloatArray,
    loss_mean_hours: FloatArray,
    loss_second_moment: FloatArray,
    egress_usd: FloatArray,
    sigmas: float,
) -> Evaluation:
    """Expected runtime, cost and (conservative) finish time of jobs on placements.

    ``work_ref_hours``, ``loss_*`` and ``egress_usd`` are per job (column vectors or matrices);
    the rest per placement. ``usd_per_hour`` is the whole placement's price (all instances).
    Startup is billed and adds to the finish; the finish adds ``sigmas`` runtime deviations.
    """
    base = work_ref_hours / speed_ref_per_hour
    inflation = 1.0 + interruptions_per_hour * loss_mean_hours
    runtime = base * inflation
    runtime_std = np.sqrt(interruptions_per_hour * base * loss_second_moment)
    cost = usd_per_hour * (runtime + startup_hours) + egress_usd
    return Evaluation(
        runtime_hours=runtime,
        runtime_std_hours=runtime_std,
        cost_usd=cost,
        cost_std_usd=usd_per_hour * runtime_std,
        finish_hours=startup_hours + runtime + sigmas * runtime_std,
        inflation=inflation,
    )
