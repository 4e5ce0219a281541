"""One contract, every store: memory, SQLite and PostgreSQL (see budgeteer.store.base)."""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeteer.domain.job import DataSource, DeadlineMiss, Webhook
from budgeteer.domain.job import JobState as S
from budgeteer.domain.lifecycle import TRANSITIONS, IllegalTransition, state_from_events
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.domain.tier import Tier
from budgeteer.store import (
    AlreadyExists,
    ApiToken,
    Attempt,
    IdempotencyConflict,
    JobFilter,
    LedgerEntry,
    Move,
    NotFound,
    OfferingBackoff,
    PoolCharge,
    SqlStore,
    Store,
    Submission,
    SubmitRequest,
    UnknownJob,
    WebSession,
)
from builders import NOW, make_job


def test_submitted_jobs_round_trip(store: Store) -> None:
    job = make_job(
        "churn",
        seq=1,
        deadline_hours=4,
        budget_usd=400,
        incremental_hours=2,
        depends_on=(("features", "success"),),
        data=("aws/us-east-1", 500),
        accelerators=("A100", "H100"),
        workers=(1, 4),
    )
    job = dataclasses.replace(
        job,
        webhook=Webhook("https://hooks.example.com/j", "s3cret-key"),
        on_deadline_miss=DeadlineMiss.CANCEL,
        data=DataSource("aws/us-east-1", 500, "s3://churn/2026-12"),
    )
    parent = make_job("features", seq=0)
    result = store.submit([parent, job], at=NOW)
    assert result.job_ids == ("features", "churn")
    assert not result.replayed
    assert store.job("churn") == dataclasses.replace(job, state=S.SUBMITTED)
    assert [j.id for j in store.jobs()] == ["features", "churn"]
    assert [j.id for j in store.jobs([S.SUBMITTED])] == ["features", "churn"]
    store.transition("features", S.QUEUED, at=NOW, cause="test")
    assert [j.id for j in store.jobs([S.QUEUED])] == ["features"]
    assert [j.id for j in store.jobs([S.QUEUED, S.SUBMITTED])] == ["features", "churn"]
    assert [j.id for j in store.jobs([S.SUBMITTED])] == ["churn"]
    assert [e.to_state for e in store.events("churn")] == [S.SUBMITTED]


def test_idempotent_submission(store: Store) -> None:
    first = store.submit([make_job("a")], at=NOW, idempotency_key="k1", request_hash="h1")
    again = store.submit([make_job("a")], at=NOW, idempotency_key="k1", request_hash="h1")
    assert again.job_ids == first.job_ids == ("a",)
    assert again.replayed
    assert len(store.jobs()) == 1
    with pytest.raises(IdempotencyConflict, match="different request"):
        store.submit([make_job("b")], at=NOW, idempotency_key="k1", request_hash="h2")
    assert [j.id for j in store.jobs()] == ["a"]


def test_a_batch_with_a_clash_writes_nothing(store: Store) -> None:
    store.submit([make_job("a")], at=NOW)
    with pytest.raises(IdempotencyConflict):
        store.submit([make_job("b", seq=1), make_job("a", seq=2)], at=NOW)
    assert [j.id for j in store.jobs()] == ["a"]


def test_transitions_follow_the_table_and_leave_events(store: Store) -> None:
    store.submit([make_job("a")], at=NOW)
    for step, state in enumerate(
        [S.QUEUED, S.PROVISIONING, S.RUNNING, S.PREEMPTED, S.RECOVERING, S.RUNNING, S.SUCCEEDED],
        start=1,
    ):
        event = store.transition("a", state, at=NOW + timedelta(minutes=step), cause=f"s{step}")
        assert event.seq == step
    assert store.job("a").state is S.SUCCEEDED
    events = store.events("a")
    assert [e.cause for e in events][-2:] == ["s6", "s7"]
    assert events[3].at == NOW + timedelta(minutes=3)
    assert state_from_events("a", events) is S.SUCCEEDED
    with pytest.raises(IllegalTransition):
        store.transition("a", S.RUNNING, at=NOW, cause="zombie")
    assert len(store.events("a")) == 8
    assert store.jobs([S.SUCCEEDED])[0].id == "a"
    assert store.jobs([S.QUEUED]) == []


