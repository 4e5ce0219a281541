"""The ComputeBackend contract, run against every backend (the sandbox for now), plus the
sandbox's spot market: real processes, real signals."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from budgeteer.backends import (
    CapacityUnavailable,
    ComputeBackend,
    Handle,
    LaunchFailed,
    LaunchRequest,
    RateMarket,
    RunState,
    SandboxBackend,
    Status,
    TraceMarket,
)
from budgeteer.clock import ManualClock
from budgeteer.domain.offering import Market
from builders import make_offering

T0 = datetime(2026, 12, 2, 9, tzinfo=UTC)
PY = sys.executable


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture(params=["sandbox"])
def backend(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> Iterator[ComputeBackend]:
    sandbox = SandboxBackend(clock, RateMarket(T0, seed=1), tmp_path / "work", grace_seconds=30)
    yield sandbox
    for h in sandbox.live():
        sandbox.stop(h, "test teardown")
        clock.advance(60)
        _settle(sandbox, h)


def _settle(backend: ComputeBackend, handle: Handle, clock: ManualClock | None = None) -> Status:
    """Poll (real time passes for the process) until the attempt ends; bounded."""
    for _ in range(2000):
        status = backend.status(handle)
        if status.state.is_final:
            return status
        if clock is not None:
            clock.advance(1)
        time.sleep(0.01)
    raise AssertionError(f"{handle.id} did not finish")


def _request(tmp_path: Path, command: list[str], **kw: object) -> LaunchRequest:
    offering = kw.pop("offering", make_offering("od", startup_seconds=120))
    return LaunchRequest(
        "job-1",
        1,
        offering,
        tuple(command),  # type: ignore[arg-type]
        tmp_path / "ckpt",
        **kw,
    )  # type: ignore[arg-type]


def test_declares_capabilities(backend: ComputeBackend) -> None:
    assert backend.capabilities.spot
    assert backend.capabilities.preemption_notice


def test_provisions_then_runs_then_succeeds(
    backend: ComputeBackend, clock: ManualClock, tmp_path: Path
) -> None:
    handle = backend.launch(_request(tmp_path, [PY, "-c", "print('hi')"]))
    assert backend.status(handle).state is RunState.PROVISIONING  # 120 s start-up
    clock.advance(120)
    status = _settle(backend, handle)
    assert (status.state, status.exit_code) == (RunState.SUCCEEDED, 0)


def test_a_failing_command_reports_its_exit_code(
    backend: ComputeBackend, clock: ManualClock, tmp_path: Path
) -> None:
    handle = backend.launch(_request(tmp_path, [PY, "-c", "raise SystemExit(3)"]))
    clock.advance(120)
    status = _settle(backend, handle)
    assert (status.state, status.exit_code) == (RunState.FAILED, 3)


def test_stop_sends_the_notice_and_kills_after_the_grace(
    backend: ComputeBackend, clock: ManualClock, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    stubborn = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1], 'w').close(); time.sleep(600)"
    )
    handle = backend.launch(_request(tmp_path, [PY, "-c", stubborn, str(ready)]))
    clock.advance(120)
    backend.status(handle)
    for _ in range(1000):  # the notice only counts once the job is listening
        if ready.exists():
            break
        time.sleep(0.01)
    backend.stop(handle, "cancelled by user")
    for _ in range(50):  # ignores SIGTERM: still there inside the grace period
        time.sleep(0.01)
        assert backend.status(handle).state is RunState.RUNNING
    clock.advance(30)
    status = _settle(backend, handle)
    assert status.state is RunState.STOPPED
    assert status.exit_code == -9
    assert status.reason == "cancelled by user"


def test_clear_errors_for_what_cannot_be_launched(backend: ComputeBackend, tmp_path: Path) -> None:
    with pytest.raises(LaunchFailed, match="command not found: 'no-such-trainer'"):
        backend.launch(_request(tmp_path, ["no-such-trainer", "--epochs", "3"]))
    locked = tmp_path / "locked"
    locked.write_text("a file, not a folder")
    with pytest.raises(LaunchFailed, match="is not writable"):
        backend.launch(LaunchRequest("j", 1, make_offering(), (PY, "-c", "0"), locked / "ck"))


def test_capacity_limits_are_enforced(
    backend: ComputeBackend, clock: ManualClock, tmp_path: Path
) -> None:
    scarce = make_offering("scarce", max_instances=1)
    first = backend.launch(
        _request(tmp_path, [PY, "-c", "import time; time.sleep(60)"], offering=scarce)
    )
    with pytest.raises(CapacityUnavailable) as err:
        backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=scarce))
    assert err.value.transient
    backend.stop(first, "make room")
    clock.advance(60)
    _settle(backend, first)
    backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=scarce))  # room again


def test_spot_preemption_delivers_the_notice_and_the_job_checkpoints(
    clock: ManualClock, tmp_path: Path
) -> None:
    # spot is up for the first 10 minutes of the trace, then gone
    avail = np.array([True] * 10 + [False] * 50)
    market = TraceMarket(avail, 60, T0, prices=np.full(60, 0.9), source="test-trace")
    sandbox = SandboxBackend(clock, market, tmp_path / "work", grace_seconds=30)
    spot = make_offering("spot", market=Market.SPOT, price=0.9, startup_seconds=60)
    script = Path(__file__).parents[1] / "examples" / "train_linear.py"
    handle = sandbox.launch(
        _request(
            tmp_path,
            [
                PY,
                str(script),
                "--epochs",
                "200",
                "--step-seconds",
                "0.001",
                "--out",
                str(tmp_path / "model.npy"),
            ],
            offering=spot,
        )
    )
    clock.advance(60)
    assert sandbox.status(handle).state is RunState.RUNNING
    progress = tmp_path / "ckpt" / "progress.jsonl"
    for _ in range(3000):
        if progress.exists() and progress.read_text().strip():
            break
        time.sleep(0.01)
    clock.advance(10 * 60)  # the market revokes the instance
    status = _settle(sandbox, handle)
    assert status.state is RunState.PREEMPTED
    assert status.exit_code == 75  # the script checkpointed on the notice and exited
    assert (tmp_path / "ckpt" / "LATEST").exists()
    price, source = sandbox.price(spot, T0)
    assert (str(price), source) == ("0.9", "test-trace[0]")
    with pytest.raises(CapacityUnavailable, match="no spot capacity"):
        sandbox.launch(_request(tmp_path, [PY, "-c", "0"], offering=spot))


def test_the_job_sees_its_environment(clock: ManualClock, tmp_path: Path) -> None:
    sandbox = SandboxBackend(clock, RateMarket(T0), tmp_path / "work")
    out = tmp_path / "env.json"
    dump = (
        "import os, sys, json; json.dump({k: v for k, v in os.environ.items() "
        "if k.startswith('BUDGETEER_')}, open(sys.argv[1], 'w'))"
    )
    req = LaunchRequest(
        "job-7",
        3,
        make_offering("od", startup_seconds=0),
        (PY, "-c", dump, str(out)),
        tmp_path / "ck",
    )
    handle = sandbox.launch(req)
    status = _settle(sandbox, handle)
    assert status.state is RunState.SUCCEEDED
    env = json.loads(out.read_text())
    assert env["BUDGETEER_JOB_ID"] == "job-7"
    assert env["BUDGETEER_ATTEMPT"] == "3"
    assert env["BUDGETEER_CHECKPOINT_DIR"] == str(tmp_path / "ck")
    assert env["BUDGETEER_MARKET"] == "on_demand"


def test_multi_instance_attempts_run_every_rank_and_count_against_capacity(
    backend: ComputeBackend, clock: ManualClock, tmp_path: Path
) -> None:
    assert backend.capabilities.multi_node
    pool = make_offering("pool", max_instances=3, startup_seconds=0)
    out = tmp_path / "ranks"
    out.mkdir()
    write_rank = (
        "import os, sys, pathlib; e = os.environ; "
        "pathlib.Path(sys.argv[1], e['BUDGETEER_NODE_RANK']).write_text("
        "e['BUDGETEER_NUM_NODES'] + ' ' + e['BUDGETEER_WORKERS'])"
    )
    request = _request(
        tmp_path, [PY, "-c", write_rank, str(out)], offering=pool, instances=2, workers=4
    )
    handle = backend.launch(request)
    assert len(handle.instance_ids) == 2
    with pytest.raises(CapacityUnavailable, match="2 of 3 instances are in use, 2 asked for"):
        backend.launch(_request(tmp_path, [PY, "-c", "0"], offering=pool, instances=2))
    status = _settle(backend, handle)
    assert status.state is RunState.SUCCEEDED
    assert {f.name: f.read_text() for f in out.iterdir()} == {"0": "2 4", "1": "2 4"}


def test_one_failing_instance_fails_the_attempt_and_stops_the_others(
    backend: ComputeBackend, tmp_path: Path
) -> None:
    # rank 1 fails at once; rank 0 would sleep for ten minutes unless brought down
    script = (
        "import os, sys, time; "
        "sys.exit(3) if os.environ['BUDGETEER_NODE_RANK'] == '1' else time.sleep(600)"
    )
    request = _request(tmp_path, [PY, "-c", script], offering=make_offering("od2"), instances=2)
    status = _settle(backend, backend.launch(request))
    assert (status.state, status.exit_code) == (RunState.FAILED, 3)


def test_rate_market_is_seeded_and_alternates(tmp_path: Path) -> None:
    spot = make_offering("spot", market=Market.SPOT, interruption_per_hour=2.0)
    a = RateMarket(T0, seed=3)
    b = RateMarket(T0, seed=3)
    times = [T0.replace(minute=m) for m in range(60)]
    seq_a = [a.available(spot, t) for t in times]
    assert seq_a == [b.available(spot, t) for t in times]
    assert seq_a[0] is True
    assert not all(seq_a)  # at 2 interruptions per hour, an hour sees an outage
    assert RateMarket(T0).available(make_offering("od"), T0)


def test_trace_prices_cut_an_interval_where_they_change() -> None:
    from datetime import timedelta  # noqa: PLC0415

    prices = np.array([1.0, 1.0, 2.0, 2.0, 3.0])
    market = TraceMarket(np.ones(5, dtype=bool), 60, T0, prices=prices, source="t")
    spot = make_offering("spot", market=Market.SPOT, price=9.0)
    at = [T0 + timedelta(seconds=s) for s in (30, 120, 240, 250, 400)]
    segs = market.segments(spot, at[0], at[3])
    assert [(a, b, str(p), s) for a, b, p, s in segs] == [
        (at[0], at[1], "1.0", "t[0]"),
        (at[1], at[2], "2.0", "t[2]"),
        (at[2], at[3], "3.0", "t[4]"),
    ]
    # past the trace the last price holds; on-demand is one catalog-priced piece
    assert [str(p) for _, _, p, _ in market.segments(spot, at[3], at[4])] == ["3.0"]
    od = make_offering("od", price=4.0)
    assert [(a, b, str(p)) for a, b, p, _ in market.segments(od, at[0], at[4])] == [
        (at[0], at[4], "4.0")
    ]
    assert market.segments(spot, at[1], at[1]) == []
