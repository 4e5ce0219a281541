"""Run a Metaflow step's training through budgeteer.

::

    from metaflow import FlowSpec, step
    from budgeteer.integrations.metaflow import run_on_budgeteer

    class Retrain(FlowSpec):
        @step
        def train(self):
            self.jobs = run_on_budgeteer({"name": "churn", "team": "growth", ...})
            self.next(self.end)

:func:`run_on_budgeteer` submits the spec (a job, or a pipeline ``{name, jobs}``) with the
idempotency key ``metaflow:<flow>:<run>:<step>:<task>:<retry>`` — a resumed or re-executed
task finds its jobs, a ``@retry`` attempt submits anew — waits, and returns the jobs as
``[{job_id, name, state, reason, cost_usd}]`` (store it as an artifact); a job that does not
succeed raises :class:`~budgeteer.integrations.common.JobsDidNotSucceed`, failing the step
with its reason. The service is ``url``/``token`` or ``BUDGETEER_URL``/``BUDGETEER_TOKEN``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from metaflow import current

from budgeteer.integrations.common import idempotency_key, run


def run_on_budgeteer(
    spec: Mapping[str, Any],
    *,
    url: str | None = None,
    token: str | None = None,
    timeout_seconds: float = 7 * 24 * 3600.0,
    poll_seconds: float = 10.0,
) -> list[dict[str, Any]]:
    """Submit ``spec`` from the current step and wait (see the module docstring)."""
    url = url or os.environ.get("BUDGETEER_URL")
    token = token or os.environ.get("BUDGETEER_TOKEN")
    if not url:
        raise ValueError("url: not given, and BUDGETEER_URL is not set")
    if not token:
        raise ValueError("token: not given, and BUDGETEER_TOKEN is not set")
    key = idempotency_key(
        "metaflow",
        current.flow_name,
        current.run_id,
        current.step_name,
        current.task_id,
        current.retry_count,
    )
    ended = run(url, token, spec, key, timeout=timeout_seconds, poll_seconds=poll_seconds)
    return [e.as_dict() for e in ended]
