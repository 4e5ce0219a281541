"""Webhooks through the outbox on every store: once per job and kind, signed, retried with
backoff, private addresses refused, deadline risk detected from progress."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from budgeteer.clock import ManualClock
from budgeteer.domain.job import JobState as S
from budgeteer.domain.job import Webhook
from budgeteer.errors import SpecErrors
from budgeteer.service.webhooks import Notifier
from budgeteer.spec.job import JobSpec
from budgeteer.store import Store
from builders import NOW, make_job


class Receiver:
    """A real HTTP server that records what it gets and answers with scripted statuses."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.got: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append((dict(self.headers), body))
                self.send_response(outer.statuses.pop(0) if outer.statuses else 200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([])
    yield r
    r.server.shutdown()


def _finished(store: Store, url: str, secret: str | None = "s3cret-key") -> None:
    job = dataclasses.replace(make_job("churn"), webhook=Webhook(url, secret))
    store.submit([job], at=NOW)
    for state in (S.QUEUED, S.PROVISIONING, S.RUNNING, S.SUCCEEDED):
        store.transition("churn", state, at=NOW, cause="test")


def test_a_terminal_state_is_posted_once_and_signed(store: Store, receiver: Receiver) -> None:
    _finished(store, receiver.url)
    notifier = Notifier(store, ManualClock(NOW), allow_private=True)
    assert notifier.scan() == 1
    assert notifier.deliver() == 1
    assert notifier.scan() == 0  # never queued twice
    assert notifier.deliver() == 0
    [(headers, body)] = receiver.got
    doc = json.loads(body)
    assert (doc["event"], doc["job"]["id"], doc["job"]["state"]) == (
        "terminal",
        "churn",
        "succeeded",
    )
    expected = hmac.new(b"s3cret-key", body, hashlib.sha256).hexdigest()
    assert headers["Budgeteer-Signature"] == f"sha256={expected}"
    [sent] = store.webhooks("churn")
    assert sent.delivered_at == NOW
    assert sent.attempts == 1


def test_failures_are_retried_with_backoff(store: Store, receiver: Receiver) -> None:
    receiver.statuses = [500, 503]
    _finished(store, receiver.url, secret=None)
    clock = ManualClock(NOW)
    notifier = Notifier(store, clock, allow_private=True)
    notifier.scan()
    assert notifier.deliver() == 0
    [w] = store.webhooks("churn")
    assert (w.attempts, w.last_error, w.next_at) == (1, "HTTP 500", NOW + timedelta(seconds=30))
    clock.advance(29)
    assert notifier.deliver() == 0  # not due yet: nothing sent
    assert len(receiver.got) == 1
    clock.advance(1)
    assert notifier.deliver() == 0  # 503
    assert store.webhooks("churn")[0].next_at == clock.now() + timedelta(seconds=60)
    clock.advance(60)
    assert notifier.deliver() == 1
    assert len(receiver.got) == 3
    assert "Budgeteer-Signature" not in receiver.got[-1][0]
    assert store.webhooks("churn")[0].attempts == 3


def test_private_addresses_are_refused_by_default(store: Store, receiver: Receiver) -> None:
    _finished(store, receiver.url)
    notifier = Notifier(store, ManualClock(NOW))
    notifier.scan()
    assert notifier.deliver() == 0
    [w] = store.webhooks("churn")
    assert w.next_at is None  # given up: retrying cannot make the address public
    assert w.last_error is not None
    assert w.last_error.startswith("refused")
    assert receiver.got == []


def test_a_job_behind_its_deadline_raises_deadline_risk(store: Store) -> None:
    job = dataclasses.replace(
        make_job("late", deadline_hours=4), webhook=Webhook("https://hooks.example.com/x")
    )
    store.submit([job], at=NOW)
    for state in (S.QUEUED, S.PROVISIONING, S.RUNNING):
        store.transition("late", state, at=NOW, cause="test")
    store.start_attempt(
        "late", backend="sandbox", offering_id="o", market="spot", instance_ids=[], at=NOW
    )
    store.add_progress("late", {"step": 0, "total_steps": 100}, at=NOW)
    store.add_progress("late", {"step": 10, "total_steps": 100}, at=NOW + timedelta(hours=1))
    notifier = Notifier(store, ManualClock(NOW + timedelta(hours=1)))
    assert notifier.scan() == 1  # 10% an hour: ETA 9 h past the 4 h deadline
    [w] = store.webhooks("late")
    assert w.kind == "deadline_risk"
    assert w.payload["job"]["eta"] is not None


def test_webhook_urls_are_validated() -> None:
    spec = {"name": "a", "team": "t", "work": {"reference_hours": 1}}
    with pytest.raises(SpecErrors) as err:
        JobSpec.parse({**spec, "webhook": {"url": "ftp://example.com"}})
    assert err.value.errors[0].field == "webhook.url"
    with pytest.raises(SpecErrors) as err:
        JobSpec.parse({**spec, "webhook": {"url": "https://x.example", "secret": "short"}})
    assert err.value.errors[0].field == "webhook.secret"


def test_a_failing_receiver_is_tried_eight_times_then_given_up(
    store: Store, receiver: Receiver
) -> None:
    receiver.statuses = [500] * 20
    _finished(store, receiver.url, secret=None)
    clock = ManualClock(NOW)
    notifier = Notifier(store, clock, allow_private=True)
    notifier.scan()
    waits = []
    for _ in range(12):
        notifier.deliver()
        [w] = store.webhooks("churn")
        if w.next_at is None:
            break
        waits.append((w.next_at - clock.now()).total_seconds())
        clock.advance(waits[-1])
    assert len(receiver.got) == 8  # eight tries, then given up with the last error
    assert store.webhooks("churn")[0].last_error == "HTTP 500"
    assert waits == [30.0 * 2**k for k in range(7)]  # 30 s doubling between them


def test_a_promotion_step_that_succeeds_announces_promoted(store: Store) -> None:
    for name, end in (("ship", S.SUCCEEDED), ("ship-failed", S.FAILED)):
        job = dataclasses.replace(
            make_job(name), webhook=Webhook("http://127.0.0.1:9/hook"), promote=True
        )
        store.submit([job], at=NOW)
        for state in (S.QUEUED, S.PROVISIONING, S.RUNNING, end):
            store.transition(name, state, at=NOW, cause="test")
    notifier = Notifier(store, ManualClock(NOW), allow_private=True)
    assert notifier.scan() == 3  # terminal twice, promoted once
    assert notifier.scan() == 0
    kinds = {(w.job_id, w.kind) for n in ("ship", "ship-failed") for w in store.webhooks(n)}
    assert kinds == {("ship", "terminal"), ("ship", "promoted"), ("ship-failed", "terminal")}
    [promoted] = [w for w in store.webhooks("ship") if w.kind == "promoted"]
    assert (promoted.payload["event"], promoted.payload["job"]["state"]) == (
        "promoted",
        "succeeded",
    )
