"""Webhooks: tell a job's ``webhook.url`` when it ends and when its deadline is at risk.

An outbox: :meth:`Notifier.scan` derives what is due from the store (a job with a webhook in a
terminal state → ``terminal``, and a promotion step that succeeded → ``promoted`` as well;
running with its ETA past the deadline less the margin → ``deadline_risk``) and queues it once
per job and kind (``Store.enqueue_webhook``), so nothing is lost or sent twice across restarts
whatever code path ended the job. :meth:`Notifier.deliver`
POSTs what is due as JSON — signed with the job's secret in ``Budgeteer-Signature:
sha256=<hex HMAC-SHA256 of the body>`` when it has one — and retries failures (any non-2xx or
network error) with exponential backoff: 30 s doubling, 8 tries, then gives up with the error
recorded. Addresses that resolve to loopback, private or link-local networks are refused unless
``allow_private`` (a team token must not make the service probe its own network).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx

from budgeteer.addresses import private_address
from budgeteer.clock import Clock
from budgeteer.core.policy import Policy
from budgeteer.core.progress import behind_schedule, eta, samples_of
from budgeteer.domain.job import Job, JobState
from budgeteer.store.base import Store, WebhookDelivery

log = logging.getLogger("budgeteer.webhooks")
MAX_TRIES = 8
BACKOFF_BASE_SECONDS = 30.0
Post = Callable[[str, bytes, dict[str, str]], int]


def _http_post(url: str, body: bytes, headers: dict[str, str]) -> int:
    return httpx.post(url, content=body, headers=headers, timeout=5.0).status_code


class Notifier:
    """Queues and sends webhooks (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        policy: Policy | None = None,
        *,
        allow_private: bool = False,
        post: Post = _http_post,
    ) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy or Policy()
        self.allow_private = allow_private
        self.post = post

    def scan(self) -> int:
        """Queue what is due; returns how many were queued."""
        now = self.clock.now()
        queued = 0
        for job in self.store.jobs():
            if job.webhook is None:
                continue
            kind = None
            if job.state.is_terminal:
                kind = "terminal"
            elif job.state is JobState.RUNNING and self._at_risk(job):
                kind = "deadline_risk"
            kinds = [kind] if kind is not None else []
            if job.promote and job.state is JobState.SUCCEEDED:
                kinds.append("promoted")  # every gate of its pipeline passed and it ran
            for k in kinds:
                if self.store.enqueue_webhook(job.id, k, self._payload(job, k, now), at=now):
                    queued += 1
        return queued

    def deliver(self) -> int:
        """Try every due webhook once; returns how many were delivered."""
        delivered = 0
        for w in self.store.due_webhooks(self.clock.now()):
            if self._send(w):
                delivered += 1
        return delivered

    def _send(self, w: WebhookDelivery) -> bool:
        job = self.store.job(w.job_id)
        assert job.webhook is not None
        url = job.webhook.url
        body = json.dumps(w.payload, sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "budgeteer-webhooks/0.1"}
        if job.webhook.secret:
            mac = hmac.new(job.webhook.secret.encode(), body, hashlib.sha256).hexdigest()
            headers["Budgeteer-Signature"] = f"sha256={mac}"
        error: str | None = None
        if not self.allow_private and private_address(url):
            error = "refused: the address is private, loopback or does not resolve"
            self.store.record_webhook(
                w.job_id, w.kind, at=self.clock.now(), error=error, next_at=None
            )
            log.warning("webhook %s of %s: %s", w.kind, w.job_id, error, extra={"job_id": w.job_id})
            return False
        try:
            status = self.post(url, body, headers)
            if not 200 <= status < 300:
                error = f"HTTP {status}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        now = self.clock.now()
        next_at = None
        if error is not None and w.attempts + 1 < MAX_TRIES:
            next_at = now + timedelta(seconds=BACKOFF_BASE_SECONDS * 2**w.attempts)
        self.store.record_webhook(w.job_id, w.kind, at=now, error=error, next_at=next_at)
        if error is not None:
            log.warning(
                "webhook %s of %s failed (try %d): %s",
                w.kind,
                w.job_id,
                w.attempts + 1,
                error,
                extra={"job_id": w.job_id},
            )
        return error is None

    def _at_risk(self, job: Job) -> bool:
        if job.deadline is None:
            return False
        attempts = self.store.attempts(job.id)
        if not attempts or attempts[-1].ended_at is not None:
            return False
        samples = samples_of(self.store.progress(job.id), attempts[-1].started_at)
        margin = (job.deadline - job.submitted_at) * self.policy.deadline_margin_fraction
        return behind_schedule(samples, job.deadline, margin)

    def _payload(self, job: Job, kind: str, now: datetime) -> dict[str, Any]:
        accrued = sum((e.amount_usd for e in self.store.ledger(job.id)), Decimal(0))
        samples = samples_of(self.store.progress(job.id))
        finish = eta(samples) if kind == "deadline_risk" else None
        return {
            "event": kind,
            "at": now.isoformat(),
            "job": {
                "id": job.id,
                "name": job.name,
                "team": job.team,
                "priority": job.tier.name,
                "state": job.state.value,
                "deadline": job.deadline.isoformat() if job.deadline else None,
                "eta": finish.isoformat() if finish else None,
                "accrued_usd": str(accrued),
                "links": {"self": f"/v1/jobs/{job.id}", "events": f"/v1/jobs/{job.id}/events"},
            },
        }
