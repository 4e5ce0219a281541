"""The training SDK: checkpoints that survive a kill, progress reports, and the preemption notice.

Tiny and dependency-free, so any training script can use it::

    from budgeteer import sdk

    sdk.install_preemption_handler()          # SIGTERM (the spot notice) sets a flag
    ckpt = sdk.latest_checkpoint()            # None on the first attempt
    state = decode(ckpt.data) if ckpt else fresh_state()
    for step in range(state.step, total):
        train_one_step(state)
        sdk.report(step=step + 1, total_steps=total, loss=state.loss)
        if sdk.preempted():                   # notice received: save now, stop cleanly
            sdk.save_checkpoint(encode(state), step=step + 1)
            sdk.exit_preempted()

Under budgeteer the scheduler sets ``BUDGETEER_CHECKPOINT_DIR`` (persistent across attempts),
``BUDGETEER_JOB_ID``, ``BUDGETEER_ATTEMPT`` and ``BUDGETEER_PROGRESS_FILE``. Run by hand
(``python train.py``) it checkpoints to ``./checkpoints`` and reports to the log.

On several instances (``BUDGETEER_NUM_NODES`` > 1) every instance runs the script; as in
PyTorch's convention, only rank 0 (:func:`rank`) writes checkpoints and reports progress, the
other ranks' calls only log, so the instances never race on the same files.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

#: Exit status of a job that checkpointed and stopped because it was asked to (EX_TEMPFAIL):
#: not a success, not a failure — the scheduler resumes it.
PREEMPTED_EXIT_CODE = 75
KEEP_CHECKPOINTS = 2

log = logging.getLogger("budgeteer.sdk")
_preempted = False


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A saved checkpoint: its step, its file and its bytes."""

    step: int
    path: Path
    data: bytes


def rank() -> int:
    """This instance's rank among the attempt's instances (``BUDGETEER_NODE_RANK``, 0 alone)."""
    return int(os.environ.get("BUDGETEER_NODE_RANK", "0") or 0)


def num_nodes() -> int:
    """How many instances the attempt runs on (``BUDGETEER_NUM_NODES``, 1 alone)."""
    return int(os.environ.get("BUDGETEER_NUM_NODES", "1") or 1)


def checkpoint_dir() -> Path:
    """Where checkpoints live: ``$BUDGETEER_CHECKPOINT_DIR`` or ``./checkpoints`` (created)."""
    path = Path(os.environ.get("BUDGETEER_CHECKPOINT_DIR", "checkpoints"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    """A folder on this instance's own disk that outlives the job (``$BUDGETEER_CACHE_DIR``,
    where the backend gives one — the sandbox, EC2 — else ``./cache``; created): keep what the
    job downloads there and look for it first, and the next job on a warm pooled instance finds
    it (docs/pools.md). Not shared between instances, nor kept past the instance."""
    path = Path(os.environ.get("BUDGETEER_CACHE_DIR", "cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file, fsync, rename over ``path``, fsync the folder: a kill at any
    moment leaves either the old file or the new one, never a torn one (a write that raises
    removes its temporary file). Also the CLI's (``budgeteer markets export``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def save_checkpoint(data: bytes, step: int) -> Path:
    """Save ``data`` as the checkpoint of ``step`` atomically; keeps the newest two. On a rank
    other than 0 nothing is written (rank 0 saves) and the path rank 0 writes is returned."""
    if step < 0:
        raise ValueError("step must be ≥ 0")
    folder = checkpoint_dir()
    path = folder / f"ckpt-{step:012d}.bin"
    if rank() != 0:
        return path
    atomic_write(path, data)
    atomic_write(folder / "LATEST", json.dumps({"step": step, "file": path.name}).encode())
    for old in sorted(folder.glob("ckpt-*.bin"))[:-KEEP_CHECKPOINTS]:
        old.unlink(missing_ok=True)
    return path


def latest_checkpoint() -> Checkpoint | None:
    """The newest complete checkpoint, or ``None``. Leftover temporary files are ignored."""
    folder = checkpoint_dir()
    pointer = folder / "LATEST"
    if pointer.exists():
        try:
            meta = json.loads(pointer.read_text())
            path = folder / str(meta["file"])
            return Checkpoint(int(meta["step"]), path, path.read_bytes())
        except (OSError, ValueError, KeyError):
            log.warning("checkpoint pointer %s unreadable; scanning the folder", pointer)
    files = sorted(folder.glob("ckpt-*.bin"))
    if not files:
        return None
    newest = files[-1]
    return Checkpoint(int(newest.stem.split("-")[1]), newest, newest.read_bytes())


def report(
    step: int | None = None,
    total_steps: int | None = None,
    epoch: int | None = None,
    loss: float | None = None,
    **metrics: float,
) -> None:
    """Report progress, always to the log, and to the scheduler: through the API
    (:class:`budgeteer.client.Client`, with the job's own token) when ``BUDGETEER_API_URL`` is
    set, else as a JSON line to ``$BUDGETEER_PROGRESS_FILE``. If the API cannot be reached the
    report goes to the progress file instead: training never stops for a report."""
    record: dict[str, Any] = {
        "at": time.time(),
        "step": step,
        "total_steps": total_steps,
        "epoch": epoch,
        "loss": loss,
        **metrics,
    }
    record = {k: v for k, v in record.items() if v is not None}
    log.info("progress %s", json.dumps(record))
    if rank() != 0:
        return
    if os.environ.get("BUDGETEER_API_URL") and _report_to_api(record):
        return
    target = os.environ.get("BUDGETEER_PROGRESS_FILE")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()


_client: Any = None


def _report_to_api(record: dict[str, Any]) -> bool:
    """Send a report with the job token; False (logged) when that fails."""
    global _client  # noqa: PLW0603 - one connection per process, made on first use
    job_id = os.environ.get("BUDGETEER_JOB_ID")
    token = os.environ.get("BUDGETEER_JOB_TOKEN")
    if not job_id or not token:
        return False
    from budgeteer.client import Client  # noqa: PLC0415 - only jobs under the API need it

    try:
        if _client is None:
            _client = Client(os.environ["BUDGETEER_API_URL"], token, timeout=5.0)
        _client.report(job_id, **{k: v for k, v in record.items() if k != "at"})
    except Exception as exc:
        log.warning("progress report to the API failed (%s); writing it locally", exc)
        return False
    return True


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _preempted  # noqa: PLW0603 - a signal handler can only set module state
    _preempted = True


def install_preemption_handler() -> None:
    """Turn SIGTERM (the spot interruption notice) into :func:`preempted` returning True."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def preempted() -> bool:
    """True once the preemption notice has arrived: checkpoint now and stop."""
    return _preempted


def exit_preempted() -> NoReturn:
    """Stop after checkpointing on a notice, with :data:`PREEMPTED_EXIT_CODE`."""
    log.info("checkpointed after the preemption notice; exiting")
    sys.exit(PREEMPTED_EXIT_CODE)