def test_a_batch_of_transitions_moves_every_job_or_none(store: Store) -> None:
    store.submit([make_job("a"), make_job("b"), make_job("c")], at=NOW)
    store.transition("c", S.QUEUED, at=NOW, cause="ready")
    events = store.transitions(
        [Move("a", S.HELD, "budget"), Move("b", S.WAITING, "deps"), Move("c", S.HELD, "quota")],
        at=NOW + timedelta(minutes=1),
    )
    assert [(e.job_id, e.seq, e.from_state, e.to_state) for e in events] == [
        ("a", 1, S.SUBMITTED, S.HELD),
        ("b", 1, S.SUBMITTED, S.WAITING),
        ("c", 2, S.QUEUED, S.HELD),
    ]
    assert [store.job(j).state for j in "abc"] == [S.HELD, S.WAITING, S.HELD]
    assert store.events("c")[-1].cause == "quota"
    assert store.events("b")[-1].at == NOW + timedelta(minutes=1)
    # one illegal move (a held job cannot run) or one unknown job: nothing moves
    with pytest.raises(IllegalTransition):
        store.transitions([Move("b", S.QUEUED, "ok"), Move("a", S.RUNNING, "no")], at=NOW)
    with pytest.raises(UnknownJob):
        store.transitions([Move("b", S.QUEUED, "ok"), Move("ghost", S.QUEUED, "x")], at=NOW)
    with pytest.raises(ValueError, match="twice"):
        store.transitions([Move("b", S.QUEUED, "ok"), Move("b", S.QUEUED, "ok")], at=NOW)
    assert store.job("b").state is S.WAITING
    assert len(store.events("b")) == 2
    assert store.transitions([], at=NOW) == []


def test_submissions_in_one_batch_keep_their_own_outcomes(store: Store) -> None:
    """``submit_many`` (the API's batch of concurrent requests): a key used twice replays, the
    key with another body and a job id used twice are conflicts; the others are stored.
    Keys and ids stored before the batch count too (the SQL store's optimistic write finds
    them and writes the batch the careful way)."""
    store.submit([make_job("z")], at=NOW, idempotency_key="old", request_hash="h0")
    out = store.submit_many(
        [
            SubmitRequest((make_job("a"),), NOW, "k", "h"),
            SubmitRequest((make_job("b"),), NOW, "k", "h"),  # the same request again
            SubmitRequest((make_job("c"),), NOW, "k", "other"),  # the key, another body
            SubmitRequest((make_job("a"),), NOW, None, ""),  # a's id again
            SubmitRequest((make_job("d"), make_job("d")), NOW, None, ""),  # twice in itself
            SubmitRequest((make_job("e"),), NOW, None, ""),
            SubmitRequest((make_job("y"),), NOW, "old", "h0"),  # a retry of an earlier one
            SubmitRequest((make_job("z"),), NOW, None, ""),  # an id stored before
        ]
    )
    assert out[0] == Submission(("a",), replayed=False)
    assert out[1] == Submission(("a",), replayed=True)
    assert isinstance(out[2], IdempotencyConflict)
    assert isinstance(out[3], IdempotencyConflict)
    assert isinstance(out[4], IdempotencyConflict)
    assert out[5] == Submission(("e",), replayed=False)
    assert out[6] == Submission(("z",), replayed=True)
    assert isinstance(out[7], IdempotencyConflict)
    assert sorted(j.id for j in store.jobs()) == ["a", "e", "z"]
    # the optimistic path alone: every key and id new
    fresh = store.submit_many(
        [
            SubmitRequest((make_job("f"),), NOW, "kf", "h"),
            SubmitRequest((make_job("g"),), NOW, "kf", "h"),
        ]
    )
    assert fresh == [Submission(("f",), replayed=False), Submission(("f",), replayed=True)]
    assert [e.to_state for e in store.events("e")] == [S.SUBMITTED]


