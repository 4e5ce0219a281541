"""EC2 pools against moto's server, the instances' side played by local processes that run the
rendered bootstrap (``ec2_world.py``): a pooled offering's instances stay running between
attempts and take the next job from their S3 mailbox — no second ``RunInstances``."""

from __future__ import annotations

import argparse
import io
import json
import shlex
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from budgeteer.backends import ec2_agent
from budgeteer.backends.base import CapacityUnavailable, Handle, RunState
from budgeteer.backends.ec2 import Ec2Backend
from budgeteer.backends.ec2_agent import Assignment
from budgeteer.backends.ec2_pools import assignment, warm_limit
from budgeteer.core.pools import PoolSettings
from ec2_world import World, open_world
from engines import settle, until
from test_ec2 import ON_DEMAND, SPOT, _request

SAY = (
    "import os, pathlib; print('ran', os.environ['BUDGETEER_JOB_ID'],"
    " os.environ['BUDGETEER_ATTEMPT'], os.environ['BUDGETEER_NODE_RANK'],"
    " os.environ['BUDGETEER_TOKEN'], flush=True);"
    " f = pathlib.Path(os.environ['BUDGETEER_CACHE_DIR']) / 'dataset';"
    " print('cache', 'found' if f.exists() else 'downloaded', flush=True); f.write_text('rows')"
)


@pytest.fixture
def world(moto_url: str, tmp_path: Path) -> Iterator[World]:
    w = open_world(moto_url, tmp_path, (SPOT, ON_DEMAND))
    try:
        yield w
    finally:
        w.instances.close()


def _pooled(world: World, **settings: Any) -> Ec2Backend:
    """The world's EC2 backend with both offerings pooled (``settings``: the pools')."""
    pool = {"idle_timeout_seconds": 0.0, "maximum": 2} | settings
    return world.restarted({o.id: PoolSettings(name=o.id, **pool) for o in world.offerings})


def _instances(world: World) -> dict[str, str]:
    """Every instance of the deployment EC2 knows → its state."""
    reply = world.client("ec2").describe_instances(
        Filters=[{"Name": "tag:budgeteer:deployment", "Values": [world.namespace]}]
    )
    return {
        i["InstanceId"]: i["State"]["Name"] for r in reply["Reservations"] for i in r["Instances"]
    }


def _run(backend: Ec2Backend, job: str, offering: Any = ON_DEMAND) -> tuple[Handle, Any]:
    handle = backend.launch(_request(SAY, offering, job=job))
    status = settle(backend, handle, 60)
    assert status.state is RunState.SUCCEEDED, status
    return handle, status


def test_two_jobs_run_back_to_back_on_one_warm_instance_and_its_idle_time_is_billed(
    world: World,
) -> None:
    backend = _pooled(world)
    first, done = _run(backend, "first")
    (iid,) = first.instance_ids
    assert _instances(world) == {iid: "running"}  # kept warm, not terminated
    assert backend.warm_instances() == {ON_DEMAND.id: 1}
    second, done2 = _run(backend, "second")
    assert second.instance_ids == (iid,)  # no second RunInstances: the warm instance
    assert second.id in backend.warm_starts
    assert first.id not in backend.warm_starts
    assert list(_instances(world)) == [iid]
    log = world.instances.log(iid)
    assert "ran first 1 0 t0k'en" in log
    assert "ran second 1 0 t0k'en" in log
    # the instance's disk outlives the job: the first downloaded, the second found it there
    assert [ln for ln in log.splitlines() if ln.startswith("cache")] == [
        "cache downloaded",
        "cache found",
    ]
    tags = {t["Key"]: t["Value"] for t in _describe(world, iid).get("Tags", [])}
    assert (tags["budgeteer:job"], tags["budgeteer:attempt"]) == ("second", "1")
    backend.release_idle()  # idle_timeout 0: given back at once
    until(lambda: _instances(world)[iid] in {"shutting-down", "terminated"}, 30)
    assert backend.warm_instances() == {}
    idle = sorted(backend.take_idle(), key=lambda i: i.start)
    assert [(i.job_id, i.instances) for i in idle] == [("first", 1), ("second", 1)]
    assert idle[0].start == done.ended_at
    assert idle[0].end == second.launched_at
    assert idle[1].start == done2.ended_at
    assert idle[1].end >= idle[1].start
    assert backend.take_idle() == []  # each stretch handed out once
    until(lambda: world.instances.procs[iid].poll() is not None, 30)  # the agent left


