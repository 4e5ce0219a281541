"""The EC2 backend from a service config: ``budgeteer run`` launching on moto's "EC2" (the
instances played by local processes, ``ec2_world.py``), bad configs named by field, and the
example config."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from budgeteer.backends.ec2 import Ec2Backend
from budgeteer.config import load_config
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.service.wiring import build
from ec2_world import CREDENTIALS, Instances, session

PY = sys.executable


# -- from a config: `budgeteer run` on EC2 ----------------------------------------------------
def _config(tmp_path: Path, backend: dict[str, Any], **more: Any) -> Path:
    cfg = tmp_path / "budgeteer.yaml"
    doc = {"store": "sqlite:///state.db", "interval_seconds": 1, "backend": backend, **more}
    cfg.write_text(yaml.safe_dump(doc))
    return cfg


def _moto_backend(moto_url: str, tmp_path: Path) -> dict[str, Any]:
    """An ``ec2`` backend section on moto, with a fresh bucket."""
    make = session(moto_url)
    image = make("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    bucket = f"budgeteer-{uuid.uuid4().hex[:8]}"
    make("s3").create_bucket(Bucket=bucket)
    return {
        "kind": "ec2",
        "region": "us-east-1",
        "bucket": bucket,
        "images": {"*": image},
        "endpoint_url": moto_url,
        "python": PY,
        "instance_workdir": str(tmp_path / "instance"),
        "poll_seconds": 0.2,
        "shutdown": False,
    }


def _job(name: str, code: str) -> dict[str, Any]:
    return {
        "name": name,
        "team": "t",
        "resources": {"accelerators": ["V100"]},
        "work": {"reference_hours": 0.01},
        "command": [PY, "-c", code],
    }


def test_budgeteer_run_on_ec2_from_a_config(moto_url: str, tmp_path: Path) -> None:
    make = session(moto_url)
    backend = _moto_backend(moto_url, tmp_path)
    bucket = backend["bucket"]
    cfg = _config(tmp_path, backend)
    config, root = load_config(cfg)
    service = build(config, root)
    sched = service.scheduler()
    assert sched.backend.name == "ec2"
    offerings = sched.catalog.offerings
    assert offerings
    assert {(o.provider, o.region) for o in offerings} == {("aws", "us-east-1")}
    assert all(len(o.zones) != 1 for o in offerings)  # zonal ones need a subnet
    job = _job(
        "retrain",
        "import os; open(os.environ['BUDGETEER_CHECKPOINT_DIR'] + '/trained', 'w').write('ok')",
    )
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump([job]))
    env = {**os.environ, **CREDENTIALS}
    submit = [PY, "-m", "budgeteer", "submit", str(jobs), "--config", str(cfg)]
    assert subprocess.run(submit, env=env, check=False).returncode == 0
    logs = tmp_path / "logs"
    logs.mkdir()
    instances = Instances(moto_url, service.namespace(), "", logs)
    try:
        run = subprocess.run(
            [PY, "-m", "budgeteer", "run", "--config", str(cfg), "--until-idle"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )
    finally:
        instances.close()
    assert run.returncode == 0, run.stderr
    attempts = service.store.attempts("retrain")
    assert [a.backend for a in attempts] == ["ec2"]
    assert attempts[0].outcome is not None
    assert attempts[0].outcome.value == "succeeded"
    assert service.store.job("retrain").state.value == "succeeded"
    key = f"budgeteer/{service.namespace()}/checkpoints/retrain/trained"
    assert make("s3").get_object(Bucket=bucket, Key=key)["Body"].read() == b"ok"
    ledger = service.store.ledger(job_id="retrain")
    assert ledger
    assert {e.attempt_id for e in ledger} == {attempts[0].id}
    # billed from launch to termination at the offering's price, to the cent
    offering = next(o for o in offerings if o.id == attempts[0].offering_id)
    assert {e.usd_per_hour for e in ledger} == {Decimal(repr(offering.usd_per_hour))}
    billed = sum((e.amount_usd for e in ledger), Decimal(0))
    expected = sum(
        (
            e.usd_per_hour * e.instances * Decimal((e.end - e.start).total_seconds()) / 3600
            for e in ledger
        ),
        Decimal(0),
    )
    assert abs(billed - expected) < Decimal("0.01")
    assert billed > 0


def test_a_restarted_budgeteer_run_on_ec2_puts_the_next_job_on_the_warm_instance(
    moto_url: str, tmp_path: Path
) -> None:
    """Pools on EC2 from a config, end to end: the first ``budgeteer run`` leaves its instance
    warm (idle_timeout 1h), a second one — a new process — takes it back from S3 and runs the
    next job there; the idle time between is billed to the first job, exactly."""
    pools = [{"offerings": "*", "max": 2, "idle_timeout": "1h"}]
    cfg = _config(tmp_path, _moto_backend(moto_url, tmp_path), pools=pools)
    config, root = load_config(cfg)
    service = build(config, root)
    env = {**os.environ, **CREDENTIALS}
    logs = tmp_path / "logs"
    logs.mkdir()
    instances = Instances(moto_url, service.namespace(), "", logs)
    try:
        for name in ("first", "second"):
            jobs = tmp_path / f"{name}.yaml"
            jobs.write_text(yaml.safe_dump([_job(name, "print('trained')")]))
            for command in (["submit", str(jobs)], ["run", "--until-idle"]):
                done = subprocess.run(
                    [PY, "-m", "budgeteer", *command, "--config", str(cfg)],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    env=env,
                    check=False,
                )
                assert done.returncode == 0, done.stderr
    finally:
        instances.close()
    store = service.store
    (first,) = store.attempts("first")
    (second,) = store.attempts("second")
    assert store.job("second").state.value == "succeeded"
    assert first.instance_ids == second.instance_ids  # one RunInstances, the instance reused
    assert len(first.instance_ids) == 1
    idle = [e for e in store.ledger(job_id="first") if e.price_source.startswith("idle in pool")]
    assert len(idle) == 1
    assert first.ended_at is not None
    assert idle[0].start == first.ended_at  # from the first job's end ...
    assert idle[0].end == second.started_at  # ... to the second's taking of the instance


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"images": {}}, "backend.images", "at least 1"),
        ({"images": {"*": "not-an-ami"}}, "backend.images.*", "pattern"),
        ({"bucket": "Bad_Bucket"}, "backend.bucket", "pattern"),
        ({"region": "mars"}, "backend.region", "pattern"),
        ({"grace_seconds": -1}, "backend.grace_seconds", "greater than or equal"),
        ({"subnets": {"use1-az2": "sg-123"}}, "backend.subnets.use1-az2", "pattern"),
        ({"surprise": 1}, "backend.surprise", "unknown field"),
    ],
)
def test_bad_ec2_configs_are_refused_by_field(
    tmp_path: Path, change: dict[str, Any], field: str, problem: str
) -> None:
    backend = {"kind": "ec2", "region": "us-east-1", "bucket": "b-bucket"}
    backend |= {"images": {"*": "ami-0123456789abcdef0"}}
    backend |= change
    with pytest.raises(SpecErrors) as err:
        load_config(_config(tmp_path, backend))
    found = {e.field: e.problem for e in err.value.errors}
    assert field in found, found
    assert problem in found[field]


def test_an_ec2_config_that_serves_no_offering_or_limits_an_unknown_one_is_refused(
    tmp_path: Path,
) -> None:
    base = {"kind": "ec2", "bucket": "b-bucket", "images": {"*": "ami-0123456789abcdef0"}}
    config, root = load_config(_config(tmp_path, {**base, "region": "ap-south-9"}))
    with pytest.raises(SpecError, match="no AWS offering") as err:
        build(config, root).scheduler()
    assert err.value.field == "backend.images"
    limits = {"region": "us-east-1", "limits": {"aws/nowhere": 2}}
    config, root = load_config(_config(tmp_path, {**base, **limits}))
    with pytest.raises(SpecError, match="no such offering") as err:
        build(config, root).scheduler()
    assert err.value.field == "backend.limits.aws/nowhere"


def test_the_example_ec2_config_plans_on_aws_in_its_region(tmp_path: Path) -> None:
    cfg, root = load_config(Path(__file__).parents[1] / "examples" / "ec2.yaml")
    cfg = cfg.model_copy(update={"store": f"sqlite:///{tmp_path / 'example.db'}"})
    sched = build(cfg, root).scheduler()
    assert sched.backend.name == "ec2"
    ids = {o.id for o in sched.catalog.offerings}
    assert ids
    assert all(i.startswith("aws/us-east-1/") for i in ids)
    # offerings in one zone only where that zone has a subnet
    zonal = {o.zones[0] for o in sched.catalog.offerings if len(o.zones) == 1}
    assert zonal == {"use1-az1", "use1-az2", "use1-az4"}
    assert "aws/us-east-1/use1-az6/p3.2xlarge/spot" not in ids
    # its pool: the g4dn on-demand offerings keep instances warm, the planner sees them pooled
    assert isinstance(sched.backend, Ec2Backend)
    pooled = sched.backend.pool_settings()
    assert pooled
    assert all("/g4dn.xlarge/on_demand" in oid for oid in pooled)
    assert {(p.maximum, p.idle_timeout_seconds) for p in pooled.values()} == {(4, 300.0)}
    assert {v.settings.name for v in sched.snapshot().pools} == set(pooled)
    # its market seed: the zone's recorded weeks, where the planner's market book reads them
    [seeded] = sched.store.markets()
    assert seeded.offering_id == "aws/us-east-1/use1-az2/p3.2xlarge/spot"
    assert len(seeded.periods) > 100
    assert sum(p.hours for p in seeded.periods) > 24 * 7
