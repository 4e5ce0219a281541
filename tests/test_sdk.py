"""The training SDK, and the example training script resuming to the very same model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from budgeteer import sdk

EXAMPLE = Path(__file__).parents[1] / "examples" / "train_linear.py"


@pytest.fixture
def ckpt_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ckpt"
    monkeypatch.setenv("BUDGETEER_CHECKPOINT_DIR", str(folder))
    return folder


def test_latest_checkpoint_is_the_newest_and_old_ones_are_pruned(ckpt_dir: Path) -> None:
    assert sdk.latest_checkpoint() is None
    for step in (10, 20, 30):
        sdk.save_checkpoint(f"state {step}".encode(), step)
    latest = sdk.latest_checkpoint()
    assert latest is not None
    assert (latest.step, latest.data) == (30, b"state 30")
    assert sorted(p.name for p in ckpt_dir.glob("ckpt-*.bin")) == [
        "ckpt-000000000020.bin",
        "ckpt-000000000030.bin",
    ]


def test_a_torn_write_never_becomes_the_latest(ckpt_dir: Path) -> None:
    sdk.save_checkpoint(b"good", 5)
    # a kill mid-write leaves only a temporary file behind
    (ckpt_dir / ".ckpt-000000000006.bin.999.tmp").write_bytes(b"half")
    latest = sdk.latest_checkpoint()
    assert latest is not None
    assert latest.data == b"good"
    (ckpt_dir / "LATEST").write_text("{not json")  # even a damaged pointer is survivable
    latest = sdk.latest_checkpoint()
    assert latest is not None
    assert latest.data == b"good"


def test_works_without_a_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BUDGETEER_CHECKPOINT_DIR", raising=False)
    monkeypatch.delenv("BUDGETEER_PROGRESS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    sdk.save_checkpoint(b"x", 1)
    sdk.report(step=1, loss=0.5)
    assert (tmp_path / "checkpoints" / "ckpt-000000000001.bin").exists()
    monkeypatch.delenv("BUDGETEER_CACHE_DIR", raising=False)
    assert sdk.cache_dir() == Path("cache")
    assert (tmp_path / "cache").is_dir()
    monkeypatch.setenv("BUDGETEER_CACHE_DIR", str(tmp_path / "disk" / "cache"))
    assert sdk.cache_dir() == tmp_path / "disk" / "cache"
    assert sdk.cache_dir().is_dir()


def test_report_writes_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "progress.jsonl"
    monkeypatch.setenv("BUDGETEER_PROGRESS_FILE", str(target))
    sdk.report(step=3, total_steps=10, epoch=1, loss=0.25, accuracy=0.9)
    record = json.loads(target.read_text().splitlines()[0])
    assert record["step"] == 3
    assert record["loss"] == 0.25
    assert record["accuracy"] == 0.9


def _train(
    ckpt: Path, out: Path, progress: Path, step_seconds: float = 0.0
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "BUDGETEER_CHECKPOINT_DIR": str(ckpt),
        "BUDGETEER_PROGRESS_FILE": str(progress),
    }
    return subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE),
            "--epochs",
            "6",
            "--out",
            str(out),
            "--step-seconds",
            str(step_seconds),
        ],
        env=env,
    )


def _wait_for_progress(progress: Path, lines: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and len(progress.read_text().splitlines()) >= lines:
            return
        time.sleep(0.02)
    raise AssertionError("the training script made no progress")


def test_interrupted_and_resumed_training_gives_the_same_model(tmp_path: Path) -> None:
    whole = tmp_path / "whole.npy"
    proc = _train(tmp_path / "a", whole, tmp_path / "a.jsonl")
    assert proc.wait(timeout=120) == 0

    resumed = tmp_path / "resumed.npy"
    for preemption in (1, 3):  # two spot notices, at different points
        proc = _train(tmp_path / "b", resumed, tmp_path / "b.jsonl", step_seconds=0.002)
        _wait_for_progress(tmp_path / "b.jsonl", preemption, proc)
        time.sleep(0.05)  # land the notice mid-epoch
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == sdk.PREEMPTED_EXIT_CODE
    assert not resumed.exists()
    proc = _train(tmp_path / "b", resumed, tmp_path / "b.jsonl")
    assert proc.wait(timeout=120) == 0
    assert np.array_equal(np.load(whole), np.load(resumed))