def test_a_restarted_backend_takes_its_warm_instances_back(world: World) -> None:
    backend = _pooled(world, idle_timeout_seconds=3600.0)
    first, _ = _run(backend, "first")
    restarted = _pooled(world, idle_timeout_seconds=3600.0)
    assert restarted.warm_instances() == {ON_DEMAND.id: 1}
    second, _ = _run(restarted, "second")
    assert second.instance_ids == first.instance_ids
    adopted = _pooled(world).adopt(_request(SAY, job="second"))
    assert adopted is not None
    assert adopted.launched_at == second.launched_at  # the taking, not the instance's boot


def test_a_warm_instance_the_market_took_is_dropped_and_never_taken_again(world: World) -> None:
    backend = _pooled(world, idle_timeout_seconds=3600.0)
    first, _ = _run(backend, "first", SPOT)
    (iid,) = first.instance_ids
    world.instances.interrupt(iid, terminate_after=0.5)
    until(lambda: _instances(world)[iid] != "running", 30)
    backend.release_idle()
    assert backend.warm_instances() == {}
    (stretch,) = backend.take_idle()
    assert stretch.job_id == "first"
    assert stretch.end > stretch.start
    second, _ = _run(backend, "second", SPOT)
    assert second.instance_ids != (iid,)  # a fresh instance


def test_the_pools_max_refuses_a_launch_beyond_it(world: World) -> None:
    backend = _pooled(world, maximum=1, idle_timeout_seconds=3600.0)
    running = backend.launch(_request("import time; time.sleep(3)", job="long"))
    with pytest.raises(CapacityUnavailable, match=r"1 of 1 instances in use \(the pool's max\)"):
        backend.launch(_request(SAY, job="late"))
    settle(backend, running, 60)
    late, _ = _run(backend, "late")  # the instance freed, warm: taken
    assert late.instance_ids == running.instance_ids


def test_a_bigger_launch_makes_room_by_giving_warm_instances_back(world: World) -> None:
    backend = _pooled(world, maximum=2, idle_timeout_seconds=3600.0)
    first, _ = _run(backend, "first")
    pair = backend.launch(_request(SAY, job="pair", n=2))
    (old,) = first.instance_ids
    assert old not in pair.instance_ids
    assert len(pair.instance_ids) == 2
    until(lambda: _instances(world)[old] in {"shutting-down", "terminated"}, 30)
    assert settle(backend, pair, 60).state is RunState.SUCCEEDED
    logs = "".join(world.instances.log(i) for i in pair.instance_ids)
    assert "ran pair 1 0" in logs
    assert "ran pair 1 1" in logs
    (stretch,) = backend.take_idle()
    assert stretch.job_id == "first"
    assert stretch.end <= pair.launched_at


def _describe(world: World, iid: str) -> dict[str, Any]:
    reply = world.client("ec2").describe_instances(InstanceIds=[iid])
    return dict(reply["Reservations"][0]["Instances"][0])


def test_an_assignment_round_trips_and_a_malformed_one_names_its_field(world: World) -> None:
    doc = assignment(world.settings, world.namespace, _request(SAY, job="j", n=2), rank=1)
    parsed = Assignment.parse(json.dumps(doc))
    assert (parsed.rank, parsed.nodes, parsed.env["BUDGETEER_JOB_ID"]) == (1, 2, "j")
    assert parsed.attempt_prefix.endswith(f"/attempts/bgt-{world.namespace}-j-1")
    for field, value in [
        ("rank", -1),
        ("command", []),
        ("env", {"A": 1}),
        ("attempt_prefix", ""),
    ]:
        with pytest.raises(ValueError, match=field):
            Assignment.parse(json.dumps(doc | {field: value}))
    with pytest.raises(ValueError, match="a JSON object"):
        Assignment.parse("[1, 2]")


def test_an_agent_waits_its_pools_timeout_and_an_hour_or_for_ever_under_a_min(
    world: World,
) -> None:
    short = PoolSettings(name="p", idle_timeout_seconds=600.0)
    kept = PoolSettings(name="p", minimum=1, idle_timeout_seconds=600.0, team="ml")
    assert warm_limit(short) == 600.0 + 3600.0
    assert warm_limit(kept) == float("inf")

    def flag(backend: Ec2Backend, name: str) -> str:
        argv = shlex.split(backend.pools.user_data(ON_DEMAND.id).splitlines()[-1])
        return argv[argv.index(name) + 1]

    assert flag(_pooled(world, minimum=1, team="ml"), "--warm-limit") == "inf"
    assert flag(_pooled(world), "--warm-limit") == "3600"
    assert flag(_pooled(world), "--pool-prefix") == f"budgeteer/{world.namespace}/instances"


