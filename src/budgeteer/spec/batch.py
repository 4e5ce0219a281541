"""A batch of job specs (a file, a pipeline) converted together (pure).

Names are the job ids within the batch; duplicate names and dependency cycles are refused, the
cycle named. A step with ``promote: true`` runs only after every validation gate of its batch
passed: it depends on each gate step with ``on: success`` besides what its own ``depends_on``
names, so one gate that fails (``gate_failed``) leaves it ``dependency_failed`` and nothing is
promoted. A batch with a promotion step and no gate is refused (there would be nothing for the
promotion to wait for); a promotion step submitted alone waits for what its ``depends_on`` names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from budgeteer.core.ready import find_cycle
from budgeteer.domain.job import Job
from budgeteer.errors import CycleError, SpecError, SpecErrors
from budgeteer.spec.job import DependencySpec, JobSpec, job_from_spec


def with_promotion_gates(specs: Sequence[JobSpec], prefixes: Sequence[str]) -> list[JobSpec]:
    """``specs`` with every promotion step depending on every gate step (on success);
    ``prefixes`` are the specs' error paths (``jobs[3]``)."""
    gates = [s.name for s in specs if s.gate is not None]
    out = []
    for spec, prefix in zip(specs, prefixes, strict=True):
        if not spec.promote:
            out.append(spec)
            continue
        if not gates:
            raise SpecError(
                f"{prefix}.promote",
                "the batch has no validation gate (a step with gate) for it to wait for",
            )
        named = {(d.job, d.on) for d in spec.depends_on}
        extra = [DependencySpec(job=g, on="success") for g in gates if (g, "success") not in named]
        out.append(spec.model_copy(update={"depends_on": [*spec.depends_on, *extra]}))
    return out


def jobs_from_specs(
    specs: Sequence[JobSpec],
    *,
    now: datetime,
    known_accelerators: Sequence[str],
    existing: Mapping[str, str] | None = None,
    first_seq: int = 0,
    source: str | None = None,
    positions: Sequence[int] | None = None,
    single: bool = False,
) -> list[Job]:
    """Convert a batch (a file, a pipeline) of specs; names are the job ids within the batch.
    With ``single`` (one job submitted alone) error paths name the spec's fields directly
    (``sla``), not ``jobs[0].sla``.

    Dependencies may name a job of the batch or an ``existing`` job (name → id). Duplicate
    names and dependency cycles are rejected, the cycle named; a promotion step waits for every
    gate of the batch (see the module). Every error found is reported; ``positions`` gives each
    spec's index in its file (for error paths) when some were dropped.
    """
    where = list(positions) if positions is not None else list(range(len(specs)))

    def prefix(i: int) -> str:
        return "" if single else f"jobs[{where[i]}]"

    if not single:
        try:
            specs = with_promotion_gates(specs, [prefix(i) for i in range(len(specs))])
        except SpecError as exc:
            raise SpecErrors([SpecError(exc.field, exc.problem, source)]) from None
    errors: list[SpecError] = []
    ids: dict[str, str] = dict(existing or {})
    for i, spec in enumerate(specs):
        if spec.name in ids and spec.name not in (existing or {}):
            errors.append(
                SpecError(
                    f"{prefix(i)}.name".lstrip("."), f"duplicate job name {spec.name!r}", source
                )
            )
        ids[spec.name] = spec.name
    jobs: list[Job] = []
    for i, spec in enumerate(specs):
        try:
            jobs.append(
                job_from_spec(
                    spec,
                    job_id=spec.name,
                    now=now,
                    seq=first_seq + i,
                    known_accelerators=known_accelerators,
                    dependency_ids=ids,
                    source=source,
                    prefix=prefix(i),
                )
            )
        except SpecError as exc:
            errors.append(exc)
    if errors:
        raise SpecErrors(errors)
    cycle = find_cycle({job.id: [d.job for d in job.depends_on] for job in jobs})
    if cycle:
        raise CycleError(cycle, source)
    return jobs
