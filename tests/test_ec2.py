"""The EC2 backend against moto's server (real boto3, real HTTP) with the instances' side played
by local processes that run the rendered user data (see ``ec2_world.py`` for what that proves and
what it cannot)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from budgeteer.backends.base import (
    CapacityUnavailable,
    Handle,
    LaunchFailed,
    LaunchRequest,
    RunState,
)
from budgeteer.backends.ec2 import (
    Ec2Backend,
    Ec2Settings,
    Ec2Unavailable,
    attempt_key,
    render_user_data,
)
from budgeteer.backends.ec2_launch import max_price
from budgeteer.catalog.live import StorePrices
from budgeteer.clock import SystemClock
from budgeteer.core.spot.bids import bid_for
from budgeteer.domain.offering import Market
from budgeteer.domain.tier import Tier
from budgeteer.store import MemoryStore, PricePoint
from builders import make_offering
from ec2_world import World, open_world, refuse_run_instances, session
from engines import settle, until

PY = sys.executable
SPOT = replace(
    make_offering("aws-spot", market=Market.SPOT, price=0.9, accelerator="V100"),
    instance_type="p3.2xlarge",
)
ON_DEMAND = replace(
    make_offering("aws-od", price=3.06, accelerator="V100"), instance_type="p3.2xlarge"
)
ZONAL = replace(SPOT, id="aws-spot-az2", zones=("use1-az2",))


@pytest.fixture
def world(moto_url: str, tmp_path: Path) -> Iterator[World]:
    w = open_world(moto_url, tmp_path, (SPOT, ON_DEMAND, ZONAL))
    try:
        yield w
    finally:
        w.instances.close()


def _request(
    code: str, offering: Any = ON_DEMAND, *, job: str = "job-1", attempt: int = 1, n: int = 1
) -> LaunchRequest:
    return LaunchRequest(
        job_id=job,
        attempt=attempt,
        offering=offering,
        command=(PY, "-c", code),
        checkpoint_dir=Path("/unused/on/ec2"),
        instances=n,
        workers=n,
        env={"BUDGETEER_API_URL": "https://budgeteer.example", "BUDGETEER_TOKEN": "t0k'en"},
    )


#: a job that checkpoints on SIGTERM (writes ``state`` = steps done) and resumes from it
RESUMABLE = """
import os, pathlib, signal, sys, time
ckpt = pathlib.Path(os.environ["BUDGETEER_CHECKPOINT_DIR"]) / "state"
start = int(ckpt.read_text()) if ckpt.exists() else 0
print("resumed from", start, flush=True)
step = start
def bye(*_):
    ckpt.write_text(str(step)); sys.exit(0)
signal.signal(signal.SIGTERM, bye)
while step < start + 10000:
    step += 1
    time.sleep(0.01)
