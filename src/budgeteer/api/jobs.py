"""``/v1/jobs`` and ``/v1/pipelines``: submit (idempotently), read, list, cancel, events,
explain, progress."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Callable
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Body, Header, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from budgeteer.addresses import private_literal
from budgeteer.api.deps import Caller, Ctx, Person
from budgeteer.api.problems import Problem, spec_problem
from budgeteer.api.views import explain, job_view, links
from budgeteer.clock import simulated_time
from budgeteer.commands import command_allowed
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.tier import Tier
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.intake import prepare
from budgeteer.spec.job import JobSpec
from budgeteer.store import JobFilter, Submission, UnknownJob

router = APIRouter(prefix="/v1", tags=["jobs"])
IdempotencyKey = Annotated[
    str | None, Header(alias="Idempotency-Key", max_length=255, pattern=r"^[\x21-\x7e]+$")
]
MAX_PIPELINE_JOBS = 256


class Created(BaseModel):
    """A submitted job's handle."""

    id: str
    state: str
    links: dict[str, str]


class PipelineCreated(BaseModel):
    """A submitted pipeline: its jobs' handles, by name."""

    name: str
    jobs: dict[str, Created]


class PipelineSpec(BaseModel):
    """A DAG of jobs submitted together; ``depends_on`` names jobs of the pipeline. All its
    jobs are accounted to one project (``project``, or the pipeline's name), so that project's
    budget governs them together."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    project: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")] | None = None
    jobs: Annotated[list[JobSpec], Field(min_length=1, max_length=MAX_PIPELINE_JOBS)]


class Progress(BaseModel):
    """A progress report (what ``budgeteer.sdk.report`` sends)."""

    model_config = ConfigDict(extra="allow")

    step: Annotated[int, Field(ge=0)] | None = None
    total_steps: Annotated[int, Field(ge=1)] | None = None
    epoch: Annotated[int, Field(ge=0)] | None = None
    loss: float | None = None


def _hash(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


async def _submit(
    ctx: Ctx,
    who: Person,
    specs: list[JobSpec],
    body: BaseModel,
    idempotency_key: str | None,
    *,
    ids: Callable[[Job], str],
    existing: dict[str, str] | None = None,
    single: bool = False,
) -> Submission:
    """Convert the jobs and store them atomically (:mod:`budgeteer.intake`, the CLI's path
    too), in a batch with the concurrent submissions of this process
    (:mod:`budgeteer.api.batcher`); an idempotency key is scoped to the caller's credential
    and bound to the body it came with."""
    _check_runnable(ctx, specs, single)
    try:
        request = prepare(
            ctx.store,
            specs,
            now=ctx.clock.now(),
            known_accelerators=list(ctx.catalog.throughput),
            first_seq=ctx.next_seq,
            ids=ids,
            existing=existing,
            idempotency_key=f"{who.key}:{idempotency_key}" if idempotency_key else None,
            request_hash=_hash(body.model_dump(mode="json")),
            single=single,
            require_command=ctx.require_command,
        )
    except (SpecError, SpecErrors) as exc:
        problem = spec_problem(exc)
        simulated = simulated_time(ctx.clock, ctx.wall_clock)
        if simulated is not None:  # "not after 07:27" at 06:28 wall time needs saying why
            problem.detail += f" ({simulated.sentence()})"
        raise problem from None
    return await ctx.submissions.submit(request)


def _created(status: int, body: dict[str, Any], replayed: bool) -> JSONResponse:
    """The answer to a submission (a replay is flagged in ``Idempotent-Replayed``)."""
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(body, status_code=status, headers=headers)


def _unprocessable(field: str, problem: str) -> Problem:
    return Problem(422, f"{field}: {problem}", [{"field": field, "problem": problem}])


def _check_runnable(ctx: Ctx, specs: list[JobSpec], single: bool) -> None:
    """What the schema alone cannot say: a command the operator allows (``api.allowed_commands``,
    unless ``api.run_any_command``), a webhook that does not point at the service's own
    network (unless the operator allows). (A command where the backend runs commands is
    checked on the one submit path, :mod:`budgeteer.intake`.)"""
    for i, spec in enumerate(specs):
        at = "" if single else f"jobs[{i}]."
        if (
            spec.command
            and not ctx.run_any_command
            and not command_allowed(spec.command, ctx.allowed_commands)
        ):
            problem = "not allowed: the service runs only the commands its operator allows"
            raise Problem(
                403, f"{at}command: {problem}", [{"field": f"{at}command", "problem": problem}]
            )
        if spec.webhook and not ctx.webhook_allow_private and private_literal(spec.webhook.url):
            raise _unprocessable(
                f"{at}webhook.url", "points at a private, loopback or link-local address"
            )


def _new_id(name: str) -> str:
    return f"{name[:48]}-{secrets.token_hex(4)}"


def _visible(ctx: Ctx, who: Caller, job_id: str) -> Job:
    """The job if the caller may see it; 404 otherwise (other teams' ids are not revealed)."""
    try:
        job = ctx.store.job(job_id)
    except UnknownJob:
        raise Problem(404, f"no job {job_id!r}") from None
    if not who.sees_team(job.team):
        raise Problem(404, f"no job {job_id!r}")
    return job


def _check_team(who: Person, team: str, field: str) -> None:
    if not who.sees_team(team):
        raise Problem(
            403,
            f"{field}: this token may not submit for team {team!r}",
            [{"field": field, "problem": f"team {team!r} is not one of this token's teams"}],
        )


@router.post("/jobs", status_code=201, response_model=Created)
async def submit_job(
    spec: Annotated[JobSpec, Body()],
    ctx: Ctx,
    who: Person,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Submit a job. With ``Idempotency-Key``, a retry with the same body returns the same job
    (``Idempotent-Replayed: true``); the same key with another body is a 409."""
    _check_team(who, spec.team, "team")
    for k, dep in enumerate(spec.depends_on):
        if dep.job == spec.name:
            raise _unprocessable(f"depends_on[{k}].job", "a job cannot depend on itself")
    if spec.depends_on:
        await to_thread.run_sync(_check_upstream, ctx, who, spec)
    new_id = _new_id(spec.name)
    result = await _submit(
        ctx,
        who,
        [spec],
        spec,
        idempotency_key,
        ids=lambda _job: new_id,
        existing={d.job: d.job for d in spec.depends_on},
        single=True,
    )
    job_id = result.job_ids[0]
    state = JobState.SUBMITTED
    if result.replayed:
        state = (await to_thread.run_sync(ctx.store.job, job_id)).state
    body = {"id": job_id, "state": state.value, "links": links(job_id)}
    return _created(201, body, result.replayed)


def _check_upstream(ctx: Ctx, who: Person, spec: JobSpec) -> None:
    """Every job ``spec`` depends on exists and the caller may see it."""
    for k, dep in enumerate(spec.depends_on):
        try:
            _visible(ctx, who, dep.job)
        except Problem:
            field = f"depends_on[{k}].job"
            raise Problem(
                422,
                f"{field}: unknown job {dep.job!r}",
                [{"field": field, "problem": "unknown job"}],
            ) from None


@router.post("/pipelines", status_code=201, response_model=PipelineCreated)
async def submit_pipeline(
    spec: Annotated[PipelineSpec, Body()],
    ctx: Ctx,
    who: Person,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Submit a DAG of jobs atomically; a dependency cycle is a 422 naming the cycle."""
    for i, job_spec in enumerate(spec.jobs):
        _check_team(who, job_spec.team, f"jobs[{i}].team")
    project = spec.project or spec.name
    specs = [s.model_copy(update={"project": project}) for s in spec.jobs]
    suffix = secrets.token_hex(4)
    result = await _submit(
        ctx,
        who,
        specs,
        spec,
        idempotency_key,
        ids=lambda job: f"{spec.name[:24]}.{job.id[:40]}-{suffix}",
    )

    def states() -> list[JobState]:  # a replay: where its jobs are now
        return [ctx.store.job(job_id).state for job_id in result.job_ids]

    now = await to_thread.run_sync(states) if result.replayed else None
    handles = {
        s.name: {
            "id": job_id,
            "state": (now[i] if now else JobState.SUBMITTED).value,
            "links": links(job_id),
        }
        for i, (s, job_id) in enumerate(zip(spec.jobs, result.job_ids, strict=True))
    }
    return _created(201, {"name": spec.name, "jobs": handles}, result.replayed)


@router.get("/jobs")
def list_jobs(
    ctx: Ctx,
    who: Person,
    team: Annotated[str | None, Query(max_length=64)] = None,
    state: Annotated[JobState | None, Query()] = None,
    priority: Annotated[Literal["P0", "P1", "P2", "P3"] | None, Query()] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    """A page of jobs the caller may see, oldest first; follow ``next_cursor``."""
    teams = None if who.admin else who.teams
    if team is not None:
        teams = frozenset({team}) & teams if teams is not None else frozenset({team})
    after = _decode_cursor(cursor) if cursor else None
    page = ctx.store.list_jobs(
        JobFilter(
            teams=teams,
            states=frozenset({state}) if state else None,
            tier=Tier.parse(priority) if priority else None,
            after=after,
            limit=limit,
        )
    )
    next_cursor = _encode_cursor(page[-1]) if len(page) == limit else None
    return {
        "jobs": [
            {
                "id": j.id,
                "name": j.name,
                "team": j.team,
                "priority": j.tier.name,
                "state": j.state.value,
                "submitted_at": j.submitted_at.isoformat(),
                "links": links(j.id),
            }
            for j in page
        ],
        "next_cursor": next_cursor,
    }


def _encode_cursor(job: Job) -> str:
    return base64.urlsafe_b64encode(json.dumps([job.seq, job.id]).encode()).decode()


def _decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        seq, job_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not isinstance(seq, int) or not isinstance(job_id, str):
            raise ValueError
    except (ValueError, TypeError, UnicodeDecodeError):
        raise Problem(
            422,
            "query.cursor: not a cursor this API returned",
            [{"field": "query.cursor", "problem": "not a cursor this API returned"}],
        ) from None
    return seq, job_id


@router.get("/jobs/{job_id}")
def get_job(job_id: str, ctx: Ctx, who: Person) -> dict[str, Any]:
    """State, placement, market history, progress, ETA, cost, deadline risk, hold reason
    (and ``clock`` when the service runs an accelerated clock: its times are simulated)."""
    return _label_clock(ctx, job_view(ctx, _visible(ctx, who, job_id)))


def _label_clock(ctx: Ctx, answer: dict[str, Any]) -> dict[str, Any]:
    simulated = simulated_time(ctx.clock, ctx.wall_clock)
    return answer if simulated is None else {**answer, "clock": simulated.as_json()}


@router.post("/jobs/{job_id}/cancel", status_code=202)
def cancel_job(job_id: str, ctx: Ctx, who: Person) -> dict[str, Any]:
    """Cancel: a pending job at once, a running one after its attempt stops."""
    job = _visible(ctx, who, job_id)
    state = ctx.store.request_cancel(job.id, at=ctx.clock.now())
    return {"id": job.id, "state": state.value, "links": links(job.id)}


@router.get("/jobs/{job_id}/events")
def job_events(job_id: str, ctx: Ctx, who: Person) -> dict[str, Any]:
    """The job's lifecycle events, in order, each with its cause."""
    job = _visible(ctx, who, job_id)
    return _label_clock(
        ctx,
        {
            "id": job.id,
            "events": [
                {
                    "seq": e.seq,
                    "at": e.at.isoformat(),
                    "from": e.from_state.value if e.from_state else None,
                    "to": e.to_state.value,
                    "cause": e.cause,
                }
                for e in ctx.store.events(job.id)
            ],
        },
    )


@router.get("/jobs/{job_id}/explain")
def explain_job(job_id: str, ctx: Ctx, who: Person) -> dict[str, Any]:
    """Why this placement, or why held: the numbers behind the decision."""
    return explain(ctx, _visible(ctx, who, job_id))


@router.post("/jobs/{job_id}/progress", status_code=202)
def report_progress(job_id: str, report: Progress, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """A progress report from the job (its job token) or a caller who may see the job."""
    if who.job_id is not None and who.job_id != job_id:
        raise Problem(403, "a job token may only report its own job's progress")
    if who.job_id is None:
        _visible(ctx, who, job_id)
    record = report.model_dump(exclude_none=True)
    if any(not isinstance(v, int | float | str | bool) for v in record.values()):
        raise Problem(
            422,
            "metrics must be numbers, strings or booleans",
            [{"field": "(body)", "problem": "metrics must be numbers, strings or booleans"}],
        )
    report_id = ctx.store.add_progress(job_id, record, at=ctx.clock.now())
    return {"id": report_id}
