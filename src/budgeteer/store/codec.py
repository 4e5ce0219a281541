"""Jobs to and from JSON-ready dicts (how stores persist the validated spec)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from budgeteer.domain.job import (
    DataSource,
    DeadlineMiss,
    Dependency,
    DependencyCondition,
    Gate,
    Job,
    JobState,
    Resources,
    SpotSettings,
    SwitchRule,
    Webhook,
    Work,
)
from budgeteer.domain.tier import Tier


def job_to_dict(job: Job) -> dict[str, Any]:
    """Every field of ``job`` except its state (stores keep the state beside it)."""
    r = job.resources
    return {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "project": job.project,
        "tier": job.tier.name,
        "resources": {
            "accelerators": list(r.accelerators),
            "min_gpu_memory_gib": r.min_gpu_memory_gib,
            "gpus_per_worker": r.gpus_per_worker,
            "min_workers": r.min_workers,
            "max_workers": r.max_workers,
        },
        "work": {
            "reference_hours": job.work.reference_hours,
            "steps": job.work.steps,
            "steps_per_hour_on": [list(p) for p in job.work.steps_per_hour_on],
        },
        "submitted_at": job.submitted_at.isoformat(),
        "seq": job.seq,
        "deadline": job.deadline.isoformat() if job.deadline else None,
        "budget_usd": job.budget_usd,
        "depends_on": [{"job": d.job, "on": d.on.value} for d in job.depends_on],
        "spot": {
            "allowed": job.spot.allowed,
            "max_preemptions": job.spot.max_preemptions,
            "switch_rules": [
                [s.after_hours, s.if_progress_below, s.then] for s in job.spot.switch_rules
            ],
        },
        "incremental_reference_hours": job.incremental_reference_hours,
        "data": (
            {"location": job.data.location, "size_gb": job.data.size_gb, "uri": job.data.uri}
            if job.data
            else None
        ),
        "checkpoint_interval_seconds": job.checkpoint_interval_seconds,
        "restart_overhead_seconds": job.restart_overhead_seconds,
        "command": list(job.command),
        "retries": job.retries,
        "early_stop": list(job.early_stop) if job.early_stop else None,
        "webhook": {"url": job.webhook.url, "secret": job.webhook.secret} if job.webhook else None,
        "on_deadline_miss": job.on_deadline_miss.value,
        "gate": (
            [job.gate.metric, job.gate.minimum, job.gate.maximum] if job.gate is not None else None
        ),
        "promote": job.promote,
    }


def job_from_dict(d: dict[str, Any], state: JobState) -> Job:
    """The :class:`Job` stored by :func:`job_to_dict`, in ``state``."""
    r = d["resources"]
    return Job(
        id=d["id"],
        name=d["name"],
        team=d["team"],
        project=d["project"],
        tier=Tier[d["tier"]],
        resources=Resources(
            tuple(r["accelerators"]),
            r["min_gpu_memory_gib"],
            r["gpus_per_worker"],
            r["min_workers"],
            r["max_workers"],
        ),
        work=Work(
            d["work"]["reference_hours"],
            d["work"]["steps"],
            tuple((a, float(v)) for a, v in d["work"]["steps_per_hour_on"]),
        ),
        submitted_at=datetime.fromisoformat(d["submitted_at"]),
        seq=d["seq"],
        state=state,
        deadline=datetime.fromisoformat(d["deadline"]) if d["deadline"] else None,
        budget_usd=d["budget_usd"],
        depends_on=tuple(
            Dependency(x["job"], DependencyCondition(x["on"])) for x in d["depends_on"]
        ),
        spot=SpotSettings(
            d["spot"]["allowed"],
            d["spot"]["max_preemptions"],
            tuple(SwitchRule(a, b, c) for a, b, c in d["spot"]["switch_rules"]),
        ),
        incremental_reference_hours=d["incremental_reference_hours"],
        data=(
            DataSource(d["data"]["location"], d["data"]["size_gb"], d["data"].get("uri"))
            if d["data"]
            else None
        ),
        checkpoint_interval_seconds=d["checkpoint_interval_seconds"],
        restart_overhead_seconds=d["restart_overhead_seconds"],
        command=tuple(d["command"]),
        retries=int(d.get("retries", 0)),
        early_stop=(float(d["early_stop"][0]), int(d["early_stop"][1]))
        if d.get("early_stop")
        else None,
        webhook=Webhook(d["webhook"]["url"], d["webhook"].get("secret"))
        if d.get("webhook")
        else None,
        on_deadline_miss=DeadlineMiss(d.get("on_deadline_miss", "run")),
        gate=Gate(*d["gate"]) if d.get("gate") else None,
        promote=bool(d.get("promote", False)),
    )
