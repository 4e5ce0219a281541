"""A stand-in for AWS that the EC2 backend's tests run against, and what each part proves.

- **moto in server mode** (``moto_server`` on 127.0.0.1, a subprocess): real boto3 over real HTTP
  for EC2 (RunInstances, DescribeInstances, TerminateInstances, tags, user data), S3 and SQS. It
  checks request shapes and keeps state; it does not run anything, interrupt, or run out of
  capacity.
- **The instances' side** (:class:`Instances`): a thread that watches moto for instances of the
  deployment, reads each one's user data back from EC2 (``DescribeInstanceAttribute``) and runs
  it with ``bash`` as a local process — so the rendered bootstrap and the agent really run, talk
  to S3 (moto) and poll
- **a metadata service** (:class:`FakeImds`): IMDSv2 (token, then ``meta-data/instance-id``,
  ``ami-launch-index``, ``spot/instance-action``) per instance, on 127.0.0.1.
- **An interruption** (:meth:`Instances.interrupt`) is what AWS does: the EventBridge event
  ``EC2 Spot Instance Interruption Warning`` into the SQS queue, the instance-action in the
  metadata, and after the notice the instance terminated.

What this cannot prove: AWS's capacity, prices, real IAM, real AMIs booting, cloud-init running
the user data (here bash runs it), real network timing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from base64 import b64decode
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

try:  # the aws-test extra; conftest's moto_url fails (CI) or skips without it
    import boto3
    from botocore.awsrequest import AWSResponse
except ImportError:  # pragma: no cover
    boto3 = None

from budgeteer.backends.ec2 import Ec2Backend, Ec2Settings
from budgeteer.clock import SystemClock
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Offering

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def moto_server_command() -> list[str] | None:
    """How to start moto's server here, or ``None`` when moto is not installed."""
    try:
        import moto.server  # noqa: F401, PLC0415
    except ImportError:
        return None
    exe = Path(sys.executable).with_name("moto_server")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on a free port; yields its URL."""
    command = moto_server_command()
    assert command is not None
    port = free_port()
    proc = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("moto_server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class FakeImds:
    """IMDSv2 on 127.0.0.1 for many instances: ``/<instance-id>/latest/...``."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, str]] = {}
        self.token = "imds-token"
        world = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_PUT(self) -> None:
                if self.path.endswith("/latest/api/token") and self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    self._send(200, world.token)
                else:
                    self._send(400, "")

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") != world.token:
                    self._send(401, "")
                    return
                parts = self.path.strip("/").split("/", 3)  # iid, latest, meta-data, path
                if len(parts) < 4:
                    self._send(404, "")
                    return
                value = world.data.get(parts[0], {}).get(parts[3])
                self._send(404, "") if value is None else self._send(200, value)

            def _send(self, code: int, body: str) -> None:
                raw = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Instances:
    """Runs the user data of every running instance of ``namespace`` as a local process (see
    the module docstring)."""

    def __init__(self, endpoint: str, namespace: str, queue_url: str, logs: Path) -> None:
        self.endpoint, self.namespace, self.queue_url, self.logs = (
            endpoint,
            namespace,
            queue_url,
            logs,
        )
        keys = {
            "region_name": "us-east-1",
            "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        }
        self.ec2 = boto3.client("ec2", endpoint_url=endpoint, **keys)
        self.sqs = boto3.client("sqs", endpoint_url=endpoint, **keys)
        self.imds = FakeImds()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.user_data: dict[str, str] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._start_new()
            except Exception as exc:  # moto going away at the end
                if not self._stop.is_set():
                    print(f"instances watcher: {exc}", file=sys.stderr)
            self._stop.wait(0.1)

    def _start_new(self) -> None:
        reply = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:budgeteer:deployment", "Values": [self.namespace]},
                {"Name": "instance-state-name", "Values": ["running"]},
            ]
        )
        for reservation in reply["Reservations"]:
            for inst in reservation["Instances"]:
                iid = inst["InstanceId"]
                with self._lock:
                    if iid in self.procs:
                        continue
                attr = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
                script = b64decode(attr["UserData"]["Value"]).decode()
                self.user_data[iid] = script
                self.imds.data[iid] = {
                    "instance-id": iid,
                    "ami-launch-index": str(inst["AmiLaunchIndex"]),
                }
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "HOME": os.environ.get("HOME", "/root"),
                    "AWS_ENDPOINT_URL": self.endpoint,
                    "BUDGETEER_IMDS_URL": f"{self.imds.url}/{iid}",
                    **CREDENTIALS,
                }
                log = (self.logs / f"{iid}.log").open("wb")
                proc = subprocess.Popen(
                    ["bash", "-c", script], env=env, stdout=log, stderr=subprocess.STDOUT
                )
                with self._lock:
                    self.procs[iid] = proc

    def wait_started(self, ids: tuple[str, ...], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(i in self.procs for i in ids):
                    return
            time.sleep(0.05)
        raise AssertionError(f"instances {ids} never started")

    def interrupt(self, instance_id: str, terminate_after: float = 5.0) -> None:
        """What AWS does to a spot instance it takes back (two minutes' notice, shortened)."""
        event = {
            "version": "0",
            "id": "7cc4b0b4-0000-0000-0000-000000000000",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": "2026-12-03T12:00:00Z",
            "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1b:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(event))
        self.imds.data.setdefault(instance_id, {})["spot/instance-action"] = json.dumps(
            {"action": "terminate", "time": "2026-12-03T12:02:00Z"}
        )

        def take() -> None:
            self.ec2.terminate_instances(InstanceIds=[instance_id])
            with self._lock:
                proc = self.procs.get(instance_id)
            if proc is not None and proc.poll() is None:
                proc.kill()

        threading.Timer(terminate_after, take).start()

    def log(self, instance_id: str) -> str:
        path = self.logs / f"{instance_id}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        with self._lock:
            procs = list(self.procs.values())
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)
        self.imds.close()


def have_moto() -> bool:
    return moto_server_command() is not None and shutil.which("bash") is not None


def session(endpoint: str) -> Callable[[str], Any]:
    """boto3 clients on ``endpoint`` with the test credentials."""

    def make(service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    return make


@dataclass
class World:
    """An account of its own on the moto server: a bucket, an interruption queue, a subnet, an
    EC2 backend over ``offerings`` and the instances' side (see the module docstring)."""

    backend: Ec2Backend
    instances: Instances
    settings: Ec2Settings
    namespace: str
    endpoint: str
    offerings: tuple[Offering, ...]

    def client(self, service: str) -> Any:
        return self.backend.client(service)

    def restarted(self, pools: Mapping[str, PoolSettings] | None = None) -> Ec2Backend:
        """The backend as a new service process would open it (with ``pools``, if any)."""
        return Ec2Backend(
            SystemClock(),
            self.settings,
            {o.id: o for o in self.offerings},
            namespace=self.namespace,
            session=session(self.endpoint),
            pools=pools,
        )


def open_world(endpoint: str, tmp_path: Path, offerings: tuple[Offering, ...]) -> World:
    """A fresh :class:`World` (close ``world.instances`` after)."""
    make = session(endpoint)
    ec2, s3, sqs = make("ec2"), make("s3"), make("sqs")
    namespace = uuid.uuid4().hex[:8]
    bucket = f"budgeteer-{namespace}"
    s3.create_bucket(Bucket=bucket)
    queue = sqs.create_queue(QueueName=f"interruptions-{namespace}")["QueueUrl"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    settings = Ec2Settings(
        region="us-east-1",
        bucket=bucket,
        images={"*": image},
        subnets={"use1-az2": subnet, "*": subnet},
        interruption_queue_url=queue,
        python=sys.executable,
        instance_workdir=str(tmp_path / "instance"),
        grace_seconds=10.0,
        poll_seconds=0.2,
        sync_seconds=0.5,
        shutdown=False,
    )
    backend = Ec2Backend(
        SystemClock(), settings, {o.id: o for o in offerings}, namespace=namespace, session=make
    )
    logs = tmp_path / "ec2-logs"
    logs.mkdir(exist_ok=True)
    instances = Instances(endpoint, namespace, queue, logs)
    return World(backend, instances, settings, namespace, endpoint, offerings)


def refuse_run_instances(
    backend: Ec2Backend,
    code: str,
    status: int = 500,
    times: int = 1000,
    spot_only: bool = False,
) -> None:
    """Make the next ``times`` RunInstances answer AWS's error ``code`` (real botocore
    parsing); later calls (and, with ``spot_only``, on-demand ones)
    go through to moto."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
        f"<Code>{code}</Code><Message>We currently do not have sufficient capacity.</Message>"
        "</Error></Errors><RequestID>r-1</RequestID></Response>"
    ).encode()

    class Raw:
        def stream(self, **_: Any) -> Iterator[bytes]:
            yield body

    left = [times]

    def answer(request: Any, **_: Any) -> AWSResponse | None:
        sent = request.body if isinstance(request.body, bytes) else str(request.body).encode()
        if left[0] <= 0 or (spot_only and b"InstanceMarketOptions" not in sent):
            return None
        left[0] -= 1
        return AWSResponse(request.url, status, {}, Raw())

    backend.client("ec2").meta.events.register_first("before-send.ec2.RunInstances", answer)
