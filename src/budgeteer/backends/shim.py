"""The per-attempt shim: ``python -m budgeteer.backends.shim STATE_DIR [--instances N]
[--user UID:GID] -- CMD...``.

It starts the job's command once per instance (``BUDGETEER_NODE_RANK`` 0…N−1 and
``BUDGETEER_NUM_NODES`` N in each one's environment), records their pids in ``STATE_DIR/pid``,
forwards the preemption notice (SIGTERM) to all of them, and when they have all ended writes the
attempt's exit status to ``STATE_DIR/exit`` (atomically) before exiting with the same status.
The status is 0 when every instance exited 0, else the first failure's; a failing instance
brings the others down (SIGTERM), as a multi-node job cannot go on without one of its nodes.
With ``--user`` (a service running as root), the shim stays root — so that the scheduler can
signal it and it can write the state files the job cannot touch — and starts the commands as
that unprivileged user, with no supplementary groups and umask 077.
The files outlive the scheduler: a restarted scheduler re-attaches to a running attempt through
them and learns how an attempt ended while nobody was watching.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

_USAGE = (
    "usage: python -m budgeteer.backends.shim STATE_DIR [--instances N] [--user UID:GID] "
    "-- COMMAND..."
)


@dataclass(frozen=True)
class _Args:
    state: Path
    instances: int
    user: tuple[int, int] | None
    command: list[str]


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _parse(argv: list[str]) -> _Args | None:
    if not argv:
        return None
    state, rest = argv[0], argv[1:]
    instances, user = 1, None
    while rest and rest[0] != "--":
        if len(rest) < 2:
            return None
        option, value, rest = rest[0], rest[1], rest[2:]
        if option == "--instances" and value.isdigit() and int(value) >= 1:
            instances = int(value)
        elif option == "--user" and _is_user(value):
            uid, gid = value.split(":")
            user = (int(uid), int(gid))
        else:
            return None
    if len(rest) < 2:
        return None
    return _Args(Path(state), instances, user, rest[1:])


def _is_user(value: str) -> bool:
    uid, _, gid = value.partition(":")
    return uid.isdigit() and gid.isdigit() and int(uid) != 0


def main(argv: list[str]) -> int:
    """Run the command under watch; returns its exit status (negative: killed by a signal)."""
    parsed = _parse(argv)
    if parsed is None:
        print(_USAGE, file=sys.stderr)
        return 2
    state, instances = parsed.state, parsed.instances
    state.mkdir(parents=True, exist_ok=True)
    drop: dict[str, Any] = {}
    if parsed.user is not None:
        uid, gid = parsed.user
        drop = {"user": uid, "group": gid, "extra_groups": [], "umask": 0o077}
    children: list[subprocess.Popen[bytes]] = []
    try:
        caches = os.environ.get("BUDGETEER_CACHE_DIRS", "").split(os.pathsep)
        for rank in range(instances):
            env = {**os.environ, "BUDGETEER_NODE_RANK": str(rank)}
            env["BUDGETEER_NUM_NODES"] = str(instances)
            env.pop("BUDGETEER_CACHE_DIRS", None)
            if rank < len(caches) and caches[rank]:  # its instance's disk (see the sandbox)
                env["BUDGETEER_CACHE_DIR"] = caches[rank]
            children.append(subprocess.Popen(parsed.command, env=env, **drop))
    except OSError as exc:  # not executable by the job's user, or gone since the launch check
        print(f"budgeteer shim: cannot start {parsed.command[0]!r}: {exc}", file=sys.stderr)
        for child in children:
            child.kill()
            child.wait()
        _write(state / "exit", "127")
        return 127

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