def test_offering_backoffs_round_trip_replace_and_clear(store: Store) -> None:
    assert store.backoffs() == []
    dry = OfferingBackoff("aws/az1/p3/spot", 1, NOW + timedelta(minutes=10), 3, NOW, None)
    full = OfferingBackoff("pool", 2, NOW + timedelta(hours=1), 1, NOW, NOW + timedelta(hours=9))
    store.put_backoff(dry)
    store.put_backoff(full)
    assert store.backoffs() == [dry, full]
    worse = dataclasses.replace(dry, misses=4, room_at=NOW + timedelta(minutes=40))
    store.put_backoff(worse)  # replaces: one per offering
    assert store.backoffs() == [worse, full]
    store.clear_backoff("pool")
    store.clear_backoff("never-backed-off")  # no-op
    assert store.backoffs() == [worse]
    assert store.backoffs()[0].room_at == NOW + timedelta(minutes=40)  # times keep their zone


def test_unknown_ids(store: Store) -> None:
    with pytest.raises(UnknownJob):
        store.job("ghost")
    with pytest.raises(UnknownJob):
        store.transition("ghost", S.QUEUED, at=NOW, cause="x")
    with pytest.raises(UnknownJob):
        store.events("ghost")
    with pytest.raises(UnknownJob):
        store.end_attempt(999, at=NOW, exit_reason="x", outcome=AttemptOutcome.FAILED)


def test_attempts_and_an_exact_ledger(store: Store) -> None:
    store.submit([make_job("a")], at=NOW)
    one = store.start_attempt(
        "a", backend="sandbox", offering_id="o1", market="spot", instance_ids=["i-1"], at=NOW
    )
    two = store.start_attempt(
        "a",
        backend="sandbox",
        offering_id="o2",
        market="on_demand",
        instance_ids=["i-2", "i-3"],
        at=NOW + timedelta(hours=1),
        instances=2,
        workers=4,
    )
    assert (one.number, two.number) == (1, 2)
    assert [(a.instances, a.workers) for a in store.attempts("a")] == [(1, 1), (2, 4)]
    assert store.attempts("a")[0].outcome is None  # open
    ended = store.end_attempt(
        one.id, at=NOW + timedelta(hours=1), exit_reason="revoked", outcome=AttemptOutcome.PREEMPTED
    )
    again = store.end_attempt(
        one.id, at=NOW + timedelta(hours=2), exit_reason="other", outcome=AttemptOutcome.FAILED
    )
    assert ended.exit_reason == again.exit_reason == "revoked"
    assert store.attempts("a")[0].outcome is AttemptOutcome.PREEMPTED  # stored as the value
    assert [a.instance_ids for a in store.attempts("a")] == [("i-1",), ("i-2", "i-3")]
    # 0.1 + 0.2 in binary floats is not 0.3: the ledger must not drift by a single digit
    entries = [
        LedgerEntry(
            one.id,
            "a",
            NOW,
            NOW + timedelta(minutes=30),
            Decimal("0.918"),
            Decimal("0.10000001"),
            "trace:us-east-1f",
        ),
        LedgerEntry(
            one.id,
            "a",
            NOW + timedelta(minutes=30),
            NOW + timedelta(hours=1),
            Decimal("0.918"),
            Decimal("0.20000002"),
            "trace:us-east-1f",
        ),
        LedgerEntry(
            two.id,
            "a",
            NOW + timedelta(hours=1),
            NOW + timedelta(hours=2),
            Decimal("1.53"),
            Decimal("3.06"),
            "catalog:vms.csv",
            2,
        ),
    ]
    assert [store.add_ledger_entry(e) for e in entries] == [True, True, True]
    assert store.add_ledger_entry(entries[0]) is False  # the same interval never bills twice
    rows = store.ledger("a")
    assert [r.amount_usd for r in rows] == [
        Decimal("0.10000001"),
        Decimal("0.20000002"),
        Decimal("3.06"),
    ]
    assert sum(r.amount_usd for r in rows) == Decimal("3.36000003")
    assert rows[0].start == NOW
    assert [r.instances for r in rows] == [1, 1, 2]