class _S3:
    """An in-memory stand-in for the few S3 calls the agent's waiting loop makes."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = dict(objects)

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's
        if Key not in self.objects:
            raise KeyError(Key)
        return {}

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        return {"Body": io.BytesIO(self.objects[Key])}

    def delete_object(self, Bucket: str, Key: str) -> None:  # noqa: N803
        self.objects.pop(Key, None)

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> None:  # noqa: N803
        self.objects[Key] = Body


class _Imds:
    def __init__(self, action: str | None = None) -> None:
        self.action = action

    def get(self, path: str) -> str | None:
        return self.action if path == "spot/instance-action" else None


def _agent_args(limit: float) -> argparse.Namespace:
    return ec2_agent.parser().parse_args(
        [
            *("--bucket", "b", "--pool-prefix", "p/instances", "--workdir", "/unused"),
            *("--warm-limit", str(limit), "--poll", "0.01"),
        ]
    )


def test_a_pooled_agent_leaves_after_its_limit_a_release_or_the_markets_notice() -> None:
    s3 = _S3({})
    assert ec2_agent.serve_pool(_agent_args(0.2), _Imds(), s3, "i-1") == 0  # nothing came: left
    assert s3.objects == {}
    forever = _agent_args(float("inf"))
    assert (
        ec2_agent.serve_pool(forever, _Imds(), _S3({"p/instances/i-1/release": b"1"}), "i-1") == 0
    )
    assert ec2_agent.serve_pool(forever, _Imds("terminate"), _S3({}), "i-1") == 0


def test_a_malformed_assignment_fails_its_attempt_instead_of_hanging_it() -> None:
    bad = {"attempt_prefix": "p/attempts/k", "rank": 1, "nodes": 2, "env": {}, "command": []}
    s3 = _S3(
        {
            "p/instances/i-1/next.json": json.dumps(bad).encode(),
            "p/instances/i-2/next.json": b"{not json",
        }
    )
    assert ec2_agent.serve_pool(_agent_args(0.1), _Imds(), s3, "i-1") == 0
    assert "p/instances/i-1/next.json" not in s3.objects  # taken out of the mailbox
    record = json.loads(s3.objects["p/attempts/k/exit-1.json"])
    assert (record["code"], record["instance_id"]) == (2, "i-1")  # the backend: failed, code 2
    before = dict(s3.objects)
    assert ec2_agent.serve_pool(_agent_args(0.1), _Imds(), s3, "i-2") == 0
    assert set(s3.objects) == set(before) - {"p/instances/i-2/next.json"}  # nowhere to say it


def test_a_pool_with_a_min_boots_an_instance_with_no_job_and_the_next_job_takes_it(
    moto_url: str, tmp_path: Path
) -> None:
    """The pool's min boots one instance with no job (tagged with the team that pays); the
    floor met, nothing more is booted; a restarted backend still holds it; the next job runs
    on it — no second ``RunInstances`` — and the time it idled is the team's."""
    fast = replace(ON_DEMAND, id="aws-od-fast", startup_seconds=0.0)
    pools = {fast.id: PoolSettings(fast.id, 1, 2, 0.0, 0.0, team="ml")}
    w = open_world(moto_url, tmp_path, (fast,))
    try:
        backend = w.restarted(pools)
        backend.release_idle()
        [iid] = _instances(w)
        tags = {t["Key"]: t["Value"] for t in _describe(w, iid).get("Tags", [])}
        assert tags["budgeteer:pool-team"] == "ml"
        assert "budgeteer:job" not in tags
        assert backend.warm_instances() == {fast.id: 1}
        backend.release_idle()  # the floor is met: no second boot
        assert list(_instances(w)) == [iid]
        restarted = w.restarted(pools)
        assert restarted.warm_instances() == {fast.id: 1}
        handle, _ = _run(restarted, "first", fast)
        assert handle.instance_ids == (iid,)
        assert handle.id in restarted.warm_starts
        assert "ran first 1 0" in w.instances.log(iid)
        [stretch] = restarted.take_idle()
        assert (stretch.job_id, stretch.team, stretch.instance_ids) == (None, "ml", (iid,))
        assert stretch.end == handle.launched_at
        assert list(_instances(w)) == [iid]  # kept: the job's instance now, warm again
    finally:
        w.instances.close()


def test_an_attempt_found_again_after_a_restart_leaves_its_dataset_on_its_instances(
    world: World,
) -> None:
    backend = _pooled(world, idle_timeout_seconds=3600.0)
    request = replace(_request(SAY, job="first"), data_uri="s3://data/clicks-2026-12")
    handle = backend.launch(request)
    restarted = _pooled(world, idle_timeout_seconds=3600.0)  # a new process, the job running
    adopted = restarted.adopt(request)
    assert adopted is not None
    assert adopted.instance_ids == handle.instance_ids
    assert settle(restarted, adopted, 60).state is RunState.SUCCEEDED
    assert restarted.warm_data() == {ON_DEMAND.id: {"s3://data/clicks-2026-12": 1}}
