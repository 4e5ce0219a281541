"""The per-attempt shim: ``python -m budgeteer.backends.shim STATE_DIR -- COMMAND...``.

It starts the job's command, records the command's pid in ``STATE_DIR/pid``, forwards the
preemption notice (SIGTERM) to it, and when it ends writes its exit status to
``STATE_DIR/exit`` (atomically) before exiting with the same status. The files outlive the
scheduler: a restarted scheduler re-attaches to a running attempt through them and learns how
an attempt ended while nobody was watching.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    """Run the command under watch; returns its exit status (negative: killed by a signal)."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m budgeteer.backends.shim STATE_DIR -- COMMAND...", file=sys.stderr)
        return 2
    state = Path(argv[0])
    state.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(argv[2:])

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    _write(state / "pid", str(child.pid))
    code = child.wait()
    _write(state / "exit", str(code))
    return code


if __name__ == "__main__":
    status = main(sys.argv[1:])
    if status < 0:  # died by a signal: die the same way so the parent sees it
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)