def test_pool_charges_are_exact_per_team_and_never_billed_twice(store: Store) -> None:
    """A pool's charge to its team (instances booted with no job) is kept to the digit, read
    back per team in start order, and the same (offering, team, start) bills once."""
    hour = timedelta(hours=1)
    charges = [
        PoolCharge(
            "aws/g4",
            "fraud",
            NOW + hour,
            NOW + 2 * hour,
            Decimal("0.526"),
            Decimal("1.052"),
            "catalog:vms.csv",
            ("pool-1", "pool-2"),
        ),
        PoolCharge(
            "aws/g4",
            "fraud",
            NOW,
            NOW + hour,
            Decimal("0.526"),
            Decimal("0.10000001"),
            "catalog:vms.csv",
            ("pool-1",),
        ),
        PoolCharge(
            "aws/g4",
            "recs",
            NOW,
            NOW + hour,
            Decimal("0.526"),
            Decimal("0.20000002"),
            "trace:us-east-1a",
            ("pool-3",),
        ),
    ]
    assert store.pool_charge_count() == 0
    assert [store.add_pool_charge(c) for c in charges] == [True, True, True]
    assert store.add_pool_charge(dataclasses.replace(charges[1], end=NOW + 3 * hour)) is False
    assert store.pool_charge_count() == 3
    # another group of the pool's instances starting at the same time is a charge of its own
    other = dataclasses.replace(charges[1], instance_ids=("pool-9",), amount_usd=Decimal("0.3"))
    assert store.add_pool_charge(other) is True
    assert store.pool_charges("fraud")[:2] == [charges[1], other]
    assert store.pool_charge_count() == 4
    fraud = store.pool_charges("fraud")
    assert fraud == [charges[1], other, charges[0]]  # by start
    assert fraud[2].instances == 2
    assert fraud[2].instance_ids == ("pool-1", "pool-2")
    assert sum(c.amount_usd for c in store.pool_charges()) == Decimal("1.65200003")
    assert [c.team for c in store.pool_charges()] == ["fraud", "fraud", "recs", "fraud"]
    assert store.pool_charges("nobody") == []
    assert store.ledger() == []  # a pool's charge is no job's


def test_concurrent_transitions_let_exactly_one_win(store: Store) -> None:
    store.submit([make_job("a")], at=NOW)
    store.transition("a", S.QUEUED, at=NOW, cause="ready")
    barrier = threading.Barrier(4)
    wins: list[int] = []
    losses: list[int] = []

    def launch(i: int) -> None:
        barrier.wait()
        try:
            store.transition("a", S.PROVISIONING, at=NOW, cause=f"launcher {i}")
            wins.append(i)
        except IllegalTransition:
            losses.append(i)

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(wins) == 1
    assert len(losses) == 3
    assert [e.to_state for e in store.events("a")].count(S.PROVISIONING) == 1


def test_sqlite_store_survives_reopening(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/b.db"
    first = SqlStore(url)
    first.submit([make_job("a")], at=NOW)
    first.transition("a", S.QUEUED, at=NOW, cause="ready")
    first.close()
    second = SqlStore(url)  # migrations are idempotent; state is durable
    assert second.job("a").state is S.QUEUED
    second.close()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=12))
def test_state_is_always_derivable_from_events(store: Store, choices: list[int]) -> None:
    job_id = f"walk-{len(store.jobs())}"
    store.submit([make_job(job_id, seq=len(store.jobs()))], at=NOW)
    state = S.SUBMITTED
    for c in choices:
        nxt = sorted(TRANSITIONS[state])
        if not nxt:
            break
        state = nxt[c % len(nxt)]
        store.transition(job_id, state, at=NOW, cause="walk")
    assert store.job(job_id).state is state
    assert state_from_events(job_id, store.events(job_id)) is state


