"""The entrypoint of a Ray attempt on several nodes: ``python -m budgeteer.backends.ray_gang
--resource R --nodes N --grace S -- COMMAND…``.

It runs as the Ray job's driver. It reserves ``N`` nodes carrying ``R`` as one placement group
(``STRICT_SPREAD``: one bundle ``{R: 1}`` per node, all or none), starts one rank actor in each
bundle, and each actor runs ``COMMAND`` with ``BUDGETEER_NODE_RANK`` = its index and
``BUDGETEER_NUM_NODES`` = ``N`` (the rest of the job's environment comes with the job's runtime
env) — the same ranks the sandbox and Slurm give. Then it waits:

- every rank exits 0 → exit 0;
- a rank fails → the others get SIGTERM (then SIGKILL after the grace), and the gang exits with
  the failed rank's code;
- the driver gets SIGTERM (budgeteer's ``stop``: the notice) → every rank gets it, and the gang
  exits when they have (75 unless a rank said otherwise);
- a node of the group is being drained (the preemption notice: the backend watches the
  driver's node; the gang watches its ranks' nodes) → the same notice to every rank, and the
  gang prints ``node … is being drained`` and exits 75, which the backend reads as preempted;
- a rank's node dies → the others are stopped, and the gang prints ``node died`` (preempted).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

#: Exit status of a gang stopped by the notice (EX_TEMPFAIL: try again later).
NOTICE_EXIT = 75
#: Seconds between looks at the group's nodes for a drain.
DRAIN_POLL_SECONDS = 1.0


class _RankProcess:
    """One rank's process, inside its actor (a threaded actor: ``terminate`` may run while
    ``wait`` blocks)."""

    def __init__(self, command: Sequence[str], rank: int, nodes: int) -> None:
        env = {**os.environ, "BUDGETEER_NODE_RANK": str(rank), "BUDGETEER_NUM_NODES": str(nodes)}
        self.process = subprocess.Popen(list(command), env=env)

    def node(self) -> str:
        import ray  # noqa: PLC0415 - only inside the cluster

        return str(ray.get_runtime_context().get_node_id())

    def wait(self) -> int:
        return self.process.wait()

    def terminate(self, grace_seconds: float) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(grace_seconds)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gang (see the module docstring); its exit status."""
    p = argparse.ArgumentParser(prog="budgeteer.backends.ray_gang")
    p.add_argument("--resource", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--grace", type=float, default=30.0)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.nodes < 1:
        p.error("a command and --nodes ≥ 1 are needed")

    import ray  # noqa: PLC0415 - the optional extra, on the cluster
    from ray.util.placement_group import placement_group  # noqa: PLC0415
    from ray.util.scheduling_strategies import (  # noqa: PLC0415
        PlacementGroupSchedulingStrategy,
    )

    ray.init(logging_level=logging.WARNING)
    group = placement_group([{args.resource: 1}] * args.nodes, strategy="STRICT_SPREAD")
    ray.get(group.ready())
    rank_actor: Any = ray.remote(num_cpus=0, max_concurrency=4)(_RankProcess)  # type: ignore[call-overload]
    ranks = [
        rank_actor.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=i
            ),
            resources={args.resource: 1},
        ).remote(command, i, args.nodes)
        for i in range(args.nodes)
    ]
    nodes = ray.get([r.node.remote() for r in ranks])
    notice = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: notice.set())
    waits = {r.wait.remote(): i for i, r in enumerate(ranks)}
    codes: dict[int, int] = {}
    first_failure: int | None = None  # the code of the rank that failed first, by itself
    why = ""
    next_look = 0.0
    while len(codes) < len(ranks):
        done, _ = ray.wait(list(waits), num_returns=1, timeout=0.2)
        for ref in done:
            i = waits.pop(ref)
            try:
                codes[i] = int(ray.get(ref))
            except ray.exceptions.RayError as exc:  # its node or its actor died
                codes[i] = NOTICE_EXIT
                why = why or f"rank {i}: node died ({type(exc).__name__})"
        failed = [c for c in codes.values() if c != 0]
        if failed and first_failure is None and not notice.is_set():
            first_failure = failed[0]
        if time.monotonic() >= next_look and not notice.is_set():
            next_look = time.monotonic() + DRAIN_POLL_SECONDS
            drained = _draining(ray, nodes)
            if drained:
                why = f"node {drained[:12]} is being drained (preempted)"
                notice.set()
        if waits and (failed or notice.is_set()):
            _stop_all(ray, ranks, waits, codes, args.grace)
    if why:
        print(f"budgeteer gang: {why}", file=sys.stderr, flush=True)
        return NOTICE_EXIT
    if first_failure is not None:
        return first_failure
    if notice.is_set():
        return NOTICE_EXIT
    return 0


def _stop_all(
    ray: Any, ranks: list[Any], waits: dict[Any, int], codes: dict[int, int], grace: float
) -> None:
    """The notice to every rank still running; their exit statuses into ``codes``."""
    pending = {waits[ref]: ranks[waits[ref]].terminate.remote(grace) for ref in list(waits)}
    for i, ref in pending.items():
        try:
            codes[i] = int(ray.get(ref, timeout=grace + 30))
        except Exception:  # its node went meanwhile: it is stopped either way
            codes[i] = NOTICE_EXIT
    waits.clear()


def _draining(ray: Any, nodes: Sequence[str]) -> str | None:
    """The first of ``nodes`` being drained, if any (the autoscaler's view of the cluster)."""
    from ray.autoscaler.v2.sdk import get_cluster_status  # noqa: PLC0415

    try:
        status = get_cluster_status(ray.get_runtime_context().gcs_address, timeout=5)
    except Exception:  # the GCS did not answer: look again next time
        return None
    for n in (*status.active_nodes, *status.idle_nodes):
        if n.node_id in nodes and str(n.node_status).upper().endswith("DRAINING"):
            return str(n.node_id)
    return None


if __name__ == "__main__":
    raise SystemExit(main())
