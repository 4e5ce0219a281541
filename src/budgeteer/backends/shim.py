"""The per-attempt shim: ``python -m budgeteer.backends.shim STATE_DIR [--instances N] -- CMD...``.

It starts the job's command once per instance (``BUDGETEER_NODE_RANK`` 0…N−1 and
``BUDGETEER_NUM_NODES`` N in each one's environment), records their pids in ``STATE_DIR/pid``,
forwards the preemption notice (SIGTERM) to all of them, and when they have all ended writes the
attempt's exit status to ``STATE_DIR/exit`` (atomically) before exiting with the same status.
The status is 0 when every instance exited 0, else the first failure's; a failing instance
brings the others down (SIGTERM), as a multi-node job cannot go on without one of its nodes.
The files outlive the scheduler: a restarted scheduler re-attaches to a running attempt through
them and learns how an attempt ended while nobody was watching.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

_USAGE = "usage: python -m budgeteer.backends.shim STATE_DIR [--instances N] -- COMMAND..."


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _parse(argv: list[str]) -> tuple[Path, int, list[str]] | None:
    if len(argv) >= 2 and argv[1] == "--instances":
        if len(argv) < 5 or not argv[2].isdigit() or int(argv[2]) < 1:
            return None
        state, instances, rest = argv[0], int(argv[2]), argv[3:]
    else:
        state, instances, rest = argv[0] if argv else "", 1, argv[1:]
    if len(rest) < 2 or rest[0] != "--":
        return None
    return Path(state), instances, rest[1:]


def main(argv: list[str]) -> int:
    """Run the command under watch; returns its exit status (negative: killed by a signal)."""
    parsed = _parse(argv)
    if parsed is None:
        print(_USAGE, file=sys.stderr)
        return 2
    state, instances, command = parsed
    state.mkdir(parents=True, exist_ok=True)
    children = [
        subprocess.Popen(
            command,
            env={
                **os.environ,
                "BUDGETEER_NODE_RANK": str(rank),
                "BUDGETEER_NUM_NODES": str(instances),
            },
        )
        for rank in range(instances)
    ]

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            if child.returncode is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    _write(state / "pid", " ".join(str(c.pid) for c in children))
    status = 0
    for _ in children:
        pid, raw = os.wait()
        code = os.waitstatus_to_exitcode(raw)
        for child in children:
            if child.pid == pid:
                child.returncode = code
        if code != 0 and status == 0:
            status = code
            forward(signal.SIGTERM, None)  # the job cannot go on without this node
    _write(state / "exit", str(status))
    return status


if __name__ == "__main__":
    status = main(sys.argv[1:])
    if status < 0:  # died by a signal: die the same way so the parent sees it
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)