def test_cancel_pending_at_once_and_active_on_request(store: Store) -> None:
    store.submit([make_job("p", seq=0), make_job("r", seq=1), make_job("s", seq=2)], at=NOW)
    assert store.request_cancel("p", at=NOW) is S.CANCELLED
    for state in (S.QUEUED, S.PROVISIONING, S.RUNNING):
        store.transition("r", state, at=NOW, cause="go")
    assert store.request_cancel("r", at=NOW) is S.RUNNING
    assert store.cancel_requested() == {"r"}
    store.transition("r", S.CANCELLED, at=NOW, cause="stopped")
    assert store.cancel_requested() == set()
    for state in (S.QUEUED, S.PROVISIONING, S.RUNNING, S.SUCCEEDED):
        store.transition("s", state, at=NOW, cause="go")
    assert store.request_cancel("s", at=NOW) is S.SUCCEEDED
    with pytest.raises(UnknownJob):
        store.request_cancel("ghost", at=NOW)


def test_attempts_remember_the_cost_their_plan_expected(store: Store) -> None:
    store.submit([make_job("a")], at=NOW)
    attempt = store.start_attempt(
        "a",
        backend="sandbox",
        offering_id="o",
        market="spot",
        instance_ids=[],
        at=NOW,
        expected_cost_usd=Decimal("12.345678"),
    )
    assert store.attempts("a")[0].expected_cost_usd == Decimal("12.345678")
    assert attempt.expected_cost_usd == Decimal("12.345678")


def test_attempts_remember_the_reserve_their_plan_kept(store: Store) -> None:
    """The hours before the deadline the plan that launched an attempt was to finish by (the
    spot decider's due for it); an attempt recorded without one says so (``None``)."""
    store.submit([make_job("a"), make_job("b")], at=NOW)

    def start(job_id: str, reserve: float | None) -> Attempt:
        return store.start_attempt(
            job_id,
            backend="sandbox",
            offering_id="o",
            market="spot",
            instance_ids=[],
            at=NOW,
            reserve_hours=reserve,
        )

    kept, waived, _ = start("a", 2.75), start("a", 0.0), start("b", None)
    assert (kept.reserve_hours, waived.reserve_hours) == (2.75, 0.0)
    store.end_attempt(kept.id, at=NOW, exit_reason="preempted", outcome=AttemptOutcome.PREEMPTED)
    assert [a.reserve_hours for a in store.attempts("a")] == [2.75, 0.0]
    assert store.attempts("b")[0].reserve_hours is None


def test_an_attempt_records_its_instances_once_launched(store: Store) -> None:
    store.submit([make_job("a")], at=NOW)
    attempt = store.start_attempt(
        "a", backend="sandbox", offering_id="o", market="spot", instance_ids=[], at=NOW
    )
    assert store.attempts("a")[0].instance_ids == ()  # kept before the launch, with none
    recorded = store.record_instances(attempt.id, ["i-1", "i-2"])
    assert recorded.instance_ids == ("i-1", "i-2")
    assert store.attempts("a")[0].instance_ids == ("i-1", "i-2")
    # again: a no-op (the first launch's instances stay the attempt's)
    assert store.record_instances(attempt.id, ["i-9"]).instance_ids == ("i-1", "i-2")
    with pytest.raises(UnknownJob):
        store.record_instances(attempt.id + 100, ["i-3"])


def test_listing_pages_filter_by_team_state_and_tier(store: Store) -> None:
    jobs = [
        make_job(f"j{i}", seq=i, team="growth" if i % 2 else "search", tier=Tier(i % 4))
        for i in range(7)
    ]
    store.submit(jobs, at=NOW)
    assert store.next_seq() == 7
    first = store.list_jobs(JobFilter(limit=3))
    assert [j.id for j in first] == ["j0", "j1", "j2"]
    rest = store.list_jobs(JobFilter(after=(first[-1].seq, first[-1].id), limit=10))
    assert [j.id for j in rest] == ["j3", "j4", "j5", "j6"]
    growth = store.list_jobs(JobFilter(teams=frozenset({"growth"})))
    assert [j.id for j in growth] == ["j1", "j3", "j5"]
    assert [j.id for j in store.list_jobs(JobFilter(tier=Tier.P1))] == ["j1", "j5"]
    store.transition("j3", S.QUEUED, at=NOW, cause="test")
    queued = store.list_jobs(JobFilter(states=frozenset({S.QUEUED})))
    assert [j.id for j in queued] == ["j3"]


