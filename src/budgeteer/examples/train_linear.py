"""A real, small training job: logistic regression by mini-batch SGD with numpy.

It checkpoints every epoch and on the preemption notice (SIGTERM), and resumes from the newest
checkpoint, so an interrupted-and-resumed run ends with exactly the same model as an
uninterrupted one (the checkpoint holds the weights, the position in the epoch, the epoch's
shuffle and the random generator's state).

    python -m budgeteer.examples.train_linear --epochs 30 --out model.npy
    python examples/train_linear.py --epochs 30 --out model.npy   # the same, from a checkout
"""

from __future__ import annotations

import argparse
import io
import json
import time
from typing import Any

import numpy as np

from budgeteer import sdk


def make_data(seed: int, n: int = 4000, d: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """A fixed synthetic classification problem."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    true_w = rng.normal(size=d)
    y = (x @ true_w + rng.normal(scale=0.5, size=n) > 0).astype(np.float64)
    return x, y


def encode(state: dict[str, Any]) -> bytes:
    """Checkpoint bytes: arrays in an npz, the rest as JSON inside it."""
    buf = io.BytesIO()
    arrays: dict[str, Any] = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    np.savez(buf, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
    return buf.getvalue()


def decode(data: bytes) -> dict[str, Any]:
    """The state saved by :func:`encode`."""
    with np.load(io.BytesIO(data)) as z:
        state: dict[str, Any] = json.loads(bytes(z["meta"]).decode())
        for key in z.files:
            if key != "meta":
                state[key] = z[key]
    return state


def main() -> None:
    """Train, checkpoint, resume."""
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--step-seconds", type=float, default=0.0, help="slow down (for demos)")
    p.add_argument("--out", default="model.npy")
    args = p.parse_args()
    sdk.install_preemption_handler()
    x, y = make_data(args.seed)
    n_batches = len(x) // args.batch
    total = args.epochs * n_batches
    ckpt = sdk.latest_checkpoint()
    if ckpt is None:
        rng = np.random.default_rng(args.seed + 1)
        state: dict[str, Any] = {
            "w": np.zeros(x.shape[1]),
            "epoch": 0,
            "batch": 0,
            "perm": rng.permutation(len(x)),
            "rng": rng.bit_generator.state,
        }
    else:
        state = decode(ckpt.data)
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
    w = np.asarray(state["w"], dtype=np.float64)
    epoch, batch, perm = int(state["epoch"]), int(state["batch"]), np.asarray(state["perm"])
    while epoch < args.epochs:
        while batch < n_batches:
            idx = perm[batch * args.batch : (batch + 1) * args.batch]
            pred = 1 / (1 + np.exp(-(x[idx] @ w)))
            w = w - args.lr * x[idx].T @ (pred - y[idx]) / len(idx)
            batch += 1
            if args.step_seconds:
                time.sleep(args.step_seconds)
            step = epoch * n_batches + batch
            if sdk.preempted():
                sdk.save_checkpoint(
                    encode(
                        {
                            "w": w,
                            "epoch": epoch,
                            "batch": batch,
                            "perm": perm,
                            "rng": rng.bit_generator.state,
                        }
                    ),
                    step,
                )
                sdk.exit_preempted()
        epoch, batch, perm = epoch + 1, 0, rng.permutation(len(x))
        p_all = 1 / (1 + np.exp(-(x @ w)))
        loss = float(-np.mean(y * np.log(p_all + 1e-12) + (1 - y) * np.log(1 - p_all + 1e-12)))
        sdk.save_checkpoint(
            encode(
                {"w": w, "epoch": epoch, "batch": 0, "perm": perm, "rng": rng.bit_generator.state}
            ),
            epoch * n_batches,
        )
        sdk.report(step=epoch * n_batches, total_steps=total, epoch=epoch, loss=loss)
    if sdk.rank() == 0:  # on several instances, rank 0 writes the model (as it checkpoints)
        np.save(args.out, w)


if __name__ == "__main__":
    main()
