"""Moving a job's data to its placement (pure): what it costs (egress, by the data's location
and the placement's venue) and how long it takes (its size at the policy's download rate,
``Policy.data_download_gb_per_hour``: a start-up the placement bills and its finish waits for).

A warm pooled instance that holds the job's dataset (its ``data.uri``, in a pool the job's team
may use, on no more instances than hold it) needs neither: the data is already on its disk
(:func:`~budgeteer.core.pools.warm_data`). So reuse is priced as it is — no egress and a shorter
start-up there — and wins when that is the cheaper plan, and only then.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from budgeteer.core.placements import Configs
from budgeteer.core.policy import Policy
from budgeteer.core.pools import warm_data
from budgeteer.core.runtime import FloatArray
from budgeteer.core.snapshot import Snapshot
from budgeteer.domain.job import Job


def data_moves(
    snapshot: Snapshot, jobs: Sequence[Job], configs: Configs, policy: Policy
) -> tuple[FloatArray, FloatArray]:
    """Per job (rows) and placement (columns): the egress in dollars and the download in
    hours (each a column of zeros when no job has data to move)."""
    sizes = np.array([[j.data.size_gb if j.data else 0.0] for j in jobs])
    if not sizes.any():
        zeros = np.zeros((len(jobs), 1))
        return zeros, zeros
    rate = policy.data_download_gb_per_hour
    download = np.broadcast_to(sizes / rate if rate > 0 else sizes * 0.0, (len(jobs), len(configs)))
    egress = _egress(snapshot, jobs, configs)
    held = _held(snapshot, jobs, configs)
    if held is not None:  # already there: nothing to move, nothing to wait for
        egress = np.where(held, 0.0, egress)
        download = np.where(held, 0.0, download)
    return egress, np.array(download)


def _egress(snapshot: Snapshot, jobs: Sequence[Job], configs: Configs) -> FloatArray:
    """Egress cost of each job's data to each placement's venue."""
    venue_codes = np.unique(configs.venue)
    per_venue = np.zeros((len(jobs), len(configs.table.venues)))
    by_location: dict[str, list[int]] = defaultdict(list)
    size_of: dict[str, list[float]] = defaultdict(list)
    for row, job in enumerate(jobs):
        if job.data and job.data.size_gb > 0:
            by_location[job.data.location].append(row)
            size_of[job.data.location].append(job.data.size_gb)
    for location, rows in by_location.items():
        sizes = np.array(size_of[location])
        for code in venue_codes.tolist():
            venue = configs.table.venues[code]
            per_venue[rows, code] = snapshot.egress.cost_usd_many(location, venue, sizes)
    result: FloatArray = per_venue[:, configs.venue]
    return result


def _held(snapshot: Snapshot, jobs: Sequence[Job], configs: Configs) -> np.ndarray | None:
    """Where a warm instance (in a pool the job's team may use) holds the job's dataset, on as
    many instances as the placement takes (``None``: nowhere)."""
    if not any(v.data for v in snapshot.pools):
        return None
    ids = configs.table.index
    held_by = {t: warm_data(snapshot.pools, t) for t in {j.team for j in jobs}}
    out = np.zeros((len(jobs), len(configs)), dtype=bool)
    for row, job in enumerate(jobs):
        uri = job.data.uri if job.data else None
        for oid, count in held_by[job.team].get(uri, ()) if uri else ():
            if oid in ids:
                out[row] |= (configs.offering == ids[oid]) & (configs.instances <= count)
    return out
