"""What runs on each EC2 instance of an attempt: the user data (see
:func:`budgeteer.backends.ec2.render_user_data`) starts ``python -m budgeteer.backends.ec2_agent``
with the job's command after ``--``.

The agent

1. asks the instance metadata service (IMDSv2: a session token, then ``meta-data/…``) for its
   instance id and launch index (the rank of a multi-instance attempt);
2. brings the job's checkpoint down from S3 (``s3://BUCKET/CHECKPOINT_PREFIX/``) into a local
   folder and runs the command there with ``BUDGETEER_CHECKPOINT_DIR`` pointing at it,
   ``BUDGETEER_CHECKPOINT_S3`` naming where it is kept, ``BUDGETEER_NODE_RANK`` and
   ``BUDGETEER_NUM_NODES``;
3. every ``--poll`` seconds looks for the notice — the spot interruption (``meta-data/spot/
   instance-action``, which AWS sets two minutes before it takes the instance; AWS advises
   polling every 5 s) or budgeteer's stop (an object ``ATTEMPT_PREFIX/stop`` in S3) — and on the
   first sends SIGTERM to the job's process group (the job checkpoints and exits), SIGKILL after
   ``--grace`` seconds;
4. every ``--sync`` seconds, and when the job has ended, rank 0 puts the checkpoint folder's new
   or changed files back to S3;
5. writes ``ATTEMPT_PREFIX/exit-RANK.json`` (``{"code", "notice", "ended_at", "instance_id"}``)
   — what the backend reads to say succeeded, failed, stopped or preempted — and, with
   ``--shutdown``, powers the instance off (its shutdown behaviour is *terminate*: billing ends).

A **pooled** instance (``--pool-prefix``; the user data carries no job) is kept warm between
jobs: the backend puts each job it gives the instance in ``POOL_PREFIX/INSTANCE_ID/next.json``
(:class:`Assignment`: the attempt's and checkpoint's prefixes, the rank, the job's variables and
command); the agent takes it, runs it as above, and waits for the next. It leaves — and, with
``--shutdown``, powers off — when ``POOL_PREFIX/INSTANCE_ID/release`` appears (the backend gives
the instance back; it also terminates it), when the spot instance-action is set, or after
``--warm-limit`` seconds with nothing to run.

It needs the standard library and boto3 (the AMI's budgeteer install has both); the S3 endpoint
is boto3's own (``AWS_ENDPOINT_URL`` where set, as in the tests against moto).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The instance metadata service (overridable for tests: ``BUDGETEER_IMDS_URL``).
IMDS_URL = "http://169.254.169.254"


class Imds:
    """IMDSv2: a PUT for a session token, then GETs carrying it; a 404 is "not set"."""

    def __init__(self, base: str, timeout: float = 2.0) -> None:
        self.base = base.rstrip("/")
        self.timeout = timeout
        self._token: tuple[str, float] | None = None

    def _session(self) -> str:
        if self._token is None or self._token[1] < time.monotonic():
            req = urllib.request.Request(
                f"{self.base}/latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"},
            )
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                self._token = (resp.read().decode(), time.monotonic() + 21000)
        return self._token[0]

    def get(self, path: str) -> str | None:
        """``latest/meta-data/PATH``, or ``None`` when not set (404) or not reachable."""
        try:
            req = urllib.request.Request(
                f"{self.base}/latest/meta-data/{path}",
                headers={"X-aws-ec2-metadata-token": self._session()},
            )
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return str(resp.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # the token expired early
                self._token = None
            return None
        except (urllib.error.URLError, OSError):
            return None


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _exit_code(returncode: int) -> int:
    """A signal's death as the shell reports it (128 + the signal)."""
    return 128 - returncode if returncode < 0 else returncode


