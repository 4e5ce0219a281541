"""End to end on the sandbox: a real training process runs on spot, is preempted by the market,
falls back to on-demand after its preemption limit, resumes from its checkpoint, finishes with
the same model as an uninterrupted run, and its ledger equals a recompute from its attempts."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np

from budgeteer.backends import SandboxBackend, TraceMarket
from budgeteer.catalog import Catalog
from budgeteer.clock import ManualClock
from budgeteer.domain.job import JobState as S
from budgeteer.domain.job import SpotSettings
from budgeteer.domain.offering import Market
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.scheduler import Scheduler
from budgeteer.store import SqlStore
from builders import EGRESS, THROUGHPUT, job_env, make_job, make_offering

T0 = datetime(2026, 12, 2, 9, tzinfo=UTC)
SCRIPT = Path(__file__).parents[1] / "examples" / "train_linear.py"
ARGS = ["--epochs", "12", "--step-seconds", "0.002"]


def _cycle_until(
    sched: Scheduler, done: object, clock: ManualClock | None = None, step: float = 0.0
) -> None:
    for _ in range(3000):
        sched.cycle()
        if done():  # type: ignore[operator]
            return
        if clock is not None and step:
            clock.advance(step)
        time.sleep(0.01)
    raise AssertionError("the loop did not get there")


def _baseline(tmp_path: Path) -> Path:
    """The model of an uninterrupted run of the example script."""
    baseline = tmp_path / "baseline.npy"
    env = job_env(BUDGETEER_CHECKPOINT_DIR=str(tmp_path / "base-ckpt"))
    subprocess.run(
        [sys.executable, str(SCRIPT), *ARGS, "--out", str(baseline)],
        env=env,
        check=True,
        timeout=120,
    )
    return baseline


def test_spot_preemption_fallback_resume_and_ledger(tmp_path: Path) -> None:
    baseline = _baseline(tmp_path)

    spot = make_offering("spot", price=0.9, market=Market.SPOT, interruption_per_hour=0.3)
    od = make_offering("od", price=3.0)
    catalog = Catalog((spot, od), dict(THROUGHPUT), EGRESS, "test")
    # spot is there for the first 10 minutes, then gone for good
    market = TraceMarket(
        np.array([True] * 10 + [False] * 600), 60, T0, prices=np.full(610, 0.9), source="trace"
    )
    clock = ManualClock(T0)
    store = SqlStore(f"sqlite:///{tmp_path / 'b.db'}")
    backend = SandboxBackend(clock, market, tmp_path / "work", grace_seconds=30)
    sched = Scheduler(store, backend, catalog, clock, tmp_path / "ckpt")
    model = tmp_path / "model.npy"
    job = dataclasses.replace(
        make_job("retrain", hours=1),
        spot=SpotSettings(allowed=True, max_preemptions=1),
        command=(sys.executable, str(SCRIPT), *ARGS, "--out", str(model)),
    )
    store.submit([job], at=T0)

    progress = tmp_path / "ckpt" / "retrain" / "progress.jsonl"
    _cycle_until(sched, lambda: progress.exists() and len(progress.read_text().split()) >= 2)
    assert store.job("retrain").state is S.RUNNING
    assert store.attempts("retrain")[0].market == "spot"

    clock.advance(11 * 60)  # the market takes the spot instance back
    _cycle_until(sched, lambda: store.job("retrain").state.is_terminal, clock, step=5.0)

    assert store.job("retrain").state is S.SUCCEEDED
    attempts = store.attempts("retrain")
    assert [a.market for a in attempts] == ["spot", "on_demand"]
    assert attempts[0].exit_reason is not None
    assert attempts[0].exit_reason.startswith("preempted")
    assert np.array_equal(np.load(baseline), np.load(model))
    epochs = [json.loads(line)["epoch"] for line in progress.read_text().splitlines()]
    assert epochs == sorted(set(epochs))  # resumed from the checkpoint, never from epoch 1
    assert epochs[-1] == 12
    states = [e.to_state for e in store.events("retrain")]
    assert states[:4] == [S.SUBMITTED, S.QUEUED, S.PROVISIONING, S.RUNNING]
    assert S.PREEMPTED in states
    assert states[-1] is S.SUCCEEDED

    # the ledger equals an independent recompute from the attempts and the prices
    price = {"spot": Decimal("0.9"), "od": Decimal("3.0")}
    expected = sum(
        (
            price[a.offering_id]
            * Decimal(str((a.ended_at - a.started_at).total_seconds()))
            / Decimal(3600)
            for a in attempts
            if a.ended_at is not None
        ),
        Decimal(0),
    )
    entries = store.ledger("retrain")
    billed = sum((e.amount_usd for e in entries), Decimal(0))
    # equal but for each entry's rounding half-even to the ledger's 1e-8 USD
    assert abs(billed - expected) <= len(entries) * Decimal("0.5e-8")
    assert billed > 0
    store.close()


def _world(tmp_path: Path) -> tuple[Scheduler, SqlStore, ManualClock]:
    od = make_offering("od", price=3.0)
    catalog = Catalog((od,), dict(THROUGHPUT), EGRESS, "test")
    clock = ManualClock(T0)
    store = SqlStore(f"sqlite:///{tmp_path / 'b.db'}")
    market = TraceMarket(np.array([False]), 60, T0)
    backend = SandboxBackend(clock, market, tmp_path / "work")
    return Scheduler(store, backend, catalog, clock, tmp_path / "ckpt"), store, clock


def _job(name: str, code: str, after: tuple[tuple[str, str], ...] = ()) -> object:
    return dataclasses.replace(
        make_job(name, hours=0.1, depends_on=after), command=(sys.executable, "-c", code)
    )


def test_dependencies_through_the_loop(tmp_path: Path) -> None:
    sched, store, clock = _world(tmp_path)
    marker = tmp_path / "a-done"
    store.submit(
        [
            _job("a", f"import time; time.sleep(0.3); open({str(marker)!r}, 'w').close()"),
            _job(
                "b",
                f"import os, sys; sys.exit(0 if os.path.exists({str(marker)!r}) else 9)",
                (("a", "success"),),
            ),
            _job("c", "raise SystemExit(4)"),
            _job("d", "pass", (("c", "success"),)),
        ],
        at=T0,
    )  # type: ignore[list-item]
    sched.cycle()
    assert store.job("b").state is S.WAITING
    assert [a.job_id for a in store.attempts("b")] == []
    _cycle_until(sched, lambda: all(store.job(j).state.is_terminal for j in "abcd"), clock, 1)
    assert store.job("a").state is S.SUCCEEDED
    assert store.job("b").state is S.SUCCEEDED  # it found a's output: it started after a
    assert store.job("c").state is S.FAILED
    assert store.job("d").state is S.DEPENDENCY_FAILED
    assert store.attempts("c")[0].exit_reason == "failed: exited 4"
    store.close()


def test_a_command_that_does_not_exist_fails_the_job_cleanly(tmp_path: Path) -> None:
    sched, store, _ = _world(tmp_path)
    job = dataclasses.replace(make_job("ghost"), command=("no-such-trainer",))
    store.submit([job], at=T0)
    sched.cycle()
    assert store.job("ghost").state is S.FAILED
    (attempt,) = store.attempts("ghost")
    assert attempt.exit_reason == "launch failed: command not found: 'no-such-trainer'"
    assert [e.to_state for e in store.events("ghost")] == [
        S.SUBMITTED,
        S.QUEUED,
        S.PROVISIONING,
        S.FAILED,
    ]
    store.close()


def test_cancelling_a_running_job_stops_its_process(tmp_path: Path) -> None:
    sched, store, clock = _world(tmp_path)
    store.submit([_job("long", "import time; time.sleep(600)")], at=T0)  # type: ignore[list-item]
    _cycle_until(sched, lambda: store.job("long").state is S.RUNNING)
    store.request_cancel("long", at=clock.now())
    _cycle_until(sched, lambda: store.job("long").state.is_terminal, clock, 5)
    assert store.job("long").state is S.CANCELLED
    (attempt,) = store.attempts("long")
    assert attempt.exit_reason == "stopped: cancelled on request"
    store.close()


def test_preempted_twice_on_spot_resumes_each_time_and_meets_its_deadline(tmp_path: Path) -> None:
    baseline = _baseline(tmp_path)
    spot = make_offering("spot", price=0.9, market=Market.SPOT, interruption_per_hour=0.3)
    od = make_offering("od", price=3.0)
    catalog = Catalog((spot, od), dict(THROUGHPUT), EGRESS, "test")
    # minutes: up 0-9, down 10-14, up 15-24, down 25-29, up from 30 on
    avail = np.array(([True] * 10 + [False] * 5) * 2 + [True] * 600)
    market = TraceMarket(avail, 60, T0, prices=np.full(len(avail), 0.9), source="trace")
    clock = ManualClock(T0)
    store = SqlStore(f"sqlite:///{tmp_path / 'b.db'}")
    sched = Scheduler(
        store, SandboxBackend(clock, market, tmp_path / "work"), catalog, clock, tmp_path / "ckpt"
    )
    model = tmp_path / "model.npy"
    job = dataclasses.replace(
        make_job("retrain", hours=1, deadline_hours=6),
        spot=SpotSettings(allowed=True, max_preemptions=3),
        command=(sys.executable, str(SCRIPT), *ARGS, "--out", str(model)),
    )
    store.submit([job], at=T0)
    progress = tmp_path / "ckpt" / "retrain" / "progress.jsonl"
    for outage_minute in (10, 25):
        seen = len(progress.read_text().split()) if progress.exists() else 0
        _cycle_until(
            sched,
            lambda seen=seen: progress.exists() and len(progress.read_text().split()) >= seen + 2,
        )
        clock.advance((T0 - clock.now()).total_seconds() + outage_minute * 60 + 1)
        _cycle_until(sched, lambda: store.job("retrain").state is not S.RUNNING)
        clock.advance(5 * 60)  # spot is back
    _cycle_until(sched, lambda: store.job("retrain").state.is_terminal, clock, 5.0)
    assert store.job("retrain").state is S.SUCCEEDED
    ran = [a for a in store.attempts("retrain") if not (a.exit_reason or "").startswith("capacity")]
    assert [a.market for a in ran] == ["spot", "spot", "spot"]
    assert [a.exit_reason.split(":")[0] for a in ran if a.exit_reason] == [
        "preempted",
        "preempted",
        "succeeded",
    ]
    assert np.array_equal(np.load(baseline), np.load(model))
    # resumed from its checkpoint each time, in the same folder: every epoch of the 12 ran to
    # its end exactly once (a restart from scratch repeats epochs; a fresh folder loses them)
    epochs = [json.loads(line)["epoch"] for line in progress.read_text().splitlines()]
    assert epochs == list(range(1, 13))
    assert ran[-1].ended_at is not None
    assert ran[-1].ended_at <= T0 + timedelta(hours=6)
    price = Decimal("0.9")
    expected = sum(
        (
            price * Decimal(str((a.ended_at - a.started_at).total_seconds())) / Decimal(3600)
            for a in ran
            if a.ended_at
        ),
        Decimal(0),
    )
    entries = store.ledger("retrain")
    billed = sum((e.amount_usd for e in entries), Decimal(0))
    # equal but for each entry's rounding half-even to the ledger's 1e-8 USD
    assert abs(billed - expected) <= len(entries) * Decimal("0.5e-8")
    store.close()


def test_own_failures_are_retried_with_backoff_then_fail(tmp_path: Path) -> None:
    sched, store, clock = _world(tmp_path)
    counter = tmp_path / "tries"
    flaky = (
        f"import sys; from pathlib import Path; p = Path({str(counter)!r}); "
        "n = int(p.read_text()) + 1 if p.exists() else 1; p.write_text(str(n)); "
        "sys.exit(0 if n >= 3 else 5)"
    )
    store.submit(
        [
            dataclasses.replace(_job("flaky", flaky), retries=2),  # type: ignore[type-var]
            dataclasses.replace(_job("broken", "raise SystemExit(7)"), retries=1),  # type: ignore[type-var]
        ],
        at=T0,
    )
    _cycle_until(
        sched, lambda: all(store.job(j).state.is_terminal for j in ("flaky", "broken")), clock, 5
    )
    assert store.job("flaky").state is S.SUCCEEDED
    flaky_attempts = store.attempts("flaky")
    assert [a.exit_reason for a in flaky_attempts] == [
        "failed: exited 5",
        "failed: exited 5",
        "succeeded: exited 0",
    ]
    first, second, third = flaky_attempts
    assert first.ended_at is not None
    assert second.ended_at is not None
    assert (second.started_at - first.ended_at).total_seconds() >= 30  # backoff 30 s, then 60 s
    assert (third.started_at - second.ended_at).total_seconds() >= 60
    assert store.job("broken").state is S.FAILED
    assert [a.exit_reason for a in store.attempts("broken")] == ["failed: exited 7"] * 2
    assert store.events("broken")[-1].cause == "exited 7"
    store.close()


def _spot_world(tmp_path: Path) -> tuple[Scheduler, SqlStore, ManualClock]:
    spot = make_offering("spot", price=0.9, market=Market.SPOT, interruption_per_hour=0.3)
    od = make_offering("od", price=3.0)
    catalog = Catalog((spot, od), dict(THROUGHPUT), EGRESS, "test")
    market = TraceMarket(np.array([True] * 100_000), 60, T0, prices=np.full(100_000, 0.9))
    clock = ManualClock(T0)
    store = SqlStore(f"sqlite:///{tmp_path / 'b.db'}")
    sched = Scheduler(
        store, SandboxBackend(clock, market, tmp_path / "work"), catalog, clock, tmp_path / "ckpt"
    )
    return sched, store, clock


def test_behind_schedule_on_spot_switches_to_on_demand_and_resumes(tmp_path: Path) -> None:
    baseline = _baseline(tmp_path)
    sched, store, clock = _spot_world(tmp_path)
    model = tmp_path / "model.npy"
    job = dataclasses.replace(
        make_job("late", hours=0.5, deadline_hours=3),
        command=(sys.executable, str(SCRIPT), *ARGS, "--out", str(model)),
    )
    store.submit([job], at=T0)
    # the clock races ahead of the real process: at this pace it cannot finish by the deadline
    _cycle_until(sched, lambda: store.job("late").state.is_terminal, clock, 120.0)
    assert store.job("late").state is S.SUCCEEDED
    ran = list(store.attempts("late"))
    assert [a.market for a in ran] == ["spot", "on_demand"]
    causes = [e.cause for e in store.events("late") if e.to_state is S.CHECKPOINTING]
    assert len(causes) == 1
    assert causes[0].startswith("switch to on-demand: ETA")
    assert np.array_equal(np.load(baseline), np.load(model))  # resumed from the checkpoint
    store.close()


def test_a_flat_loss_stops_the_job_early(tmp_path: Path) -> None:
    sched, store, clock = _spot_world(tmp_path)
    job = dataclasses.replace(
        make_job("plateau", hours=0.5, spot=False),
        early_stop=(10.0, 2),
        command=(
            sys.executable,
            str(SCRIPT),
            "--epochs",
            "200",
            "--step-seconds",
            "0.002",
            "--out",
            str(tmp_path / "m.npy"),
        ),
    )
    store.submit([job], at=T0)
    _cycle_until(sched, lambda: store.job("plateau").state.is_terminal, clock, 1.0)
    assert store.job("plateau").state is S.STOPPED_EARLY
    causes = [e.cause for e in store.events("plateau") if e.to_state is S.CHECKPOINTING]
    assert causes == ["early stop: loss improved less than 10.0 over the last 2 reports"]
    assert (tmp_path / "ckpt" / "plateau" / "LATEST").exists()  # it checkpointed on the way out
    store.close()


def test_a_resumed_job_is_planned_for_the_work_it_has_left(tmp_path: Path) -> None:
    sched, store, _ = _world(tmp_path)
    store.submit([dataclasses.replace(make_job("half", hours=8), command=("true",))], at=T0)
    folder = tmp_path / "ckpt" / "half"
    folder.mkdir(parents=True)
    (folder / "progress.jsonl").write_text(json.dumps({"step": 75, "total_steps": 100}) + "\n")
    earlier = store.start_attempt(
        "half", backend="sandbox", offering_id="a100", market="spot", instance_ids=[], at=T0
    )
    store.end_attempt(
        earlier.id,
        at=T0,
        exit_reason="preempted: spot capacity revoked",
        outcome=AttemptOutcome.PREEMPTED,
    )
    plan = sched.cycle().plan
    assert plan is not None
    placement = plan.admissions[0].placement
    assert placement.runtime_hours == 2.0  # a quarter of 8 reference hours on one A100
    store.close()


def test_an_elastic_job_behind_schedule_gets_more_workers(tmp_path: Path) -> None:
    baseline = _baseline(tmp_path)
    sched, store, clock = _spot_world(tmp_path)
    model = tmp_path / "model.npy"
    job = dataclasses.replace(
        make_job("elastic", hours=0.5, deadline_hours=3, spot=False, workers=(1, 4)),
        command=(sys.executable, str(SCRIPT), *ARGS, "--out", str(model)),
    )
    store.submit([job], at=T0)
    # the clock races ahead of the real process: one worker cannot make the deadline
    _cycle_until(sched, lambda: store.job("elastic").state.is_terminal, clock, 120.0)
    assert store.job("elastic").state is S.SUCCEEDED
    ran = store.attempts("elastic")
    assert [a.workers for a in ran][:2] == [1, 2]
    assert all(a.market == "on_demand" and a.instances == a.workers for a in ran)
    causes = [e.cause for e in store.events("elastic") if e.to_state is S.CHECKPOINTING]
    assert causes[0].startswith("scale up to 2 workers: ETA")
    assert np.array_equal(np.load(baseline), np.load(model))  # resumed from the checkpoint
    # two instances bill twice: the ledger equals price × instances × time, attempt by attempt
    for a in ran:
        assert a.ended_at is not None
        mine = [e for e in store.ledger("elastic") if e.attempt_id == a.id]
        billed = sum((e.amount_usd for e in mine), Decimal(0))
        seconds = Decimal(str((a.ended_at - a.started_at).total_seconds()))
        expected = Decimal("3.0") * a.instances * seconds / 3600
        assert abs(billed - expected) <= len(mine) * Decimal("0.5e-8")  # 1e-8 USD rounding
    store.close()
