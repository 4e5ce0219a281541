"""Why a job cannot be placed, in words and numbers (for holds and ``explain``)."""

from __future__ import annotations

import math
from datetime import datetime

from budgeteer.core.placements import Configs
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.job import Job


def no_offering_message(job: Job) -> str:
    r = job.resources
    families = ", ".join(r.accelerators) or "any accelerator"
    spot = "" if job.spot.allowed else " (spot not allowed)"
    if job.spot.allowed and job.spot.avoid:
        spot = f" (not on {len(job.spot.avoid)} spot offering(s) in a drought)"
    return (
        f"no offering matches: {families}, ≥{r.min_gpu_memory_gib:g} GiB per GPU, "
        f"{r.gpus_per_worker} GPU(s) per worker, {r.min_workers}-{r.max_workers} workers{spot}"
    )


def infeasible_message(
    snapshot: Snapshot,
    job: Job,
    deadline: datetime | None,
    configs: Configs,
    fastest_h: float,
    best: int,
    cheapest_usd: float,
) -> tuple[str, tuple[tuple[str, str], ...]]:
    horizon = (deadline - snapshot.now).total_seconds() / 3600.0 if deadline else math.inf
    if not math.isfinite(fastest_h):
        return "every matching spot plan is too unreliable and no other market fits", ()
    if fastest_h > horizon:
        o = snapshot.offerings[int(configs.offering[best])]
        what = (
            f"{int(configs.instances[best])}×{o.instance_type} "
            f"({o.accelerators_per_instance}×{o.accelerator}) {o.market.value} {o.venue}"
        )
        return (
            f"fastest option {what} finishes in {fastest_h:.1f} h; deadline in {horizon:.1f} h",
            (
                ("fastest_finish_hours", f"{fastest_h:.3f}"),
                ("deadline_hours", f"{horizon:.3f}"),
                ("fastest_option", what),
            ),
        )
    cap = job.budget_usd if job.budget_usd is not None else math.inf
    return (
        f"cheapest plan that meets the deadline costs ${cheapest_usd:,.2f}; "
        f"the job's budget_usd is ${cap:,.2f}",
        (("cheapest_on_time_usd", f"{cheapest_usd:.2f}"), ("budget_usd", f"{cap:.2f}")),
    )