class Checkpoints:
    """The job's checkpoint folder mirrored to ``s3://bucket/prefix/`` (files by size and
    modification time; rank 0 puts, every rank gets)."""

    def __init__(self, s3: Any, bucket: str, prefix: str, folder: Path) -> None:
        self.s3, self.bucket, self.prefix, self.folder = s3, bucket, prefix.rstrip("/"), folder
        self._sent: dict[str, tuple[int, int]] = {}

    def get(self) -> int:
        """Bring the checkpoint down; returns how many files."""
        self.folder.mkdir(parents=True, exist_ok=True)
        count = 0
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + "/"
        ):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(self.prefix) + 1 :]
                target = (self.folder / rel).resolve()
                if not rel or self.folder.resolve() not in target.parents:
                    continue  # never outside the folder
                target.parent.mkdir(parents=True, exist_ok=True)
                self.s3.download_file(self.bucket, obj["Key"], str(target))
                st = target.stat()
                self._sent[rel] = (st.st_size, st.st_mtime_ns)
                count += 1
        return count

    def put(self) -> int:
        """Put new or changed files; returns how many."""
        count = 0
        for path in sorted(self.folder.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            rel = path.relative_to(self.folder).as_posix()
            st = path.stat()
            if self._sent.get(rel) == (st.st_size, st.st_mtime_ns):
                continue
            self.s3.upload_file(str(path), self.bucket, f"{self.prefix}/{rel}")
            self._sent[rel] = (st.st_size, st.st_mtime_ns)
            count += 1
        return count


def _notice(imds: Imds, s3: Any, bucket: str, attempt_prefix: str) -> str | None:
    """``interruption`` (the spot instance-action is set), ``stop`` (budgeteer's), or None."""
    action = imds.get("spot/instance-action")
    if action:
        return "interruption"
    try:
        s3.head_object(Bucket=bucket, Key=f"{attempt_prefix}/stop")
    except Exception:  # 404, or S3 not reachable this time: look again next poll
        return None
    return "stop"


@dataclass(frozen=True, slots=True)
class Assignment:
    """One job for this instance: where its attempt and checkpoint live in S3, its rank among
    the attempt's ``nodes``, the job's own variables and its command."""

    attempt_prefix: str
    checkpoint_prefix: str
    nodes: int
    rank: int
    env: dict[str, str]
    command: list[str]

    @classmethod
    def parse(cls, text: str) -> Assignment:
        """An assignment from its JSON (``ValueError`` naming the field that is wrong)."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("an assignment is a JSON object")
        for name in ("attempt_prefix", "checkpoint_prefix"):
            if not isinstance(doc.get(name), str) or not doc[name]:
                raise ValueError(f"{name}: a non-empty string is needed")
        for name in ("nodes", "rank"):
            if not isinstance(doc.get(name), int) or doc[name] < 0:
                raise ValueError(f"{name}: a whole number ≥ 0 is needed")
        env, command = doc.get("env"), doc.get("command")
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError("env: an object of strings is needed")
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(c, str) for c in command)
        ):
            raise ValueError("command: a non-empty list of strings is needed")
        return cls(
            doc["attempt_prefix"],
            doc["checkpoint_prefix"],
            doc["nodes"],
            doc["rank"],
            env,
            command,
        )


def run(args: argparse.Namespace) -> int:
    """The agent's life (see the module docstring): one job, or — with ``--pool-prefix`` —
    job after job as they are assigned; returns the (last) job's exit code."""
    import boto3  # noqa: PLC0415 - on the instance (the aws extra)

    imds = Imds(os.environ.get("BUDGETEER_IMDS_URL", IMDS_URL))
    instance_id = imds.get("instance-id") or ""
    s3 = boto3.client("s3")
    if args.pool_prefix is None:
        rank = int(imds.get("ami-launch-index") or 0)
        job = Assignment(
            args.attempt_prefix, args.checkpoint_prefix, args.nodes, rank, {}, args.command
        )
        code = run_job(args, imds, s3, instance_id, job)
    else:
        code = serve_pool(args, imds, s3, instance_id)
    if args.shutdown:
        subprocess.run(["shutdown", "-h", "now"], check=False)
    return code


def serve_pool(args: argparse.Namespace, imds: Imds, s3: Any, instance_id: str) -> int:
    """A pooled instance: waits for ``POOL_PREFIX/INSTANCE/next.json``, runs that job, and
    waits again; leaves when ``POOL_PREFIX/INSTANCE/release`` appears, when the spot
    instance-action is set, or after ``--warm-limit`` seconds with nothing to do (a scheduler
    gone for good must not leave instances running forever)."""
    mailbox = f"{args.pool_prefix.rstrip('/')}/{instance_id}"
    code = 0
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < args.warm_limit:
        if _exists(s3, args.bucket, f"{mailbox}/release") or imds.get("spot/instance-action"):
            break
        text = _read(s3, args.bucket, f"{mailbox}/next.json")
        if text is None:
            time.sleep(args.poll)
            continue
        _quietly(lambda: s3.delete_object(Bucket=args.bucket, Key=f"{mailbox}/next.json"))
        try:
            job = Assignment.parse(text)
        except ValueError as exc:  # nothing to run: say so where the attempt's exit goes
            print(f"budgeteer agent: a malformed assignment: {exc}", file=sys.stderr)
            _refused(s3, args.bucket, text, instance_id)
            continue
        code = run_job(args, imds, s3, instance_id, job)
        idle_since = time.monotonic()
    return code


def _refused(s3: Any, bucket: str, text: str, instance_id: str) -> None:
    """An assignment that cannot run: exit code 2 in its attempt's exit record when it names
    the attempt and the rank (the backend then calls the attempt failed, not running for
    ever); nothing when it does not."""
    try:
        doc = json.loads(text)
        prefix, rank = doc["attempt_prefix"], int(doc["rank"])
    except (ValueError, TypeError, KeyError):
        return
    if not isinstance(prefix, str) or not prefix or rank < 0:
        return
    record = {"code": 2, "notice": None, "ended_at": _now(), "instance_id": instance_id}
    _quietly(
        lambda: s3.put_object(
            Bucket=bucket, Key=f"{prefix}/exit-{rank}.json", Body=json.dumps(record).encode()
        )
    )


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except Exception:  # 404, or S3 not reachable this time: look again next poll
        return False
    return True


def _read(s3: Any, bucket: str, key: str) -> str | None:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception:  # not there (yet), or S3 not reachable this time
        return None
    return str(body.decode("utf-8", "replace"))


def run_job(
    args: argparse.Namespace, imds: Imds, s3: Any, instance_id: str, job: Assignment
) -> int:
    """Run one job to its end (steps 2–5 of the module docstring); returns its exit code."""
    name = job.env.get("BUDGETEER_JOB_ID") or os.environ.get("BUDGETEER_JOB_ID", "job")
    folder = Path(args.workdir) / name
    checkpoints = Checkpoints(s3, args.bucket, job.checkpoint_prefix, folder)
    checkpoints.get()
    cache = Path(args.workdir) / "cache" / (instance_id or "instance")
    cache.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ) | job.env
    env |= {
        "BUDGETEER_CHECKPOINT_DIR": str(folder),
        "BUDGETEER_PROGRESS_FILE": str(folder / "progress.jsonl"),
        "BUDGETEER_NODE_RANK": str(job.rank),
        "BUDGETEER_NUM_NODES": str(job.nodes),
        # where the folder is kept between attempts (the agent syncs it; a job that writes
        # large checkpoints itself may put them there directly)
        "BUDGETEER_CHECKPOINT_S3": f"s3://{args.bucket}/{job.checkpoint_prefix}/",
        # the instance's own disk, kept while the instance lives: what a job leaves there (its
        # dataset, say) is still there for the next job when the instance is kept warm
        "BUDGETEER_CACHE_DIR": str(cache),
    }
    env.pop("BUDGETEER_IMDS_URL", None)
    proc = subprocess.Popen(job.command, env=env, cwd=folder, start_new_session=True)
    notice: str | None = None
    noticed_at = 0.0
    last_sync = time.monotonic()
    while proc.poll() is None:
        time.sleep(args.poll)
        if notice is None:
            notice = _notice(imds, s3, args.bucket, job.attempt_prefix)
            if notice is not None:
                noticed_at = time.monotonic()
                _signal(proc, signal.SIGTERM)
        elif time.monotonic() - noticed_at > args.grace:
            _signal(proc, signal.SIGKILL)
        if job.rank == 0 and time.monotonic() - last_sync >= args.sync:
            _quietly(checkpoints.put)
            last_sync = time.monotonic()
    code = _exit_code(proc.returncode)
    if job.rank == 0:
        _quietly(checkpoints.put)
    record = {"code": code, "notice": notice, "ended_at": _now(), "instance_id": instance_id}
    s3.put_object(
        Bucket=args.bucket,
        Key=f"{job.attempt_prefix}/exit-{job.rank}.json",
        Body=json.dumps(record).encode(),
    )
    return code


def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _quietly(put: Any) -> None:
    try:
        put()
    except Exception as exc:  # a failed sync is tried again; the job goes on
        print(f"budgeteer agent: {exc}", file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    """The agent's command line (the user data writes it)."""
    p = argparse.ArgumentParser(prog="python -m budgeteer.backends.ec2_agent")
    p.add_argument("--bucket", required=True)
    p.add_argument("--attempt-prefix")
    p.add_argument("--checkpoint-prefix")
    p.add_argument("--pool-prefix", help="a pooled instance: its jobs are assigned here")
    p.add_argument("--warm-limit", type=float, default=3600.0)
    p.add_argument("--workdir", required=True)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--grace", type=float, default=110.0)
    p.add_argument("--poll", type=float, default=5.0)
    p.add_argument("--sync", type=float, default=60.0)
    p.add_argument("--shutdown", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parser().parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.pool_prefix is None and not (
        args.command and args.attempt_prefix and args.checkpoint_prefix
    ):
        print(
            "budgeteer agent: --attempt-prefix, --checkpoint-prefix and a command after -- "
            "(or --pool-prefix)",
            file=sys.stderr,
        )
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
