"""What every orchestrator integration does the same way (no orchestrator imported here).

A task submits a job spec (or a pipeline: a mapping with ``jobs``) to a budgeteer service with
an idempotency key built from the orchestrator's own run identity, so a retried submission
returns the same jobs instead of queuing more; it waits until every job is terminal; it succeeds
when every job succeeded and fails with :class:`JobsDidNotSucceed`, whose message names each
job that did not and its reason (``validate ended gate_failed: gate failed: auc = 0.78, needs
auc ≥ 0.81``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budgeteer.client import Client, JobInfo
from budgeteer.errors import BudgeteerError

_KEY_UNSAFE = re.compile(r"[^\x21-\x7e]+")
MAX_KEY = 255  # what the API accepts in Idempotency-Key


class JobsDidNotSucceed(BudgeteerError):
    """Some jobs ended otherwise than ``succeeded``; ``ended`` is every job's :class:`Ended`."""

    def __init__(self, ended: Sequence[Ended]) -> None:
        self.ended = tuple(ended)
        bad = [e for e in ended if e.state != "succeeded"]
        super().__init__("; ".join(e.describe() for e in bad))


@dataclass(frozen=True, slots=True)
class Ended:
    """How one job ended: its state, the reason the service gives, and what it cost."""

    job_id: str
    name: str
    state: str
    reason: str | None
    cost_usd: str | None

    def describe(self) -> str:
        """``validate (recs.validate-1a2b) ended gate_failed: gate failed: …``."""
        reason = f": {self.reason}" if self.reason else ""
        return f"{self.name} ({self.job_id}) ended {self.state}{reason}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe (an Airflow trigger event, an XCom, a KFP output)."""
        return {
            "job_id": self.job_id,
            "name": self.name,
            "state": self.state,
            "reason": self.reason,
            "cost_usd": self.cost_usd,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ended:
        """The inverse of :meth:`as_dict`."""
        return cls(d["job_id"], d["name"], d["state"], d.get("reason"), d.get("cost_usd"))

    @classmethod
    def of(cls, job: JobInfo) -> Ended:
        """From the API's view of a terminal job."""
        return cls(
            job.id,
            str(job.raw.get("name", job.id)),
            job.state,
            job.end_reason,
            job.cost.get("accrued_usd"),
        )


def idempotency_key(*parts: object) -> str:
    """One key from the orchestrator's run identity (DAG, run, task, try …): printable ASCII
    without spaces, at most 255 characters (a long key keeps its end, which varies most)."""
    key = ":".join(_KEY_UNSAFE.sub("_", str(p)) for p in parts if p is not None and p != "")
    if not key:
        raise ValueError("an idempotency key needs at least one non-empty part")
    return key[-MAX_KEY:]


def is_pipeline(spec: Mapping[str, Any]) -> bool:
    """A pipeline spec (``{name, jobs: [...]}``) rather than one job's."""
    return "jobs" in spec


def submit(client: Client, spec: Mapping[str, Any], key: str | None) -> list[str]:
    """Submit a job or a pipeline; the job ids (a pipeline's in its order)."""
    if is_pipeline(spec):
        return [h.id for h in client.submit_pipeline(spec, idempotency_key=key).values()]
    return [client.submit(spec, idempotency_key=key).id]


def settled(jobs: Sequence[JobInfo]) -> list[Ended] | None:
    """How every job ended, or ``None`` while one is not terminal yet."""
    if not all(j.done for j in jobs):
        return None
    return [Ended.of(j) for j in jobs]


def outcome(ended: Sequence[Ended]) -> list[Ended]:
    """``ended`` when every job succeeded; :class:`JobsDidNotSucceed` otherwise."""
    if any(e.state != "succeeded" for e in ended):
        raise JobsDidNotSucceed(ended)
    return list(ended)


def wait(
    client: Client, job_ids: Sequence[str], timeout: float, poll_seconds: float = 5.0
) -> list[Ended]:
    """Poll until every job is terminal (:class:`TimeoutError` after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        ended = settled([client.get(j) for j in job_ids])
        if ended is not None:
            return ended
        if time.monotonic() >= deadline:
            raise TimeoutError(f"jobs {', '.join(job_ids)} not all ended after {timeout:g} s")
        time.sleep(poll_seconds)


def run(
    url: str,
    token: str,
    spec: Mapping[str, Any],
    key: str | None,
    *,
    timeout: float,
    poll_seconds: float = 5.0,
) -> list[Ended]:
    """Submit, wait, and return how the jobs ended — or raise :class:`JobsDidNotSucceed`."""
    with Client(url, token) as client:
        return outcome(wait(client, submit(client, spec, key), timeout, poll_seconds))
