"""``budgeteer k8s render JOB``: the Kubernetes Job an attempt of JOB would be (what the
``kubernetes`` backend sends), as YAML."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
import yaml

from budgeteer.backends.base import LaunchRequest
from budgeteer.cli import app, fail
from budgeteer.cli.service import ConfigOption, _service
from budgeteer.config import KubernetesConfig
from budgeteer.errors import BudgeteerError, SpecError

k8s_app = typer.Typer(help="The Kubernetes backend.", no_args_is_help=True)
app.add_typer(k8s_app, name="k8s")


@k8s_app.command("render")
def render_command(
    job: str,
    config: ConfigOption = None,
    offering: Annotated[
        str | None,
        typer.Option(
            "--offering",
            help="Default: the last attempt's, else the first placement fitting the job.",
        ),
    ] = None,
) -> None:
    """Print the Job manifest the next attempt of JOB would be sent as."""
    try:
        svc = _service(config)
        cfg = svc.config.backend
        if not isinstance(cfg, KubernetesConfig):
            raise SpecError("backend.kind", f"is {cfg.kind!r}; k8s render needs 'kubernetes'")
        backend, catalog = svc.kubernetes(cfg)
        spec = svc.store.job(job)
        attempts = svc.store.attempts(job)
        offerings = {o.id: o for o in catalog.offerings}
        fitting = [
            o.id
            for o in catalog.offerings
            if not spec.resources.accelerators or o.accelerator in spec.resources.accelerators
        ]
        chosen = offering or (attempts[-1].offering_id if attempts else None)
        chosen = chosen or (fitting[0] if fitting else None)
        if chosen is None or chosen not in offerings:
            raise SpecError("--offering", f"{chosen!r} is not one of the cluster's placements")
        target = offerings[chosen]
        gpus = spec.resources.min_workers * spec.resources.gpus_per_worker
        instances = max(1, math.ceil(gpus / max(1, target.accelerators_per_instance)))
        request = LaunchRequest(
            spec.id,
            (attempts[-1].number + 1) if attempts else 1,
            target,
            spec.command,
            Path("/budgeteer/checkpoints") / spec.id,
            instances=instances,
            workers=spec.resources.min_workers,
        )
        manifest = backend.manifest(request)
    except BudgeteerError as exc:
        fail(exc)
        return
    typer.echo(yaml.safe_dump(manifest, sort_keys=False), nl=False)
