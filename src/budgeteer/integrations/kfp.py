"""A Kubeflow Pipelines (kfp 2.x) component that runs a job or a pipeline on budgeteer.

::

    from kfp import dsl
    from budgeteer.integrations.kfp import budgeteer_job

    @dsl.pipeline
    def retrain(url: str, spec_json: str) -> None:
        budgeteer_job(url=url, spec_json=spec_json, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)

The component submits ``spec_json`` (a job spec, or a pipeline ``{name, jobs}``) with the
idempotency key ``kfp:<run_id>:<key_suffix>``, waits, and returns the jobs as JSON; it fails
(non-zero exit, the task red) naming each job that did not succeed and why. The token comes
from ``token`` or, when that is empty, the ``BUDGETEER_TOKEN`` environment variable (on a
cluster, a Kubernetes secret mounted with ``kfp-kubernetes``' ``use_secret_as_env``). On a
cluster the image must hold budgeteer: :func:`make_component` with ``packages_to_install`` or
a ``base_image`` that has it.
"""

# no ``from __future__ import annotations``: kfp reads the component's annotations as types
from collections.abc import Sequence
from typing import Any

from kfp import dsl


def _budgeteer_job(
    url: str,
    spec_json: str,
    run_id: str,
    key_suffix: str = "budgeteer",
    token: str = "",
    timeout_seconds: float = 604800.0,
    poll_seconds: float = 10.0,
) -> str:
    import json  # noqa: PLC0415 - a KFP component's imports live in its body
    import os  # noqa: PLC0415

    from budgeteer.integrations.common import idempotency_key, run  # noqa: PLC0415

    secret = token or os.environ.get("BUDGETEER_TOKEN", "")
    if not secret:
        raise ValueError("token: empty, and BUDGETEER_TOKEN is not set")
    try:
        spec = json.loads(spec_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"spec_json: not JSON ({exc})") from None
    if not isinstance(spec, dict):
        raise ValueError("spec_json: must be a JSON object (a job spec or {name, jobs})")
    ended = run(
        url,
        secret,
        spec,
        idempotency_key("kfp", run_id, key_suffix),
        timeout=timeout_seconds,
        poll_seconds=poll_seconds,
    )
    return json.dumps([e.as_dict() for e in ended])


def make_component(
    base_image: str = "python:3.11-slim", packages_to_install: Sequence[str] = ()
) -> Any:
    """The component with an image and packages of your choice (for a cluster)."""
    return dsl.component(
        base_image=base_image, packages_to_install=list(packages_to_install) or None
    )(_budgeteer_job)


#: The component for environments that already have budgeteer (the local runner, an image
#: built with it).
budgeteer_job = make_component()