"""


def _tags(world: World, handle: Handle) -> dict[str, str]:
    reply = world.client("ec2").describe_instances(InstanceIds=list(handle.instance_ids))
    inst = reply["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in inst.get("Tags", [])}


def _state(world: World, handle: Handle) -> set[str]:
    reply = world.client("ec2").describe_instances(InstanceIds=list(handle.instance_ids))
    return {i["State"]["Name"] for r in reply["Reservations"] for i in r["Instances"]}


def test_a_job_runs_on_an_instance_and_succeeds_then_its_instance_is_terminated(
    world: World,
) -> None:
    code = (
        "import os; print('job', os.environ['BUDGETEER_JOB_ID'], os.environ['BUDGETEER_TOKEN'],"
        " os.environ['BUDGETEER_NODE_RANK'], os.environ['BUDGETEER_MARKET'],"
        " os.environ['BUDGETEER_CHECKPOINT_S3'])"
    )
    handle = world.backend.launch(_request(code))
    assert len(handle.instance_ids) == 1
    tags = _tags(world, handle)
    assert tags["budgeteer:job"] == "job-1"
    assert tags["budgeteer:attempt"] == "1"
    assert tags["budgeteer:deployment"] == world.namespace
    status = settle(world.backend, handle, 60)
    assert status.state is RunState.SUCCEEDED, status
    assert status.exit_code == 0
    assert status.ended_at is not None
    assert status.started_at is not None
    assert status.ended_at >= status.started_at
    s3 = f"s3://{world.settings.bucket}/budgeteer/{world.namespace}/checkpoints/job-1/"
    assert f"job job-1 t0k'en 0 on_demand {s3}" in world.instances.log(handle.instance_ids[0])
    assert _state(world, handle) <= {"shutting-down", "terminated"}


def test_a_failing_job_is_failed_with_its_exit_code(world: World) -> None:
    handle = world.backend.launch(_request("import sys; sys.exit(3)"))
    status = settle(world.backend, handle, 60)
    assert status.state is RunState.FAILED
    assert status.exit_code == 3


def test_spot_launches_with_market_options_and_a_capped_price(world: World) -> None:
    settings = replace(world.settings, spot_max_price_fraction=0.5)
    backend = Ec2Backend(
        SystemClock(),
        settings,
        {o.id: o for o in (SPOT, ON_DEMAND)},
        namespace=world.namespace,
        session=session(world.endpoint),
    )
    sent: list[dict[str, Any]] = []
    backend.client("ec2").meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(params)
    )
    handle = backend.launch(_request("pass", SPOT))
    reply = world.client("ec2").describe_instances(InstanceIds=list(handle.instance_ids))
    inst = reply["Reservations"][0]["Instances"][0]
    assert inst.get("InstanceLifecycle") == "spot"
    spot = sent[0]["InstanceMarketOptions"]
    assert spot["MarketType"] == "spot"
    assert spot["SpotOptions"]["MaxPrice"] == "1.530000"  # half of on-demand's $3.06
    assert spot["SpotOptions"]["InstanceInterruptionBehavior"] == "terminate"
    assert sent[0]["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert settle(backend, handle, 60).state is RunState.SUCCEEDED


def test_stop_reaches_the_job_which_checkpoints_to_s3(world: World) -> None:
    handle = world.backend.launch(_request(RESUMABLE, job="stoppable"))
    until(lambda: world.backend.status(handle).state is RunState.RUNNING, 30)
    world.instances.wait_started(handle.instance_ids)
    until(lambda: "resumed from 0" in world.instances.log(handle.instance_ids[0]), 30)
    world.backend.stop(handle, "cancelled by the owner")
    status = settle(world.backend, handle, 60)
    assert status.state is RunState.STOPPED
    assert status.reason == "cancelled by the owner"
    key = f"budgeteer/{world.namespace}/checkpoints/stoppable/state"
    saved = world.client("s3").get_object(Bucket=world.settings.bucket, Key=key)
    assert int(saved["Body"].read()) > 0


def test_an_interruption_is_a_preemption_and_the_next_attempt_resumes(world: World) -> None:
    first = world.backend.launch(_request(RESUMABLE, SPOT, job="resume"))
    world.instances.wait_started(first.instance_ids)
    until(lambda: "resumed from 0" in world.instances.log(first.instance_ids[0]), 30)
    world.instances.interrupt(first.instance_ids[0], terminate_after=8.0)
    status = settle(world.backend, first, 60)
    assert status.state is RunState.PREEMPTED, status
    assert "interruption" in status.reason
    key = f"budgeteer/{world.namespace}/checkpoints/resume/state"
    steps = int(world.client("s3").get_object(Bucket=world.settings.bucket, Key=key)["Body"].read())
    assert steps > 0
    second = world.backend.launch(
        _request(RESUMABLE.replace("10000", "5"), ON_DEMAND, job="resume", attempt=2)
    )
    assert settle(world.backend, second, 60).state is RunState.SUCCEEDED
    assert f"resumed from {steps}" in world.instances.log(second.instance_ids[0])


def test_an_instance_lost_without_warning_after_an_interruption_event_is_preempted(
    world: World,
) -> None:
    """The warning arrives through SQS; the instance is gone before the agent wrote anything."""
    handle = world.backend.launch(_request("import time; time.sleep(600)", SPOT, job="lost"))
    world.instances.wait_started(handle.instance_ids)
    world.instances.interrupt(handle.instance_ids[0], terminate_after=0.0)
    status = settle(world.backend, handle, 60)
    assert status.state is RunState.PREEMPTED


def test_an_instance_terminated_by_someone_else_is_a_failure_with_the_reason(
    world: World,
) -> None:
    handle = world.backend.launch(_request("import time; time.sleep(600)", job="gone"))
    world.instances.wait_started(handle.instance_ids)
    world.client("ec2").terminate_instances(InstanceIds=list(handle.instance_ids))
    status = settle(world.backend, handle, 60)
    assert status.state is RunState.FAILED
    assert "Client.UserInitiatedShutdown" in status.reason


def test_two_instances_run_two_ranks_and_a_failing_rank_fails_the_attempt(world: World) -> None:
    code = (
        "import os, sys; r = os.environ['BUDGETEER_NODE_RANK'];"
        " print('rank', r, 'of', os.environ['BUDGETEER_NUM_NODES']); sys.exit(5 if r == '1' else 0)"
    )
    handle = world.backend.launch(_request(code, n=2, job="gang"))
    assert len(handle.instance_ids) == 2
    status = settle(world.backend, handle, 60)
    assert status.state is RunState.FAILED
    assert status.exit_code == 5
    logs = "".join(world.instances.log(i) for i in handle.instance_ids)
    assert "rank 0 of 2" in logs
    assert "rank 1 of 2" in logs


def test_a_restarted_backend_re_attaches_by_tags_and_only_to_what_launched(world: World) -> None:
    request = _request("import time; time.sleep(2)", job="adopt")
    handle = world.backend.launch(request)
    again = world.restarted()
    adopted = again.adopt(request)
    assert adopted is not None
    assert adopted.instance_ids == handle.instance_ids
    assert adopted.id == attempt_key(request, world.namespace)
    assert again.adopt(_request("pass", job="adopt", attempt=2)) is None
    assert settle(again, adopted, 60).state is RunState.SUCCEEDED


@pytest.mark.parametrize(
    ("code", "raised"),
    [
        ("InsufficientInstanceCapacity", CapacityUnavailable),
        ("SpotMaxPriceTooLow", CapacityUnavailable),
        ("VcpuLimitExceeded", CapacityUnavailable),
        ("InvalidAMIID.NotFound", LaunchFailed),
    ],
)
def test_aws_refusals_are_capacity_or_final(world: World, code: str, raised: type) -> None:
    refuse_run_instances(world.backend, code, 400)
    with pytest.raises(raised, match=code):
        world.backend.launch(_request("pass", SPOT))


def test_a_zone_out_of_capacity_fails_over_to_the_next_zone_at_once(world: World) -> None:
    ec2 = world.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    first = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.1.0/24")["Subnet"]["SubnetId"]
    second = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.2.0/24")["Subnet"]["SubnetId"]
    two_zones = replace(ON_DEMAND, id="aws-od-2z", zones=("use1-az1", "use1-az4"))
    backend = world.restarted()
    backend.settings = replace(world.settings, subnets={"use1-az1": first, "use1-az4": second})
    assert backend.settings.subnets_for(two_zones) == [first, second]
    refuse_run_instances(backend, "InsufficientInstanceCapacity", 400, times=1)
    handle = backend.launch(_request("pass", two_zones, job="failover"))
    reply = ec2.describe_instances(InstanceIds=list(handle.instance_ids))
    assert reply["Reservations"][0]["Instances"][0]["SubnetId"] == second
    refuse_run_instances(backend, "InsufficientInstanceCapacity", 400, times=2)
    with pytest.raises(CapacityUnavailable, match=f"{first}.*{second}"):
        backend.launch(_request("pass", two_zones, job="failover", attempt=2))
    assert settle(backend, handle, 60).state is RunState.SUCCEEDED


def test_throttling_is_transient(world: World) -> None:
    backend = world.restarted()
    backend.client("ec2").meta.config.retries["max_attempts"] = 0  # botocore would retry
    refuse_run_instances(backend, "RequestLimitExceeded", 503)
    with pytest.raises(Ec2Unavailable, match="RequestLimitExceeded"):
        backend.launch(_request("pass"))


def test_limits_refuse_beyond_the_configured_instances(world: World) -> None:
    backend = world.restarted()
    backend.settings = replace(world.settings, limits={ON_DEMAND.id: 2})
    first = backend.launch(_request("import time; time.sleep(3)", n=2, job="a"))
    with pytest.raises(CapacityUnavailable, match="2 of 2"):
        backend.launch(_request("pass", job="b"))
    settle(backend, first, 60)
    assert settle(backend, backend.launch(_request("pass", job="b")), 60).state is (
        RunState.SUCCEEDED
    )


def test_malformed_and_foreign_queue_messages_do_not_stop_the_backend(world: World) -> None:
    sqs = world.client("sqs")
    queue = world.settings.interruption_queue_url
    sqs.send_message(QueueUrl=queue, MessageBody="not json {")
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"detail-type": "something else"}))
    foreign = {
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": "i-0someoneelse0000"},
    }
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(foreign))
    handle = world.backend.launch(_request("pass", job="calm"))
    assert settle(world.backend, handle, 60).state is RunState.SUCCEEDED
    left = sqs.get_queue_attributes(
        QueueUrl=queue,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    # the malformed two were dropped; the other deployment's warning is left for it
    assert (
        int(left["ApproximateNumberOfMessages"])
        + int(left["ApproximateNumberOfMessagesNotVisible"])
        == 1
    )


def test_an_offering_the_settings_cannot_serve_is_refused_up_front(world: World) -> None:
    elsewhere = replace(ON_DEMAND, id="gcp-od", provider="gcp")
    with pytest.raises(LaunchFailed, match="provider aws"):
        world.backend.launch(_request("pass", elsewhere))
    no_subnet = replace(SPOT, id="aws-spot-az9", zones=("use1-az9",))
    assert not world.settings.serves(no_subnet)
    assert world.settings.serves(ZONAL)


# -- the user data, rendered ------------------------------------------------------------------
SETTINGS = Ec2Settings(region="us-east-1", bucket="b-bucket", images={"*": "ami-1"})


def test_user_data_exports_the_job_quoted_and_runs_the_agent() -> None:
    request = _request("print('x')", SPOT)
    script = render_user_data(
        SETTINGS, request, "ns1", {"BUDGETEER_TOKEN": "a b'c", "BUDGETEER_JOB_ID": "job-1"}
    )
    assert script.startswith("#!/bin/bash\n")
    assert "export BUDGETEER_TOKEN='a b'\"'\"'c'" in script
    assert "--attempt-prefix budgeteer/ns1/attempts/bgt-ns1-job-1-1" in script
    assert "--checkpoint-prefix budgeteer/ns1/checkpoints/job-1" in script
    assert "--shutdown" in script
    assert script.rstrip().endswith("-- " + shlex.join([PY, "-c", "print('x')"]))
    # bash itself parses it
    assert subprocess.run(["bash", "-n", "-c", script], check=False).returncode == 0


def test_user_data_beyond_16_kb_is_refused() -> None:
    request = _request("x" * 17000)
    with pytest.raises(LaunchFailed, match="16384"):
        render_user_data(SETTINGS, request, "ns1", {})


def test_spot_bids_come_from_the_live_spot_prices_by_tier() -> None:
    recent = [Decimal(x) for x in ("0.90", "0.95", "1.00", "1.05", "1.10", "0.92", "0.97")]
    ceiling = Decimal("3.06")
    expected = bid_for(Tier.P1, np.array([float(p) for p in recent]), np.ones(7, bool), 1.0, 3.06)
    assert max_price(SETTINGS, Tier.P1, ceiling, recent) == f"{expected.max_usd_per_hour:.6f}"
    p0, p3 = (
        max_price(SETTINGS, Tier.P0, ceiling, recent),
        max_price(SETTINGS, Tier.P3, ceiling, recent),
    )
    assert p0 is not None
    assert p3 is not None
    assert Decimal(p0) > Decimal(p3)  # critical work bids higher to keep its instance
    assert (
        max_price(SETTINGS, Tier.P0, Decimal("1.0"), recent) == "1.000000"
    )  # never above on-demand
    assert max_price(SETTINGS, Tier.P1, ceiling, recent[:2]) is None  # too little history
    half = replace(SETTINGS, spot_max_price_fraction=0.5)
    assert max_price(half, Tier.P1, ceiling, recent[:2]) == "1.530000"


def test_a_spot_launch_sends_the_jobs_bid(world: World) -> None:
    store = MemoryStore()
    now = datetime.now(UTC)
    store.add_prices(
        [
            PricePoint(SPOT.id, now - timedelta(hours=h), Decimal(p), "aws-spot-history:use1-az2")
            for h, p in ((30, "0.91"), (20, "0.95"), (10, "1.02"), (1, "0.97"))
        ]
    )
    backend = world.restarted()
    backend.live_prices = StorePrices(store, SystemClock(), timedelta(hours=6), reread_seconds=0)
    sent: list[dict[str, Any]] = []
    backend.client("ec2").meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(params)
    )
    request = dataclasses.replace(_request("pass", SPOT, job="bidder"), tier=Tier.P2)
    handle = backend.launch(request)
    prices = np.array([0.91, 0.95, 1.02, 0.97])
    bid = bid_for(Tier.P2, prices, np.ones(4, bool), 1.0, 3.06)
    assert (
        sent[0]["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] == f"{bid.max_usd_per_hour:.6f}"
    )
    assert settle(backend, handle, 60).state is RunState.SUCCEEDED
