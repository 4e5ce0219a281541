"""Throughput learned from the jobs, kept: each ended attempt of a job whose work is given in
reference hours teaches its family (the job's ``name``) how fast it runs on that accelerator
(:mod:`budgeteer.core.speed`); the store keeps it (a restart does not forget), and the planner
reads the factors that differ from the catalog (``Snapshot.speeds``).

The attempt's speed is its average over what it was seen to do — steps between its first and
last progress seen, over the time between them (a smoothed recent rate is too noisy to learn
from); only attempts with at least :data:`MIN_STEPS` steps of progress between them teach.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from budgeteer.core import Policy
from budgeteer.core.progress import Sample
from budgeteer.core.speed import (
    Speed,
    measured_factor,
    modelled_fraction_per_hour,
    snapshot_speeds,
)
from budgeteer.domain.job import Job
from budgeteer.domain.offering import Offering
from budgeteer.store.base import Attempt, Store

log = logging.getLogger(__name__)

#: Progress an attempt must have shown (in its own steps) to teach a speed.
MIN_STEPS = 20


class SpeedBook:
    """The learned speeds (loop thread; the snapshot's tuple is rebuilt only when they move)."""

    def __init__(self, store: Store, throughput: Mapping[str, float], policy: Policy) -> None:
        self.store = store
        self.throughput = dict(throughput)
        self.policy = policy
        self._speeds = {(s.family, s.accelerator): s for s in store.speeds()}
        self.snapshot: tuple[tuple[str, str, float], ...] = snapshot_speeds(
            list(self._speeds.values())
        )

    def get(self, family: str, accelerator: str) -> Speed:
        """What is known of ``family`` on ``accelerator`` (the prior when nothing is)."""
        return self._speeds.get((family, accelerator), Speed(family, accelerator))

    def learn(
        self, job: Job, attempt: Attempt, offering: Offering, first: Sample, last: Sample
    ) -> Speed | None:
        """Fold the ended ``attempt``'s measured speed in; the new speed, or ``None`` when the
        attempt cannot teach (no rate, too little progress, work not in reference hours)."""
        ref = job.work.reference_hours
        rel = self.throughput.get(offering.accelerator)
        if (
            ref is None
            or job.work.steps_per_hour_on
            or job.incremental_reference_hours is not None  # which variant ran is not recorded
            or rel is None
            or last.step - first.step < MIN_STEPS
            or last.at <= first.at
        ):
            return None
        steps_per_second = (last.step - first.step) / (last.at - first.at).total_seconds()
        modelled = modelled_fraction_per_hour(
            ref,
            rel,
            attempt.workers,
            job.resources.gpus_per_worker,
            attempt.instances,
            self.policy,
        )
        measured = measured_factor(steps_per_second, last.total, modelled)
        if measured is None:
            return None
        speed = self.get(job.name, offering.accelerator).observe(measured)
        self.store.put_speed(speed)
        self._speeds[(speed.family, speed.accelerator)] = speed
        self.snapshot = snapshot_speeds(list(self._speeds.values()))
        log.info(
            "%s on %s ran at %.2f× the catalog's speed; %s's factor there is now %.2f (%d runs)",
            job.id,
            offering.accelerator,
            measured,
            job.name,
            speed.factor,
            speed.runs,
            extra={"job_id": job.id},
        )
        return speed
