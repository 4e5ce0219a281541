"""``POST /v1/signals``: a retraining signal — drift or skew statistics a monitor computed, or
the raw samples for the service to compare — turned into a retrain by the service's trigger
policy (``triggers:`` in the config; :mod:`budgeteer.triggers`), with the same dedupe as
``budgeteer trigger``: one open retrain per model, a stronger signal raises the waiting one."""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from budgeteer.api.deps import Ctx, Person
from budgeteer.api.problems import Problem, spec_problem
from budgeteer.api.views import signal_view
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.triggers.apply import carry_out, model_job, open_retrain, record
from budgeteer.triggers.degradation import PageHinkley, detections
from budgeteer.triggers.drift import FeatureDrift, compare
from budgeteer.triggers.policy import Level, TriggerPolicy, decide
from budgeteer.triggers.view import outcome_view

router = APIRouter(prefix="/v1", tags=["signals"])
#: signals of one process are decided one at a time (one open retrain per model)
_LOCK = threading.Lock()

Value = float | str | None


class Statistic(BaseModel):
    """One feature's statistics as a monitor computed them."""

    model_config = ConfigDict(extra="forbid")
    feature: Annotated[str, Field(min_length=1, max_length=128)]
    psi: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 0.0
    ks: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    js: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0


class SignalBody(BaseModel):
    """A signal for ``model``: ``statistics``, or a ``reference`` and a ``current`` sample
    (columns of values) the service compares."""

    model_config = ConfigDict(extra="forbid")
    model: Annotated[str, Field(min_length=1, max_length=128)]
    kind: Literal["drift", "skew", "degradation"] = "drift"
    statistics: Annotated[list[Statistic], Field(min_length=1, max_length=10_000)] | None = None
    reference: dict[str, list[Value]] | None = None
    current: dict[str, list[Value]] | None = None
    #: kind ``degradation``: the metric's name and its values in order (oldest first)
    metric: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    values: (
        Annotated[list[Annotated[float, Field(allow_inf_nan=False)]], Field(max_length=1_000_000)]
        | None
    ) = None

    @model_validator(mode="after")
    def _one_form(self) -> SignalBody:
        if self.kind == "degradation":
            if self.values is None or self.metric is None:
                raise ValueError("a degradation signal needs metric and values")
            return self
        samples = self.reference is not None or self.current is not None
        if (self.statistics is None) == (not samples):
            raise ValueError("give statistics, or a reference and a current sample")
        if samples and (self.reference is None or self.current is None):
            raise ValueError("samples need both reference and current")
        return self


@router.post("/signals")
def post_signal(body: SignalBody, ctx: Ctx, who: Person, response: Response) -> dict[str, Any]:
    """Decide and carry out the retrain a signal asks for (201 when a job was submitted)."""
    if ctx.triggers is None:
        raise Problem(409, "no trigger policy: set triggers (a policy file) in the service config")
    policy, policy_dir = ctx.triggers
    try:
        job = model_job(policy, policy_dir, body.model, field="model")
        if not who.sees_team(str(job.spec["team"])):
            raise Problem(403, f"model {body.model!r} belongs to another team")
        drift: list[FeatureDrift] = []
        if body.kind == "degradation":
            level = _degraded(policy, body)
        elif body.statistics is not None:
            drift = [
                FeatureDrift(
                    s.feature,
                    "numeric" if s.ks is not None else "categorical",
                    s.psi,
                    s.ks,
                    None,
                    s.js,
                    0,
                    0,
                )
                for s in body.statistics
            ]
        else:
            drift = compare(body.reference or {}, body.current or {})
        if body.kind != "degradation":
            level = policy.severity(drift)
        with _LOCK:
            now = ctx.clock.now()
            decision = decide(level, open_retrain(ctx.store, job), now)
            job_id = carry_out(ctx.store, job, decision, now, list(ctx.catalog.throughput))
            severity = level.name if level is not None else "none"
            record(ctx.store, body.model, job, body.kind, severity, decision, job_id, drift, now)
    except (SpecError, SpecErrors) as exc:
        raise spec_problem(exc) from None
    response.status_code = 201 if job_id else 200
    return {"kind": body.kind} | outcome_view(body.model, drift, severity, decision, job_id)


def _degraded(policy: TriggerPolicy, body: SignalBody) -> Level | None:
    """The degradation rule's level when Page-Hinkley fires on the values (the last detection
    counts: the metric degraded and has not been retrained since)."""
    rule = policy.degradation
    if rule is None:
        raise Problem(409, "the trigger policy has no degradation rule")
    detector = PageHinkley(rule.min_instances, rule.delta, rule.threshold, mode=rule.mode)
    return policy.level(rule.level) if detections(body.values or [], detector) else None


@router.get("/signals")
def list_signals(
    ctx: Ctx,
    who: Person,
    model: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Recent signals the caller's teams may see, newest first, each with what it caused."""
    return {
        "signals": [
            signal_view(r) for r in ctx.store.signals(model, None) if who.sees_team(r.team)
        ][:limit]
    }
