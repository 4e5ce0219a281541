"""A signal's decision carried out on the store: find the model's open retrain, submit a new
one, or replace a waiting one by a stronger one (I/O at the edge; the decision is
:func:`budgeteer.triggers.policy.decide`)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from budgeteer.errors import SpecError
from budgeteer.intake import submit_specs
from budgeteer.spec.files import read_document
from budgeteer.spec.job import JobSpec
from budgeteer.store.base import Store
from budgeteer.store.records import SignalRecord
from budgeteer.triggers.drift import FeatureDrift
from budgeteer.triggers.policy import Decision, OpenRetrain, TriggerPolicy, Variant


@dataclass(frozen=True, slots=True)
class ModelJob:
    """The model's job spec (as read) and its two variants' work, hours."""

    spec: dict[str, Any]
    full_hours: float | None
    incremental_hours: float | None

    @property
    def name(self) -> str:
        """The job name every retrain of the model carries."""
        return str(self.spec["name"])


def model_job(
    policy: TriggerPolicy, policy_dir: Path, model: str, field: str = "--model"
) -> ModelJob:
    """The spec the policy names for ``model`` (validated); ``field`` names where the model
    came from in an error."""
    entry = policy.models.get(model)
    if entry is None:
        known = ", ".join(sorted(policy.models))
        raise SpecError(field, f"unknown model {model!r}; the policy knows: {known}")
    path = entry.job if entry.job.is_absolute() else policy_dir / entry.job
    if not path.is_file():
        raise SpecError(f"models.{model}.job", f"no such file: {path}")
    doc = read_document(path)
    JobSpec.parse(doc, str(path))  # valid as it is
    strategy = doc.get("strategy") or {}
    work = doc.get("work") or {}
    return ModelJob(
        dict(doc),
        strategy.get("full_reference_hours", work.get("reference_hours")),
        strategy.get("incremental_reference_hours"),
    )


def open_retrain(store: Store, job: ModelJob) -> OpenRetrain | None:
    """The model's retrain not finished yet (the newest, if several)."""
    live = [j for j in store.jobs() if j.name == job.name and not j.state.is_terminal]
    if not live:
        return None
    j = max(live, key=lambda x: x.seq)
    hours = j.work.reference_hours
    variant: Variant = (
        "incremental"
        if job.incremental_hours is not None and hours == job.incremental_hours
        else "full"
    )
    return OpenRetrain(j.id, j.tier.name, j.deadline, variant, j.state.is_active)


def carry_out(
    store: Store,
    job: ModelJob,
    decision: Decision,
    now: datetime,
    known_accelerators: list[str],
) -> str | None:
    """Submit what ``decision`` asks (cancelling the retrain it replaces); the new job's id."""
    if decision.action == "none":
        return None
    spec = dict(job.spec)
    spec.pop("strategy", None)
    spec.pop("sla", None)
    spec["priority"] = decision.priority
    spec["deadline"] = decision.deadline.isoformat() if decision.deadline else None
    hours = job.incremental_hours if decision.variant == "incremental" else job.full_hours
    if hours is None:
        raise SpecError(
            "levels.variant",
            f"the {decision.variant} variant needs the job spec's strategy "
            "(full_reference_hours and incremental_reference_hours)",
        )
    spec["work"] = {"reference_hours": hours}
    if decision.replaces is not None:
        store.request_cancel(decision.replaces, at=now)
    parsed = JobSpec.parse(spec, "trigger")
    stamp = f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"  # each retrain its own id
    result = submit_specs(
        store,
        [parsed],
        now=now,
        known_accelerators=known_accelerators,
        require_command=True,
        ids=lambda j: f"{j.name[:48]}-{stamp}",
    )
    return result.job_ids[0]


def record(
    store: Store,
    model: str,
    job: ModelJob,
    kind: str,
    severity: str,
    decision: Decision,
    job_id: str | None,
    drift: Sequence[FeatureDrift],
    now: datetime,
) -> int:
    """Keep the signal and what it caused (the link from a signal to its job)."""
    return store.add_signal(
        SignalRecord(
            model,
            str(job.spec["team"]),
            kind,
            severity,
            decision.action,
            job_id,
            now,
            decision.reason,
            tuple((d.feature, d.psi, d.ks, d.js) for d in drift),
        )
    )
