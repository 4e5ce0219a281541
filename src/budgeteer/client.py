"""The Python client of the budgeteer API, sync (:class:`Client`) and async (:class:`AsyncClient`).

::

    from budgeteer.client import Client

    with Client("http://127.0.0.1:8080", token) as bg:
        handle = bg.submit(spec, idempotency_key="drift-2026-12-02-churn")
        job = bg.wait(handle.id, timeout=3600)
        print(job.state, job.cost["accrued_usd"])

Errors come back as :class:`ApiError` with the problem document's status, detail and the
fields it names. Orchestrators should always pass an idempotency key: a retried submission
then returns the same job instead of a second one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from budgeteer.domain.job import JobState
from budgeteer.errors import BudgeteerError

#: the states a job ends in (``gate_failed`` included)
TERMINAL = frozenset(s.value for s in JobState if s.is_terminal)


class ApiError(BudgeteerError):
    """An error answer: ``status``, ``detail`` and ``errors`` (``[{field, problem}]``)."""

    def __init__(self, status: int, detail: str, errors: list[dict[str, str]]) -> None:
        self.status = status
        self.detail = detail
        self.errors = errors
        self.transient = status >= 500 or status == 429
        super().__init__(f"{status}: {detail}")


@dataclass(frozen=True, slots=True)
class Handle:
    """What a submission returns."""

    id: str
    state: str
    links: Mapping[str, str]
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as ``GET /v1/jobs/{id}`` shows it (``raw`` keeps every field)."""

    id: str
    state: str
    priority: str
    team: str
    placement: Mapping[str, Any] | None
    progress: Mapping[str, Any] | None
    eta: str | None
    deadline: str | None
    deadline_risk: bool
    cost: Mapping[str, str]
    hold_reason: str | None
    raw: Mapping[str, Any] = field(repr=False)
    end_reason: str | None = None

    @property
    def done(self) -> bool:
        """True once the job is in a terminal state."""
        return self.state in TERMINAL

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> JobInfo:
        """Build from the API's JSON."""
        return cls(
            doc["id"],
            doc["state"],
            doc["priority"],
            doc["team"],
            doc.get("placement"),
            doc.get("progress"),
            doc.get("eta"),
            doc.get("deadline"),
            bool(doc.get("deadline_risk")),
            doc.get("cost", {}),
            doc.get("hold_reason"),
            doc,
            doc.get("end_reason"),
        )


def _check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            doc = response.json()
        except ValueError:
            doc = {"detail": response.text}
        raise ApiError(response.status_code, str(doc.get("detail", "")), doc.get("errors", []))
    return response.json()


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "User-Agent": "budgeteer-client/0.1"}


def _submit_headers(idempotency_key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": idempotency_key} if idempotency_key else {}


class Client:
    """Synchronous client (see the module docstring)."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self._http = httpx.Client(base_url=url, headers=_headers(token), timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def submit(self, spec: Mapping[str, Any], idempotency_key: str | None = None) -> Handle:
        """Submit a job spec; returns its handle."""
        r = self._http.post("/v1/jobs", json=spec, headers=_submit_headers(idempotency_key))
        doc = _check(r)
        return Handle(
            doc["id"], doc["state"], doc["links"], r.headers.get("Idempotent-Replayed") == "true"
        )

    def submit_pipeline(
        self, spec: Mapping[str, Any], idempotency_key: str | None = None
    ) -> dict[str, Handle]:
        """Submit a pipeline (a DAG of job specs); returns the handles by job name."""
        r = self._http.post("/v1/pipelines", json=spec, headers=_submit_headers(idempotency_key))
        doc = _check(r)
        return {n: Handle(h["id"], h["state"], h["links"]) for n, h in doc["jobs"].items()}

    def get(self, job_id: str) -> JobInfo:
        """The job now."""
        return JobInfo.from_json(_check(self._http.get(f"/v1/jobs/{job_id}")))

    def wait(self, job_id: str, timeout: float, poll_seconds: float = 1.0) -> JobInfo:
        """Poll until the job is terminal; :class:`TimeoutError` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.done:
                return job
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{job_id} still {job.state} after {timeout} s")
            time.sleep(poll_seconds)

    def cancel(self, job_id: str) -> str:
        """Ask to cancel; returns the state."""
        return str(_check(self._http.post(f"/v1/jobs/{job_id}/cancel"))["state"])

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """The job's lifecycle events."""
        return list(_check(self._http.get(f"/v1/jobs/{job_id}/events"))["events"])

    def explain(self, job_id: str) -> dict[str, Any]:
        """Why the job is placed or held, with the numbers."""
        return dict(_check(self._http.get(f"/v1/jobs/{job_id}/explain")))

    def jobs(self, **filters: str) -> list[dict[str, Any]]:
        """Every job the token may see (all pages), optionally filtered by team/state/priority."""
        out: list[dict[str, Any]] = []
        params: dict[str, str] = dict(filters)
        while True:
            doc = _check(self._http.get("/v1/jobs", params=params))
            out += doc["jobs"]
            if not doc["next_cursor"]:
                return out
            params["cursor"] = doc["next_cursor"]

    def budget_status(self, budget_id: str) -> dict[str, Any]:
        """A budget's accrued, committed, forecast and remaining money and more."""
        return dict(_check(self._http.get(f"/v1/budgets/{budget_id}/status")))

    def create_token(self, name: str, teams: list[str]) -> str:
        """Create a team token (admin only); returns its secret, shown only this once."""
        doc = _check(self._http.post("/v1/tokens", json={"name": name, "teams": teams}))
        return str(doc["token"])

    def budgets(self) -> list[dict[str, Any]]:
        """The budgets this token may see."""
        return list(_check(self._http.get("/v1/budgets"))["budgets"])

    def report(self, job_id: str, **record: Any) -> None:
        """Send a progress report for a job (the SDK does this with the job's token)."""
        _check(self._http.post(f"/v1/jobs/{job_id}/progress", json=record))


class AsyncClient:
    """Asynchronous client with the same methods as :class:`Client` (awaitable)."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(base_url=url, headers=_headers(token), timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def submit(self, spec: Mapping[str, Any], idempotency_key: str | None = None) -> Handle:
        """See :meth:`Client.submit`."""
        r = await self._http.post("/v1/jobs", json=spec, headers=_submit_headers(idempotency_key))
        doc = _check(r)
        return Handle(
            doc["id"], doc["state"], doc["links"], r.headers.get("Idempotent-Replayed") == "true"
        )

    async def get(self, job_id: str) -> JobInfo:
        """See :meth:`Client.get`."""
        return JobInfo.from_json(_check(await self._http.get(f"/v1/jobs/{job_id}")))

    async def wait(self, job_id: str, timeout: float, poll_seconds: float = 1.0) -> JobInfo:
        """See :meth:`Client.wait`."""
        deadline = time.monotonic() + timeout
        while True:
            job = await self.get(job_id)
            if job.done:
                return job
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{job_id} still {job.state} after {timeout} s")
            await asyncio.sleep(poll_seconds)

    async def cancel(self, job_id: str) -> str:
        """See :meth:`Client.cancel`."""
        return str(_check(await self._http.post(f"/v1/jobs/{job_id}/cancel"))["state"])

    async def events(self, job_id: str) -> list[dict[str, Any]]:
        """See :meth:`Client.events`."""
        return list(_check(await self._http.get(f"/v1/jobs/{job_id}/events"))["events"])

    async def budget_status(self, budget_id: str) -> dict[str, Any]:
        """See :meth:`Client.budget_status`."""
        return dict(_check(await self._http.get(f"/v1/budgets/{budget_id}/status")))