def test_web_sessions_are_kept_by_hash_ended_and_pruned_when_expired(store: Store) -> None:
    hour = timedelta(hours=1)
    old = WebSession("token:t1", NOW, NOW + hour)
    store.add_session("h-old", old)
    assert store.session("h-old") == old
    assert store.session("nope") is None
    admin = WebSession("admin:abc", NOW + hour / 2, NOW + 9 * hour)
    store.add_session("h-admin", admin)
    assert store.session("h-old") == old  # not expired yet when this one began
    store.add_session("h-late", WebSession("token:t2", NOW + 2 * hour, NOW + 3 * hour))
    assert store.session("h-old") is None  # expired by then: pruned
    assert store.session("h-admin") == admin
    store.end_session("h-admin")
    store.end_session("h-admin")  # again: no-op
    assert store.session("h-admin") is None
    assert store.session("h-late") is not None


def test_tokens_are_kept_by_hash_and_revoked(store: Store) -> None:
    token = ApiToken("t1", "growth ci", ("growth",), False, NOW)
    store.add_token(token, "hash-1")
    with pytest.raises(AlreadyExists):
        store.add_token(dataclasses.replace(token, id="t2"), "hash-1")  # the hash is taken
    assert store.token_by_hash("hash-1") == token
    assert store.token_by_hash("other") is None
    revoked = store.revoke_token("t1", at=NOW + timedelta(hours=1))
    assert revoked.revoked_at == NOW + timedelta(hours=1)
    assert store.revoke_token("t1", at=NOW + timedelta(hours=2)).revoked_at == revoked.revoked_at
    assert store.tokens() == [revoked]
    with pytest.raises(NotFound):
        store.revoke_token("nope", at=NOW)


def test_budgets_are_created_once_and_replaced(store: Store) -> None:
    spec = {"id": "growth-monthly", "scope": {"team": "growth"}, "limit_usd": "6000"}
    store.put_budget(spec, create=True)
    with pytest.raises(AlreadyExists):
        store.put_budget(spec, create=True)
    store.put_budget({**spec, "limit_usd": "7000"}, create=False)
    with pytest.raises(NotFound):
        store.put_budget({**spec, "id": "other"}, create=False)
    assert store.budget_specs() == [{**spec, "limit_usd": "7000"}]


def test_progress_reports_are_appended_in_order(store: Store) -> None:
    store.submit([make_job("a"), make_job("b", seq=1)], at=NOW)
    one = store.add_progress("a", {"step": 10, "total_steps": 100}, at=NOW)
    store.add_progress("b", {"step": 1}, at=NOW)
    two = store.add_progress("a", {"step": 20, "total_steps": 100, "loss": 0.5}, at=NOW)
    assert [r.record["step"] for r in store.progress("a")] == [10, 20]
    assert [r.id for r in store.progress("a", after_id=one)] == [two]
    with pytest.raises(UnknownJob):
        store.add_progress("nope", {"step": 1}, at=NOW)


def test_attempts_of_some_jobs_in_one_call(store: Store) -> None:
    store.submit([make_job("a"), make_job("b", seq=1), make_job("c", seq=2)], at=NOW)
    for job_id in ("a", "b", "a", "c"):
        store.start_attempt(
            job_id, backend="sandbox", offering_id="o", market="spot", instance_ids=[], at=NOW
        )
    got = store.attempts_of({"a", "c", "nope"})
    assert [(x.job_id, x.number) for x in got] == [("a", 1), ("a", 2), ("c", 1)]
    assert store.attempts_of(set()) == []
