"""A real Slurm on this machine, to try the Slurm backend and to test it: slurmctld and two
slurmd (nodes ``n1``, ``n2``) in a short temporary folder on free ports, ``auth/none``;
partitions ``spot`` (preemptible) and ``ondemand``. Not a production install: it runs as root
with no authentication.

``python -m budgeteer.backends.slurm_local up`` starts one and prints the ``SLURM_CONF`` to
export; ``… down DIR`` stops it (``scripts/slurm-local.sh`` wraps both). The tests use
:class:`LocalSlurm` directly. Every command has a hard timeout; ``stop`` cancels every job,
waits for an empty queue, then stops each slurmd and last slurmctld (the other order leaves
slurmstepd retrying). Settings and traps measured on this machine: Slurm 22.05 accepts
``auth/none``; a requeued job waits ``cred_expire`` + 1 s; ``squeue --json`` ignores ``-j``; keep
the folder short (slurmd's socket path has a 108-character limit)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONF = """\
ClusterName=bgt
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={p0}
SlurmdPort={p1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
AuthInfo=cred_expire=10
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=1
KillWait={kill_wait}
MinJobAge=600
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port={p1} CPUs=1 RealMemory=1000
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port={p2} CPUs=1 RealMemory=1000
PartitionName=spot Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=ondemand Nodes=n1,n2 MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
"""

TIMEOUT = 30


def available() -> bool:
    """Whether the Slurm daemons and tools are installed."""
    return all(shutil.which(t) for t in ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalSlurm:
    """Start with :meth:`start`, stop with :meth:`stop` (see the module docstring)."""

    def __init__(self, kill_wait: int = 10, folder: Path | None = None) -> None:
        self.dir = folder or Path(tempfile.mkdtemp(prefix="bs", dir="/tmp"))  # short: sockets
        self.dir.chmod(0o755)
        self.conf = self.dir / "slurm.conf"
        self.kill_wait = kill_wait
        self.daemons: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> LocalSlurm:
        """Write the config, start slurmctld then both slurmd; wait until both nodes are idle."""
        for sub in ("state", "log", "run", "spool/n1", "spool/n2"):
            (self.dir / sub).mkdir(parents=True)
        self.conf.write_text(
            CONF.format(d=self.dir, p0=_port(), p1=_port(), p2=_port(), kill_wait=self.kill_wait)
        )
        self._daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)])
        time.sleep(0.5)
        for node in ("n1", "n2"):
            self._daemon(["slurmd", "-D", "-N", node, "-f", str(self.conf)])
        self.wait_for(lambda: self.node_states() == {"n1": "idle", "n2": "idle"}, 30)
        return self

    def _daemon(self, argv: list[str]) -> None:
        with open(self.dir / "log" / f"{argv[0]}-{len(self.daemons)}.out", "wb") as log:
            self.daemons.append(
                subprocess.Popen(
                    argv,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # outlives `up` when run from the command line
                )
            )
        (self.dir / "run" / "daemons").write_text(" ".join(str(d.pid) for d in self.daemons))

    def run(self, *argv: str) -> str:
        """A Slurm client command against this cluster; its output."""
        done = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` as ``sinfo`` reports it (``idle``, ``alloc``, ``down`` …)."""
        try:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t")
        except (RuntimeError, subprocess.TimeoutExpired):
            return {}
        return dict(line.split()[:2] for line in out.splitlines() if line.strip())

    def jobs(self) -> list[dict[str, object]]:
        """Every job ``squeue --json`` knows."""
        return list(json.loads(self.run("squeue", "--json"))["jobs"])

    def down(self, node: str, reason: str = "spot-preempted") -> None:
        """Take a node down (a spot reclaim, to Slurm)."""
        self.run("scontrol", "update", f"nodename={node}", "state=DOWN", f"reason={reason}")

    def resume(self, node: str) -> None:
        """Bring a node back."""
        self.run("scontrol", "update", f"nodename={node}", "state=RESUME")

    @staticmethod
    def wait_for(check: object, seconds: float) -> None:
        """Poll ``check()`` until true; AssertionError after ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if check():  # type: ignore[operator]
                return
            time.sleep(0.2)
        raise AssertionError("timed out waiting for the Slurm cluster")

    def stop(self) -> None:
        """Cancel everything, wait for an empty queue, stop the slurmd, then slurmctld."""
        try:
            self.run("scancel", "--full", "--user", "root")
            self.wait_for(lambda: not [j for j in self.jobs() if j["job_state"] in _LIVE], 60)
        except (RuntimeError, AssertionError, subprocess.TimeoutExpired, json.JSONDecodeError):
            pass  # stop the daemons regardless
        for proc in [*self.daemons[1:], self.daemons[0]] if self.daemons else []:
            proc.terminate()
            try:
                proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=TIMEOUT)
        shutil.rmtree(self.dir, ignore_errors=True)


_LIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"}


def _down(folder: Path) -> None:
    """Stop the cluster started by ``up`` in ``folder`` (by the pids it recorded)."""
    cluster = LocalSlurm(folder=folder)
    with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
        cluster.run("scancel", "--full", "--user", "root")
    pids = [int(p) for p in (folder / "run" / "daemons").read_text().split()]
    for pid in [*pids[1:], *pids[:1]]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
    shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str]) -> int:
    """``up`` | ``down FOLDER``."""
    if argv == ["up"]:
        cluster = LocalSlurm().start()
        print(f"export SLURM_CONF={cluster.conf}")
        print(f"# stop with: python -m budgeteer.backends.slurm_local down {cluster.dir}")
        return 0
    if len(argv) == 2 and argv[0] == "down":
        _down(Path(argv[1]))
        return 0
    print("usage: python -m budgeteer.backends.slurm_local up | down FOLDER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
