"""The ``sandbox`` backend (the embedded default): each attempt is a local process.

Offerings come from the catalog; spot availability and prices from a :class:`SandboxMarket`
(a replayed trace or an interruption rate). Capacity limits per offering and the start-up delay
of each instance are enforced, so queueing and placement are real. When the market revokes a
spot instance the process gets the notice exactly as on real spot — SIGTERM, then, after the
grace period, SIGKILL. Times (start-up, grace) are clock times: with a time-scaled clock a day
of market passes in a minute. The backend advances on every call (``status``, ``poll``).

Each attempt runs under a small shim (:mod:`budgeteer.backends.shim`) in its own session and
keeps its state in ``workdir/attempts/<job>.<attempt>/`` (launch record, shim pid, notice, exit
status), so a sandbox created after a scheduler restart re-attaches to attempts that are still
running (``adopt``) and learns how the others ended.

Pools (``pools``: offering id → :class:`~budgeteer.core.pools.PoolSettings`): an attempt that
ends on a pooled offering, unless the market took it, leaves its instances warm — idle, still
holding the offering's capacity. The next launch there that fits in them starts at once, with
no start-up; an idle instance is given back when :func:`~budgeteer.core.pools.size_pool` says
so (past the pool's ``idle_timeout``, above its ``min``), when the market takes a warm spot
instance, or to make room for a fresh launch. Each idle stretch is handed to the scheduler
(:meth:`SandboxBackend.take_idle`), which bills it to the attempt that left the instance warm.
The warm instances are :mod:`budgeteer.backends.warm`'s (kept in
``workdir/pools.json``: a sandbox restarted on the same ``workdir``, given the catalog's
``offerings``, takes them back still warm, their idle time billed on from where it was).

An attempt on n instances runs the command n times side by side (one process per instance, with
``BUDGETEER_NODE_RANK`` and ``BUDGETEER_NUM_NODES``), takes n instances of the offering's
capacity and ends when all of them have; the notice reaches every instance at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from budgeteer.backends.base import (
    Capabilities,
    CapacityUnavailable,
    Handle,
    IdleTime,
    LaunchFailed,
    LaunchRequest,
    RunState,
    Status,
    check_request,
    job_variables,
)
from budgeteer.backends.jobuser import (
    JobUser,
    blocked_for,
    job_environment,
    prepare_private_folder,
)
from budgeteer.backends.market import REVOCABLE, MarketPrices, SandboxMarket, next_available
from budgeteer.backends.warm import FileDoc, WarmInstances
from budgeteer.clock import Clock
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Market, Offering

log = logging.getLogger(__name__)


@dataclass
class _Attempt:
    handle: Handle
    request: LaunchRequest
    ready_at: datetime
    state_dir: Path
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None  # the shim's pid (its process group) once started
    started_at: datetime | None = None
    notice_at: datetime | None = None
    notice_reason: str = ""
    preempted: bool = False
    final: Status | None = None
    log_path: Path = field(default_factory=Path)


class SandboxBackend(MarketPrices):
    """Local processes on a simulated market (see the module docstring)."""

    name = "sandbox"
    capabilities = Capabilities(spot=True, preemption_notice=True, multi_node=True)

    def __init__(
        self,
        clock: Clock,
        market: SandboxMarket,
        workdir: Path,
        grace_seconds: float = 30.0,
        *,
        run_as: JobUser | None = None,
        pass_env: tuple[str, ...] = (),
        pools: dict[str, PoolSettings] | None = None,
        offerings: Sequence[Offering] = (),
    ) -> None:
        self.clock = clock
        self.market = market
        self.workdir = workdir
        self.grace_seconds = grace_seconds
        #: the unprivileged user jobs run as (``None``: this process's own user, never root
        #: when built from a config — see :mod:`budgeteer.backends.jobuser`)
        self.run_as = run_as
        self.pass_env = pass_env
        self._lock = threading.Lock()
        self._attempts: dict[str, _Attempt] = {}
        self._pools = WarmInstances(pools or {}, FileDoc(workdir / "pools.json"))
        self._offerings = {o.id: o for o in offerings}
        for oid, pool in (pools or {}).items():
            if (pool.minimum or pool.warm) and oid not in self._offerings:
                raise ValueError(f"pool {oid}: boots for its floor, but is not in offerings")
        self.warm_starts: set[str] = set()  # attempts (handle ids) started on warm instances
        self._pools.restore({o.id: o for o in offerings}, clock.now())

    # -- the port -------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Handle:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        self._check(request)
        with self._lock:
            self._advance()
            offering = request.offering
            now = self.clock.now()
            taken_at = request.taken_at(now)
            reused = self._pools.take(
                offering.id, request.instances, taken_at, request.data_uri, request.team
            )
            warm = reused is not None
            in_use = self._busy(offering.id)
            # the offering's capacity, and its pool's max: the backend holds to both itself
            # (the planner plans within them; a launch beyond them is refused, not run)
            caps = (offering.max_instances, self._pools.maximum(offering.id))
            limits = [x for x in caps if x is not None]  # 0 is a limit too
            limit = min(limits) if limits else None
            if not warm and limit is not None and in_use + request.instances > limit:
                pool = " (the pool's max)" if limit != offering.max_instances else ""
                raise CapacityUnavailable(
                    f"{offering.id}: {in_use} of {limit} instances are in use, "
                    f"{request.instances} asked for{pool}"
                )
            if not warm and not self.market.available(offering, now):
                if offering.market is Market.ON_PREM:  # a pool's calendar is public: say when
                    raise CapacityUnavailable(
                        f"{offering.id}: the pool is closed at {now:%Y-%m-%d %H:%M}",
                        next_available(self.market, offering, now),
                    )
                raise CapacityUnavailable(f"{offering.id}: no spot capacity at {now:%H:%M:%S}")
            if not warm and limit is not None:  # idle instances hold capacity: give some back
                # (only for a launch that goes ahead: a refused one leaves the pool as it was)
                short = in_use + self._pools.held(offering.id) + request.instances - limit
                self._pools.make_room(offering.id, short, now)
            hid = f"{request.job_id}.{request.attempt}"
            ids = reused or _ids(request)
            handle = Handle.of(self.name, hid, request, ids, now)
            state_dir = self.workdir / "attempts" / hid
            state_dir.mkdir(parents=True, exist_ok=True)
            ready_at = now + timedelta(seconds=0.0 if warm else offering.startup_seconds)
            if warm:
                self.warm_starts.add(hid)
            _record(
                state_dir,
                launched_at=now.isoformat(),
                ready_at=ready_at.isoformat(),
                instance_ids=list(ids),
            )
            self._attempts[hid] = _Attempt(
                handle, request, ready_at, state_dir, log_path=self.workdir / "logs" / f"{hid}.log"
            )
            self._advance()
            return handle

    def adopt(self, request: LaunchRequest) -> Handle | None:
        """Re-attach to an attempt an earlier sandbox launched (after a scheduler restart);
        ``None`` if there is no trace of it."""
        hid = f"{request.job_id}.{request.attempt}"
        state_dir = self.workdir / "attempts" / hid
        if not (state_dir / "launch.json").exists():
            return None
        record = json.loads((state_dir / "launch.json").read_text())
        launched = datetime.fromisoformat(record["launched_at"])
        ids = tuple(str(i) for i in record.get("instance_ids", ())) or _ids(request)
        handle = Handle.of(self.name, hid, request, ids, launched)
        attempt = _Attempt(
            handle,
            request,
            datetime.fromisoformat(record["ready_at"]),
            state_dir,
            log_path=self.workdir / "logs" / f"{hid}.log",
        )
        if "started_at" in record:
            attempt.started_at = datetime.fromisoformat(record["started_at"])
            attempt.pid = int(record["shim_pid"])
        if "notice_at" in record:
            attempt.notice_at = datetime.fromisoformat(record["notice_at"])
            attempt.notice_reason = str(record["notice_reason"])
            attempt.preempted = bool(record["preempted"])
        with self._lock:
            self._attempts[hid] = attempt
            self._advance()
        return handle

    def status(self, handle: Handle) -> Status:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        with self._lock:
            self._advance()
            return self._status(self._attempts[handle.id])

    def stop(self, handle: Handle, reason: str) -> None:
        """See :class:`~budgeteer.backends.base.ComputeBackend`."""
        with self._lock:
            attempt = self._attempts[handle.id]
            if attempt.final is None and attempt.notice_at is None:
                self._notify(attempt, reason, preempted=False)
            self._advance()

    def poll(self) -> None:
        """Advance every attempt (start, notice, kill, reap)."""
        with self._lock:
            self._advance()

    def live(self) -> list[Handle]:
        """Attempts that have not ended."""
        with self._lock:
            self._advance()
            return [a.handle for a in self._attempts.values() if a.final is None]

    # -- internals ------------------------------------------------------------------------
    def _check(self, request: LaunchRequest) -> None:
        check_request(request)
        exe = request.command[0]
        found = shutil.which(exe) or (exe if Path(exe).is_file() else None)
        if found is None:
            raise LaunchFailed(f"command not found: {exe!r}")
        if self.run_as is not None:
            blocked = blocked_for(self.run_as, Path(found))
            if blocked is not None:
                raise LaunchFailed(
                    f"command {exe!r} cannot be run by the jobs' user {self.run_as.name!r}: "
                    f"{blocked} is closed to it (backend.run_as)"
                )
        try:
            prepare_private_folder(request.checkpoint_dir, self.run_as)
            if self.run_as is not None:
                return  # the folder is the job's, made so just now
            probe = request.checkpoint_dir / ".budgeteer-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise LaunchFailed(
                f"checkpoint dir {request.checkpoint_dir} is not writable: {exc.strerror}"
            ) from None

    # -- pools ----------------------------------------------------------------------------
    def pool_settings(self) -> dict[str, PoolSettings]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        return dict(self._pools.settings)

    def warm_instances(self) -> dict[str, int]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        if not self._pools.settings:
            return {}
        with self._lock:  # as the loop last advanced it (API threads read this too)
            return self._pools.counts(self.clock.now())

    def warm_data(self) -> dict[str, dict[str, int]]:
        """See :class:`~budgeteer.backends.base.WarmPools`."""
        if not self._pools.settings:
            return {}
        with self._lock:
            return self._pools.data(self.clock.now())

    def take_idle(self) -> list[IdleTime]:
        """See :class:`~budgeteer.backends.base.IdleBilling`."""
        if not self._pools.settings:
            return []
        with self._lock:
            return self._pools.take_billed()

    def _ended(self, a: _Attempt) -> None:
        """An attempt just ended: its instances go warm to its offering's pool, if it has one
        and the market did not take them."""
        req = a.request
        final = a.final
        if a.preempted or a.started_at is None:
            return
        at = final.ended_at if final is not None and final.ended_at else self.clock.now()
        ids = a.handle.instance_ids
        self._pools.left(req.offering, req.job_id, req.attempt, ids, at, req.data_uri, req.team)

    def release_idle(self) -> None:
        """See :class:`~budgeteer.backends.base.IdleBilling`."""
        if not self._pools.settings:
            return
        with self._lock:  # what the loop's reconcile saw: ends noticed later go next cycle
            now = self.clock.now()
            for oid, wanted in self._pools.release(self._busy, now).items():
                self._boot(self._offerings[oid], wanted, now)
            self._pools.take_released()  # a sandbox instance ends when it is given back

    def _boot(self, offering: Offering, wanted: int, now: datetime) -> None:
        """Boot up to ``wanted`` instances of a pooled offering with no job (for its pool's
        floor): as many as its capacity leaves room for, none while its market has none;
        ready after its start-up."""
        room = wanted
        if offering.max_instances is not None:
            used = self._busy(offering.id) + self._pools.held(offering.id)
            room = min(wanted, offering.max_instances - used)
        if room <= 0 or not self.market.available(offering, now):
            return
        ids = tuple(f"boot-{uuid.uuid4().hex[:12]}" for _ in range(room))
        self._pools.booted(offering, ids, now, now + timedelta(seconds=offering.startup_seconds))
        log.info("pool %s: booted %d instance(s) with no job for its floor", offering.id, room)

    def _busy(self, offering_id: str) -> int:
        return sum(
            a.request.instances
            for a in self._attempts.values()
            if a.final is None and a.request.offering.id == offering_id
        )

    def _taken_back(self, offering: Offering, now: datetime) -> bool:
        """Whether the market took ``offering``'s warm instances (spot, or a lent pool)."""
        return offering.market in REVOCABLE and not self.market.available(offering, now)

    def _advance(self) -> None:
        now = self.clock.now()
        for attempt in self._attempts.values():
            if attempt.final is None:
                self._step(attempt, now)
                if attempt.final is not None:
                    self._ended(attempt)
        if self._pools.counts():
            self._pools.revoked(lambda o: self._taken_back(o, now), now)

    def _step(self, a: _Attempt, now: datetime) -> None:
        offering = a.request.offering
        spot = offering.market in REVOCABLE  # spot, or a pool lent out on a calendar
        lost = "the pool closed" if offering.market is Market.ON_PREM else "spot capacity"
        if a.pid is None:
            if a.notice_at is not None:  # stopped before it started
                a.final = Status(RunState.STOPPED, None, a.notice_reason, None, now)
            elif spot and not self.market.available(offering, now):
                a.preempted = True
                a.final = Status(
                    RunState.PREEMPTED, None, f"{lost} lost while provisioning", None, now
                )
            elif now >= a.ready_at:
                self._start(a, now)
            return
        if a.notice_at is None and spot and not self.market.available(offering, now):
            self._notify(a, f"{lost} revoked", preempted=True)
        code = _exit_code(a)
        if code is None:
            if a.notice_at is not None and now >= a.notice_at + timedelta(
                seconds=self.grace_seconds
            ):
                _signal(a.pid, signal.SIGKILL, group=True)
                code = _wait_killed(a)
            else:
                return
        a.final = self._outcome(a, code, now)

    def _start(self, a: _Attempt, now: datetime) -> None:
        req = a.request
        own = job_variables(req)
        if self.run_as is not None:  # its own folder is its home and working folder
            own |= {"HOME": str(req.checkpoint_dir), "USER": self.run_as.name}
        # each instance's disk, kept as long as the instance: what a job leaves there (its
        # dataset, say) is still there for the next job on the instance when it is kept warm
        caches = [self.workdir / "instances" / iid / "cache" for iid in a.handle.instance_ids]
        try:
            for cache in caches:
                prepare_private_folder(cache, self.run_as)
            own["BUDGETEER_CACHE_DIRS"] = os.pathsep.join(str(c) for c in caches)
        except OSError as exc:  # the job runs without one (it is a saving, not a need)
            log.warning("no cache folder for %s: %s", a.handle.id, exc)
        env = job_environment(os.environ, self.pass_env, own)
        a.log_path.parent.mkdir(parents=True, exist_ok=True)
        shim = [sys.executable, "-m", "budgeteer.backends.shim", str(a.state_dir)]
        shim += ["--instances", str(req.instances)]
        if self.run_as is not None:
            shim += ["--user", self.run_as.spec()]
        command = list(req.command)
        if self.run_as is not None and "/" in command[0]:  # it starts elsewhere: pin the path
            command[0] = os.path.abspath(command[0])
        with open(a.log_path, "ab") as out:
            a.process = subprocess.Popen(
                [*shim, "--", *command],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # as another user, its own folder (it may not act in the service's); else the
                # service's working folder, where relative paths of a spec were written from
                cwd=req.checkpoint_dir if self.run_as is not None else None,
            )
        a.pid = a.process.pid
        a.started_at = now
        _record(a.state_dir, started_at=now.isoformat(), shim_pid=a.pid)

    def _notify(self, a: _Attempt, reason: str, *, preempted: bool) -> None:
        a.notice_at = self.clock.now()
        a.notice_reason = reason
        a.preempted = preempted
        _record(
            a.state_dir,
            notice_at=a.notice_at.isoformat(),
            notice_reason=reason,
            preempted=preempted,
        )
        if a.pid is not None and _exit_code(a) is None:
            _signal(a.pid, signal.SIGTERM, group=False)  # the shim forwards it

    def _outcome(self, a: _Attempt, code: int, now: datetime) -> Status:
        if a.preempted:
            return Status(RunState.PREEMPTED, code, a.notice_reason, a.started_at, now)
        if a.notice_at is not None:
            return Status(RunState.STOPPED, code, a.notice_reason, a.started_at, now)
        if code == 0:
            return Status(RunState.SUCCEEDED, 0, "exited 0", a.started_at, now)
        return Status(RunState.FAILED, code, f"exited {code}", a.started_at, now)

    @staticmethod
    def _status(a: _Attempt) -> Status:
        if a.final is not None:
            return a.final
        if a.pid is None:
            return Status(RunState.PROVISIONING)
        return Status(RunState.RUNNING, started_at=a.started_at)


def _ids(request: LaunchRequest) -> tuple[str, ...]:
    hid = f"{request.job_id}.{request.attempt}"
    return tuple(f"{hid}-{i}" for i in range(request.instances))


def _record(state_dir: Path, **fields: object) -> None:
    """Merge ``fields`` into the attempt's launch record, atomically."""
    path = state_dir / "launch.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    record.update(fields)
    tmp = path.with_name(".launch.json.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _exit_code(a: _Attempt) -> int | None:
    """The attempt's exit status if it has ended, else ``None`` (also for adopted attempts,
    whose shim is not our child: then the shim's exit file tells, or its absence)."""
    if a.process is not None:
        code = a.process.poll()
        if code is not None:
            exit_file = a.state_dir / "exit"
            return int(exit_file.read_text()) if exit_file.exists() else code
        return None
    exit_file = a.state_dir / "exit"
    if exit_file.exists():
        return int(exit_file.read_text())
    if a.pid is not None and not _alive(a.pid):
        return -9  # gone without a word: killed together with its shim
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pid: int | None, sig: int, *, group: bool) -> None:
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):  # it is gone already: nothing to signal
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _wait_killed(a: _Attempt) -> int:
    if a.process is not None:
        a.process.wait()
    return -9
