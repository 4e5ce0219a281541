"""The ``slurm`` backend: each attempt is an ``sbatch`` job on an existing Slurm cluster.

Offerings map to where Slurm runs them (:class:`SlurmPlacement`, from the config): a partition
(e.g. a preemptible ``spot`` partition and an ``ondemand`` one that is not), optionally a node
feature (``--constraint``) and GPUs (``--gres``). An attempt on n instances asks for n nodes
(``--nodes n --ntasks-per-node 1``) and runs the command once per node through ``srun
--kill-on-bad-exit`` (``BUDGETEER_NODE_RANK`` from ``SLURM_PROCID``), so one failing node ends
the attempt; a one-node attempt runs the command as the batch step itself. (Caveat: when a node
of a multi-node attempt is taken away, srun in the batch step gets SIGTERM and kills its steps
at once, so a multi-node job gets no grace to checkpoint on preemption; one-node jobs do.)
Jobs are submitted ``--no-requeue`` (budgeteer decides what runs again, not Slurm),
``--open-mode=append`` (a log survives), ``--export=NONE`` with the job's environment written
into its batch script (the service's own environment stays with the service), and named
``bgt.<job>.<attempt>`` with the comment ``budgeteer:<job>:<attempt>``: a restarted scheduler
re-attaches by that name (:meth:`SlurmBackend.adopt`), never launching twice.

Status comes from ``squeue --json`` (filtered by id here: 22.05 ignores ``-j`` with
``--json``), read once per poll for every attempt; when Slurm has forgotten a job (after
``MinJobAge``) the last state seen, kept in the attempt's record, stands. Exit codes are
decoded from the raw wait status Slurm reports (``N << 8`` for exit N, the signal number in
the low bits). ``NODE_FAIL``, ``PREEMPTED`` and ``BOOT_FAIL`` — a node taken away under the
job, which is how a spot reclaim reaches Slurm — end the attempt as ``preempted``; the job got
Slurm's SIGTERM, then SIGKILL after ``KillWait``: its notice. The job's own failure stays
``failed`` with its exit code.

``stop`` sends the notice itself (``scancel --signal=TERM``: to every process of a one-node
job; to the steps of a multi-node one, not to its srun, which would kill them at once) and
cancels the job when the grace period has passed. Capacity: ``sinfo`` tells how many of a
partition's nodes are idle; an attempt asking for more is refused as transient
(:class:`CapacityUnavailable`), one asking for more nodes than the partition has at all as
final.

All cluster commands run with a timeout; the cluster is named by ``SLURM_CONF`` (or the
machine's default configuration).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from budgeteer.backends.base import (
    Capabilities,
    CapacityUnavailable,
    Handle,
    LaunchFailed,
    LaunchRequest,
    RunState,
    Status,
    check_pool_max,
    check_request,
    job_variables,
    prepare_checkpoint_dir,
)
from budgeteer.backends.jobuser import JobUser, job_environment
from budgeteer.backends.market import CatalogPrices
from budgeteer.backends.slurm_parse import end_time, epoch_time, exit_code, idle_state, status_from
from budgeteer.clock import Clock
from budgeteer.core.pools import PoolSettings
from budgeteer.errors import BudgeteerError

#: Seconds any Slurm command may take.
COMMAND_TIMEOUT = 30.0
#: Real seconds one ``squeue`` answer is reused for (every attempt's status in one call).
SQUEUE_CACHE_SECONDS = 0.5

_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SUSPENDED"}
_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
_LOST = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"}
#: Real seconds a live job may be missing from ``squeue`` before it counts as lost.
FORGOTTEN_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class SlurmPlacement:
    """Where an offering runs on the cluster."""

    partition: str
    constraint: str | None = None
    gres: str | None = None


class SlurmUnavailable(BudgeteerError):
    """A Slurm command failed or timed out (transient: the controller may be restarting)."""

    transient = True


@dataclass
class _Attempt:
    handle: Handle
    request: LaunchRequest
    record: Path
    notice_at: datetime | None = None
    notice_reason: str = ""
    killed: bool = False
    final: Status | None = None
    last_state: str = "PENDING"
    missing_since: float | None = None  # monotonic: when Slurm stopped listing it


class SlurmBackend(CatalogPrices):
    """Attempts as Slurm batch jobs (see the module docstring)."""

    name = "slurm"
    capabilities = Capabilities(spot=True, preemption_notice=True, multi_node=True)

    def __init__(
        self,
        clock: Clock,
        workdir: Path,
        placements: Mapping[str, SlurmPlacement],
        *,
        grace_seconds: float = 30.0,
        pass_env: tuple[str, ...] = (),
        environ: Mapping[str, str] | None = None,
        run_as: JobUser | None = None,
        pools: Mapping[str, PoolSettings] | None = None,
    ) -> None:
        self.clock = clock
        #: pooled offerings (``max`` and ``batch_wait``; their warm instances are the
        #: partition's idle nodes)
        self.pools = dict(pools or {})
        #: the user jobs run as (``sbatch --uid``; only a root service may): ``None`` → the
        #: service's own user, who is then not root
        self.run_as = run_as
        self.workdir = workdir
        self.placements = dict(placements)
        self.grace_seconds = grace_seconds
        self.pass_env = pass_env
        #: the environment the Slurm tools run with (``SLURM_CONF`` names the cluster)
        self.environ = dict(os.environ if environ is None else environ)
        self._lock = threading.Lock()
        self._attempts: dict[str, _Attempt] = {}
        self._queue: tuple[float, dict[str, dict[str, Any]]] | None = None

    # -- the port -------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Handle:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        placement = self._check(request)
        check_pool_max(self.pools, request, self.live())
        self._check_capacity(request, placement)
        hid = f"{request.job_id}.{request.attempt}"
        state_dir = self.workdir / "attempts" / hid
        state_dir.mkdir(parents=True, exist_ok=True)
        script = state_dir / "job.sh"
        script.write_text(self._script(request))
        script.chmod(0o700)
        log = self.workdir / "logs" / f"{hid}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        user = self.run_as
        if user is not None:  # slurmd opens the log as the job's user
            log.touch(mode=0o600, exist_ok=True)
            os.chown(log, user.uid, user.gid)
            for folder in (log.parent, self.workdir):
                folder.chmod(folder.stat().st_mode | 0o111)
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={_name(request)}",
            f"--comment=budgeteer:{request.job_id}:{request.attempt}",
            f"--partition={placement.partition}",
            f"--nodes={request.instances}",
            "--ntasks-per-node=1",
            "--no-requeue",
            "--open-mode=append",
            f"--output={log}",
            "--export=NONE",
        ]
        if user is not None:  # its own user, starting in its own folder (its home here)
            argv += [f"--uid={user.uid}", f"--gid={user.gid}", f"--chdir={request.checkpoint_dir}"]
        if placement.constraint:
            argv.append(f"--constraint={placement.constraint}")
        if placement.gres:
            argv.append(f"--gres={placement.gres}")
        try:
            out = self._run([*argv, str(script)])
        except SlurmUnavailable as exc:
            raise LaunchFailed(f"sbatch refused the job: {exc}") from None
        slurm_id = out.strip().split(";")[0]
        if not slurm_id.isdigit():
            raise LaunchFailed(f"sbatch answered {out.strip()!r}, not a job id")
        now = self.clock.now()
        handle = Handle.of(self.name, slurm_id, request, _ids(slurm_id, request.instances), now)
        attempt = _Attempt(handle, request, state_dir / "slurm.json")
        _save(attempt)
        with self._lock:
            self._attempts[slurm_id] = attempt
            self._queue = None
        return handle

    def adopt(self, request: LaunchRequest) -> Handle | None:
        """Re-attach by the job's name (after a scheduler restart); ``None`` when Slurm and the
        attempt's record know nothing of it."""
        record = self.workdir / "attempts" / f"{request.job_id}.{request.attempt}" / "slurm.json"
        known = json.loads(record.read_text()) if record.exists() else None
        name = _name(request)
        job = next((j for j in self._squeue().values() if j.get("name") == name), None)
        if job is None and known is None:
            return None
        slurm_id = str(job["job_id"]) if job is not None else str(known["slurm_id"])  # type: ignore[index]
        launched = datetime.fromisoformat(known["launched_at"]) if known else self.clock.now()
        handle = Handle.of(
            self.name, slurm_id, request, _ids(slurm_id, request.instances), launched
        )
        attempt = _Attempt(handle, request, record)
        if known is not None:
            if known.get("notice_at"):
                attempt.notice_at = datetime.fromisoformat(known["notice_at"])
                attempt.notice_reason = str(known.get("notice_reason", ""))
            attempt.last_state = str(known.get("last_state", "PENDING"))
            if known.get("final"):
                attempt.final = status_from(known["final"])
        record.parent.mkdir(parents=True, exist_ok=True)
        _save(attempt)
        with self._lock:
            self._attempts[slurm_id] = attempt
        return handle

    def status(self, handle: Handle) -> Status:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        self.poll()
        with self._lock:
            attempt = self._attempts[handle.id]
            return attempt.final or _live_status(attempt)

    def stop(self, handle: Handle, reason: str) -> None:
        """Send the notice (SIGTERM to every process of the job) now; :meth:`poll` cancels the
        job when the grace period has passed."""
        with self._lock:
            attempt = self._attempts[handle.id]
            if attempt.final is not None or attempt.notice_at is not None:
                return
            attempt.notice_at = self.clock.now()
            attempt.notice_reason = reason
            _save(attempt)
        # it may have ended meanwhile, or the controller is away: the grace cancel follows
        with contextlib.suppress(SlurmUnavailable):
            # one node: every process of the batch step; several: the srun steps, not srun
            scope = ["--full"] if len(handle.instance_ids) == 1 else []
            self._run(["scancel", "--signal=TERM", *scope, handle.id])
        self.poll()

    def poll(self) -> None:
        """Read the queue once and advance every attempt (ends, grace-period cancels)."""
        with self._lock:
            live = [a for a in self._attempts.values() if a.final is None]
        if not live:
            return
        queue = self._squeue()
        now = self.clock.now()
        for attempt in live:
            job = queue.get(attempt.handle.id)
            overdue = attempt.notice_at is not None and now >= attempt.notice_at + timedelta(
                seconds=self.grace_seconds
            )
            if overdue and not attempt.killed and (job is None or job["job_state"] in _RUNNING):
                with contextlib.suppress(SlurmUnavailable):
                    self._run(["scancel", attempt.handle.id])
                attempt.killed = True
            with self._lock:
                self._observe(attempt, job, now)

    def live(self) -> list[Handle]:
        """Attempts that have not ended."""
        self.poll()
        with self._lock:
            return [a.handle for a in self._attempts.values() if a.final is None]

    # -- internals ------------------------------------------------------------------------
    def _check(self, request: LaunchRequest) -> SlurmPlacement:
        check_request(request)
        placement = self.placements.get(request.offering.id)
        if placement is None:
            raise LaunchFailed(
                f"offering {request.offering.id!r} has no Slurm placement "
                "(backend.placements in the config)"
            )
        prepare_checkpoint_dir(request, self.run_as)
        return placement

    # -- pools: the partitions' idle nodes -------------------------------------------------
    def pool_settings(self) -> dict[str, PoolSettings]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        return dict(self.pools)

    def warm_instances(self) -> dict[str, int]:
        """See :class:`~budgeteer.backends.base.WarmPools`: per pooled offering, the idle nodes
        of its partition (``sinfo``) — up, running nothing: a job placed there starts without
        waiting for one. A partition ``sinfo`` cannot list counts none."""
        out: dict[str, int] = {}
        idle_in: dict[str, int] = {}  # one sinfo per partition, however many pools share it
        for oid in self.pools:
            placement = self.placements.get(oid)
            if placement is None:
                continue
            if placement.partition not in idle_in:
                try:
                    states = self._nodes(placement.partition)
                except SlurmUnavailable:
                    states = {}
                idle_in[placement.partition] = sum(1 for st in states.values() if idle_state(st))
            if idle_in[placement.partition]:
                out[oid] = idle_in[placement.partition]
        return out

    def warm_data(self) -> dict[str, dict[str, int]]:
        """See :class:`~budgeteer.backends.base.WarmPools`: none known (the nodes' disks are
        the cluster's)."""
        return {}

    def _nodes(self, partition: str) -> dict[str, str]:
        """Each node of ``partition`` and its state (``sinfo``)."""
        out = self._run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N %t"])
        return dict(line.split()[:2] for line in out.splitlines() if line.strip())

    def _check_capacity(self, request: LaunchRequest, placement: SlurmPlacement) -> None:
        try:
            states = self._nodes(placement.partition)
        except SlurmUnavailable as exc:
            raise CapacityUnavailable(f"{placement.partition}: sinfo failed: {exc}") from None
        if not states:
            raise LaunchFailed(
                f"partition {placement.partition!r} has no nodes (or does not exist)"
            )
        if len(states) < request.instances:
            raise LaunchFailed(
                f"partition {placement.partition!r} has {len(states)} nodes, "
                f"{request.instances} asked for"
            )
        idle = [n for n, state in states.items() if idle_state(state)]
        if len(idle) < request.instances:
            raise CapacityUnavailable(
                f"{request.offering.id}: {len(idle)} of {len(states)} nodes of partition "
                f"{placement.partition!r} are idle, {request.instances} asked for"
            )

    def _script(self, request: LaunchRequest) -> str:
        own = {**job_variables(request), "BUDGETEER_NUM_NODES": str(request.instances)}
        env = job_environment(os.environ, self.pass_env, own)
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
        command = " ".join(shlex.quote(c) for c in request.command)
        head = f"#!/bin/sh\n# written by budgeteer: one attempt of {request.job_id}\n{exports}"
        if request.instances == 1:  # the command itself is the batch step: the notice reaches it
            return f"{head}export BUDGETEER_NODE_RANK=0\nexec {command}\n"
        return (
            f"{head}"
            "export SLURM_EXPORT_ENV=ALL  # steps inherit the environment above\n"
            "exec srun --kill-on-bad-exit=1 --ntasks-per-node=1 "
            "sh -c 'BUDGETEER_NODE_RANK=$SLURM_PROCID; export BUDGETEER_NODE_RANK; "
            'exec "$@"\' budgeteer-rank ' + command + "\n"
        )

    def _squeue(self) -> dict[str, dict[str, Any]]:
        """Every job Slurm knows, by id (cached for ``SQUEUE_CACHE_SECONDS``)."""
        cached = self._queue
        if cached is not None and time.monotonic() - cached[0] < SQUEUE_CACHE_SECONDS:
            return cached[1]
        try:
            jobs = json.loads(self._run(["squeue", "--json"]))["jobs"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise SlurmUnavailable(f"squeue --json answered something unreadable: {exc}") from None
        queue = {str(j["job_id"]): j for j in jobs}
        self._queue = (time.monotonic(), queue)
        return queue

    def _observe(self, attempt: _Attempt, job: dict[str, Any] | None, now: datetime) -> None:
        """Fold one queue reading into the attempt (under the lock)."""
        if job is None:  # forgotten by Slurm before we saw it end (or a controller restart)
            attempt.missing_since = attempt.missing_since or time.monotonic()
            if time.monotonic() - attempt.missing_since > FORGOTTEN_SECONDS:
                attempt.final = Status(
                    RunState.PREEMPTED,
                    None,
                    f"lost: Slurm no longer lists job {attempt.handle.id} (last seen "
                    f"{attempt.last_state.lower()})",
                    None,
                    now,
                )
                _save(attempt)
            return
        attempt.missing_since = None
        state = str(job["job_state"])
        attempt.last_state = state
        if state in _PENDING | _RUNNING:
            _save(attempt)
            return
        attempt.final = self._final(attempt, job, state, now)
        _save(attempt)

    def _final(self, attempt: _Attempt, job: dict[str, Any], state: str, now: datetime) -> Status:
        code = exit_code(job.get("exit_code"))
        started = epoch_time(job.get("start_time"))
        ended = end_time(job.get("end_time"), now)
        if state in _LOST:
            reason = f"{state.lower()}: {job.get('state_reason') or 'node lost'}"
            return Status(RunState.PREEMPTED, code, reason, started, ended)
        if attempt.notice_at is not None:
            return Status(RunState.STOPPED, code, attempt.notice_reason, started, ended)
        if state == "COMPLETED" and code == 0:
            return Status(RunState.SUCCEEDED, 0, "exited 0", started, ended)
        if state == "CANCELLED":
            return Status(RunState.STOPPED, code, "cancelled on the cluster", started, ended)
        why = "exited" if code is not None and code >= 0 else "killed by signal"
        detail = f"{why} {abs(code) if code is not None else '?'}"
        if state not in {"FAILED", "COMPLETED"}:
            detail += f" ({state.lower()}: {job.get('state_reason', '')})"
        return Status(RunState.FAILED, code, detail, started, ended)

    def _run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(
                argv,
                env=self.environ,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmUnavailable(f"{argv[0]}: {exc}") from None
        if done.returncode != 0:
            raise SlurmUnavailable(f"{argv[0]}: {done.stderr.strip() or done.returncode}")
        return done.stdout


def _name(request: LaunchRequest) -> str:
    return f"bgt.{request.job_id}.{request.attempt}"


def _ids(slurm_id: str, instances: int) -> tuple[str, ...]:
    return tuple(f"slurm-{slurm_id}-{i}" for i in range(instances))


def _live_status(attempt: _Attempt) -> Status:
    if attempt.last_state in _RUNNING:
        return Status(RunState.RUNNING)
    return Status(RunState.PROVISIONING)


def _save(attempt: _Attempt) -> None:
    """The attempt's record, atomically (what a restarted scheduler re-attaches from)."""
    final = attempt.final
    record = {
        "slurm_id": attempt.handle.id,
        "launched_at": attempt.handle.launched_at.isoformat(),
        "notice_at": attempt.notice_at.isoformat() if attempt.notice_at else None,
        "notice_reason": attempt.notice_reason,
        "last_state": attempt.last_state,
        "final": None
        if final is None
        else {
            "state": final.state.value,
            "exit_code": final.exit_code,
            "reason": final.reason,
            "started_at": final.started_at.isoformat() if final.started_at else None,
            "ended_at": final.ended_at.isoformat() if final.ended_at else None,
        },
    }
    tmp = attempt.record.with_name(".slurm.json.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, attempt.record)
