"""The Kubernetes backend: its manifests checked offline against the Kubernetes schema
(``kubernetes-validate``), and its calls against an HTTP fake of the API server
(``k8s_fake.py``: a wire-format test — nothing is scheduled and no container runs)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from budgeteer.backends.base import (
    CapacityUnavailable,
    Handle,
    LaunchFailed,
    LaunchRequest,
    RunState,
)
from budgeteer.backends.k8s_manifest import (
    MARKETS,
    K8sPlacement,
    K8sSettings,
    dns_label,
    job_name,
    render_job,
)
from budgeteer.clock import ManualClock
from budgeteer.config import load_config
from budgeteer.core.pools import PoolSettings
from budgeteer.domain.offering import Market
from budgeteer.errors import SpecError, SpecErrors
from builders import make_offering
from engines import engine_missing
from k8s_fake import FakeApiServer

try:
    import kubernetes_validate

    from budgeteer.backends.kubernetes import (
        KubernetesBackend,
        KubernetesUnavailable,
        api_client_factory,
    )
except ImportError:  # pragma: no cover - the kubernetes extra
    kubernetes_validate = None

PY = sys.executable
T0 = datetime(2026, 12, 3, 12, tzinfo=UTC)
SPOT = replace(
    make_offering("aws-spot", market=Market.SPOT, price=0.9, accelerator="V100"),
    instance_type="p3.2xlarge",
    zones=("use1-az2",),
)
ON_DEMAND = replace(
    make_offering("aws-od", price=3.06, accelerator="V100"), instance_type="p3.2xlarge"
)
SETTINGS = K8sSettings(
    namespace="ml",
    images={"V100": "registry.example.com/train:1.4", "*": "registry.example.com/train:1.4-cpu"},
    placements={
        SPOT.id: K8sPlacement(
            {"pool": "gpu-spot"},
            ({"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},),
        )
    },
    grace_seconds=45,
    unschedulable_seconds=300,
)
DNS = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.fixture(autouse=True)
def _extra() -> None:
    if kubernetes_validate is None:
        engine_missing(
            "the kubernetes extra is not installed (pip install 'budgeteer[kubernetes]')"
        )


def _request(
    offering: Any = ON_DEMAND, *, job: str = "Churn_Retrain.v2", attempt: int = 1, n: int = 1
) -> LaunchRequest:
    return LaunchRequest(
        job_id=job,
        attempt=attempt,
        offering=offering,
        command=(PY, "-m", "train", "--epochs", "3"),
        checkpoint_dir=Path("/unused"),
        instances=n,
        workers=n,
        env={"BUDGETEER_API_URL": "https://budgeteer.example", "BUDGETEER_TOKEN": "tok"},
    )


def _valid(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, "1.32", strict=True)


# -- the manifest -------------------------------------------------------------------------------
@pytest.mark.parametrize("platform", sorted(MARKETS))
def test_a_spot_job_is_schema_valid_and_asks_for_the_platforms_spot_nodes(platform: str) -> None:
    settings = replace(SETTINGS, platform=platform)
    manifest = render_job(settings, _request(SPOT), "d1", {"BUDGETEER_JOB_ID": "x"})
    _valid(manifest)
    marker = MARKETS[platform]
    pod = manifest["spec"]["template"]["spec"]
    assert pod["nodeSelector"][marker.label] == marker.spot
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "p3.2xlarge"
    assert pod["nodeSelector"]["topology.k8s.aws/zone-id"] == "use1-az2"
    assert pod["nodeSelector"]["pool"] == "gpu-spot"
    keys = {t["key"] for t in pod["tolerations"]}
    assert {"nvidia.com/gpu", "dedicated"} <= keys
    assert ("kubernetes.azure.com/scalesetpriority" in keys) is (platform == "aks")
    assert pod["terminationGracePeriodSeconds"] == 45
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["image"] == "registry.example.com/train:1.4"
    rules = manifest["spec"]["podFailurePolicy"]["rules"]
    assert rules == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    assert manifest["spec"]["backoffLimit"] == 0


def test_on_demand_multi_node_kueue_and_a_checkpoint_claim() -> None:
    settings = replace(
        SETTINGS, queue_name="team-ml", checkpoint_claim="checkpoints", platform="gke"
    )
    manifest = render_job(settings, _request(ON_DEMAND, n=3), "d1", {"BUDGETEER_TOKEN": "tok"})
    _valid(manifest)
    spec = manifest["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 3
    assert spec["suspend"] is True  # Kueue admits it
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-ml"
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-spot"] == "false"
    assert "topology.k8s.aws/zone-id" not in pod["nodeSelector"]  # offered in any zone
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert (
        "job-completion-index" in env["BUDGETEER_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    )
    assert env["BUDGETEER_NUM_NODES"]["value"] == "3"
    assert env["BUDGETEER_CHECKPOINT_DIR"]["value"] == "/budgeteer/checkpoints/Churn_Retrain.v2"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "checkpoints"
    assert pod["affinity"]["podAntiAffinity"]  # one rank per node


@given(st.text(min_size=1, max_size=200))
def test_names_are_dns_labels_and_distinct_ids_stay_distinct(text: str) -> None:
    label = dns_label(text)
    assert DNS.match(label), label
    assert len(label) <= 63
    other = text + "x"
    assert dns_label(other) != label


def test_the_job_name_carries_deployment_job_and_attempt() -> None:
    name = job_name(_request(job="ctr", attempt=3), "ab12cd34")
    assert name == "bgt-ab12cd34-ctr-3"
    assert DNS.match(job_name(_request(job="Churn_Retrain.v2"), "ab12cd34"))


# -- against the fake API server ------------------------------------------------------------------
@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.close()


def _backend(fake: FakeApiServer, tmp_path: Path, clock: Any = None) -> KubernetesBackend:
    factory = api_client_factory(str(fake.kubeconfig(tmp_path)), None)
    return KubernetesBackend(clock or ManualClock(T0), SETTINGS, factory, deployment="d1")


def _launched(fake: FakeApiServer, handle: Handle) -> dict[str, Any]:
    return fake.job(handle.id)


def test_a_job_is_created_runs_and_succeeds(fake: FakeApiServer, tmp_path: Path) -> None:
    backend = _backend(fake, tmp_path)
    handle = backend.launch(_request(SPOT))
    sent = next(body for method, path, body in fake.requests if method == "POST")
    _valid(sent)
    assert sent["metadata"]["namespace"] == "ml"
    assert backend.status(handle).state is RunState.PROVISIONING
    fake.run(handle.id)
    assert backend.status(handle).state is RunState.RUNNING
    fake.succeed(handle.id)
    status = backend.status(handle)
    assert status.state is RunState.SUCCEEDED
    assert status.exit_code == 0


def test_a_failed_pod_fails_the_attempt_with_its_code(fake: FakeApiServer, tmp_path: Path) -> None:
    backend = _backend(fake, tmp_path)
    handle = backend.launch(_request(ON_DEMAND, n=2))
    fake.run(handle.id)
    fake.fail(handle.id, 7, index=1)
    status = backend.status(handle)
    assert status.state is RunState.FAILED
    assert status.exit_code == 7
    assert handle.id not in {n for (_, n) in fake.jobs}  # the other rank stopped with it


def test_a_disrupted_pod_is_a_preemption_and_the_job_is_deleted(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    backend = _backend(fake, tmp_path)
    handle = backend.launch(_request(SPOT))
    fake.run(handle.id)
    fake.disrupt(handle.id, "DeletionByTaintManager")
    status = backend.status(handle)
    assert status.state is RunState.PREEMPTED
    assert "DeletionByTaintManager" in status.reason
    deletes = [(path, body) for method, path, body in fake.requests if method == "DELETE"]
    assert deletes
    assert deletes[-1][0].endswith(f"/jobs/{handle.id}")
    assert deletes[-1][1]["propagationPolicy"] == "Foreground"
    assert deletes[-1][1]["gracePeriodSeconds"] == 45


def test_stop_deletes_the_job_and_ends_stopped_with_the_reason(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    backend = _backend(fake, tmp_path)
    handle = backend.launch(_request(ON_DEMAND))
    fake.run(handle.id)
    backend.stop(handle, "cancelled by the owner")
    status = backend.status(handle)
    assert status.state is RunState.STOPPED
    assert status.reason == "cancelled by the owner"


def test_pods_that_find_no_node_end_the_attempt_and_rest_the_offering(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    clock = ManualClock(T0)
    backend = _backend(fake, tmp_path, clock)
    handle = backend.launch(_request(SPOT))
    fake.unschedulable(handle.id)
    clock.advance(200)
    assert backend.status(handle).state is RunState.PROVISIONING  # not yet: 300 s
    clock.advance(150)
    status = backend.status(handle)
    assert status.state is RunState.PREEMPTED
    assert "no capacity" in status.reason
    assert "didn't match" in status.reason
    with pytest.raises(CapacityUnavailable):
        backend.launch(_request(SPOT, attempt=2))
    backend.launch(_request(ON_DEMAND, attempt=2))  # another offering is fine
    clock.advance(400)
    backend.launch(_request(SPOT, attempt=3))  # the rest is over


def test_a_restarted_backend_re_attaches_and_a_duplicate_create_adopts(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    request = _request(ON_DEMAND)
    handle = _backend(fake, tmp_path).launch(request)
    again = _backend(fake, tmp_path)
    adopted = again.adopt(request)
    assert adopted is not None
    assert adopted.id == handle.id
    assert again.adopt(_request(ON_DEMAND, attempt=9)) is None
    third = _backend(fake, tmp_path)
    assert third.launch(request).id == handle.id  # 409 AlreadyExists → the same attempt


def test_api_server_errors_are_transient_or_final(fake: FakeApiServer, tmp_path: Path) -> None:
    backend = _backend(fake, tmp_path)
    fake.fail_next = [503]
    with pytest.raises(KubernetesUnavailable, match="503"):
        backend.launch(_request(ON_DEMAND))
    fake.fail_next = [422]
    with pytest.raises(LaunchFailed, match="422"):
        backend.launch(_request(ON_DEMAND, attempt=2))


# -- pools: the node pools' idle nodes ----------------------------------------------------------
def test_a_pools_idle_ready_nodes_are_its_warm_instances_and_its_max_holds(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    factory = api_client_factory(str(fake.kubeconfig(tmp_path)), None)
    backend = KubernetesBackend(
        ManualClock(T0),
        SETTINGS,
        factory,
        deployment="d1",
        pools={SPOT.id: PoolSettings(SPOT.id, maximum=2)},
        offerings={o.id: o for o in (SPOT, ON_DEMAND)},
    )
    spot_nodes = {
        "node.kubernetes.io/instance-type": "p3.2xlarge",
        "topology.k8s.aws/zone-id": "use1-az2",
        "karpenter.sh/capacity-type": "spot",
        "pool": "gpu-spot",
    }
    assert backend.warm_instances() == {}  # no node yet: the autoscaler brings one per pod
    fake.add_node("n1", spot_nodes)
    fake.add_node("n2", spot_nodes)
    fake.add_node("n3", spot_nodes, ready=False)  # still booting
    fake.add_node("n4", spot_nodes, cordoned=True)  # being drained
    fake.add_node("n5", spot_nodes | {"pool": "other"})  # another node pool
    fake.add_node("n6", spot_nodes | {"karpenter.sh/capacity-type": "on-demand"})
    assert backend.warm_instances() == {SPOT.id: 2}
    first = backend.launch(_request(SPOT))
    fake.run(first.id, node="n1")
    assert backend.warm_instances() == {SPOT.id: 1}  # n1 runs budgeteer's pod
    backend.launch(_request(SPOT, attempt=2))
    with pytest.raises(CapacityUnavailable, match=r"2 of 2 instances in use \(the pool's max\)"):
        backend.launch(_request(SPOT, attempt=3))
    fake.succeed(first.id)
    assert backend.status(first).state is RunState.SUCCEEDED
    assert backend.warm_instances() == {SPOT.id: 2}  # n1 idle again: warm until scale-down
    backend.launch(_request(SPOT, attempt=3))  # the first ended: room under max again
    assert backend.pool_settings() == {SPOT.id: PoolSettings(SPOT.id, maximum=2)}


# -- config, wiring and `budgeteer k8s render` ------------------------------------------------------
def _config(tmp_path: Path, fake: FakeApiServer | None = None, **over: Any) -> Path:
    backend: dict[str, Any] = {
        "kind": "kubernetes",
        "namespace": "ml",
        "platform": "eks",
        "images": {"*": "registry.example.com/train:1.4"},
        "placements": {
            "aws/us-east-1/use1-az1/p3.2xlarge/spot": {"node_selector": {"pool": "gpu-spot"}},
            "aws/us-east-1/*/p3.2xlarge/on_demand": {},
        },
    }
    if fake is not None:
        backend["kubeconfig"] = str(fake.kubeconfig(tmp_path))
    backend.update(over)
    cfg = tmp_path / "budgeteer.yaml"
    cfg.write_text(yaml.safe_dump({"store": "sqlite:///state.db", "backend": backend}))
    return cfg


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "budgeteer", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_k8s_render_prints_a_valid_job_for_a_submitted_job(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    job = {
        "name": "ctr",
        "team": "ads",
        "resources": {"accelerators": ["V100"]},
        "work": {"reference_hours": 1},
        "command": [PY, "-m", "train"],
    }
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump([job]))
    assert _cli("submit", str(tmp_path / "jobs.yaml"), "--config", str(cfg)).returncode == 0
    out = _cli(
        "k8s",
        "render",
        "ctr",
        "--config",
        str(cfg),
        "--offering",
        "aws/us-east-1/use1-az1/p3.2xlarge/spot",
    )
    assert out.returncode == 0, out.stderr
    manifest = yaml.safe_load(out.stdout)
    _valid(manifest)
    selector = manifest["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["eks.amazonaws.com/capacityType"] == "SPOT"
    assert selector["pool"] == "gpu-spot"
    wrong = _cli("k8s", "render", "ctr", "--config", str(cfg), "--offering", "gcp/nowhere")
    assert wrong.returncode == 2
    assert "--offering" in wrong.stderr
    unknown = _cli("k8s", "render", "nope", "--config", str(cfg))
    assert unknown.returncode == 2


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"namespace": "Not_DNS"}, "backend.namespace"),
        ({"platform": "openshift"}, "backend.platform"),
        ({"images": {}}, "backend.images"),
        ({"placements": {}}, "backend.placements"),
        ({"queue_name": "UPPER"}, "backend.queue_name"),
        ({"grace_seconds": -5}, "backend.grace_seconds"),
    ],
)
def test_bad_kubernetes_configs_are_refused_by_field(
    tmp_path: Path, over: dict[str, Any], field: str
) -> None:
    with pytest.raises(SpecErrors) as err:
        load_config(_config(tmp_path, **over))
    assert field in {e.field for e in err.value.errors}


def test_pools_on_kubernetes_take_max_and_batch_wait_and_leave_the_rest_to_the_autoscaler(
    tmp_path: Path,
) -> None:
    from budgeteer.service.wiring import build  # noqa: PLC0415

    path = _config(tmp_path)
    doc = yaml.safe_load(path.read_text())
    spot = "aws/us-east-1/use1-az1/p3.2xlarge/spot"
    for pool, field in [
        ({"min": 1, "team": "ml"}, "pools[0].min"),
        ({"idle_timeout": "5m"}, "pools[0].idle_timeout"),
        (
            {"team": "ml", "warm": [{"at": "0 2 * * *", "instances": 1, "for": "1h"}]},
            "pools[0].warm",
        ),
    ]:
        path.write_text(yaml.safe_dump(doc | {"pools": [{"offerings": spot, **pool}]}))
        with pytest.raises(SpecErrors) as err:
            load_config(path)
        assert any(field in e.problem and "autoscaler" in e.problem for e in err.value.errors)
    path.write_text(
        yaml.safe_dump(doc | {"pools": [{"offerings": spot, "max": 3, "batch_wait": "10m"}]})
    )
    cfg, root = load_config(path)
    backend = build(cfg, root).scheduler().backend
    assert isinstance(backend, KubernetesBackend)
    assert {k: (v.maximum, v.batch_wait_seconds) for k, v in backend.pool_settings().items()} == {
        spot: (3, 600.0)
    }


def test_wiring_refuses_unknown_placements_and_accelerators_without_an_image(
    tmp_path: Path,
) -> None:
    from budgeteer.service.wiring import build  # noqa: PLC0415

    cfg, root = load_config(_config(tmp_path, placements={"aws/nowhere": {}}))
    with pytest.raises(SpecError, match="no such offering"):
        build(cfg, root).scheduler()
    cfg, root = load_config(_config(tmp_path, images={"A100": "img"}))
    with pytest.raises(SpecError, match="no image for V100") as err:
        build(cfg, root).scheduler()
    assert err.value.field == "backend.images"


def test_the_example_kubernetes_config_plans_on_its_placements(tmp_path: Path) -> None:
    from budgeteer.service.wiring import build  # noqa: PLC0415

    cfg, root = load_config(Path(__file__).parents[1] / "examples" / "kubernetes.yaml")
    cfg = cfg.model_copy(update={"store": f"sqlite:///{tmp_path / 'example.db'}"})
    sched = build(cfg, root).scheduler()
    assert sched.backend.name == "kubernetes"
    assert {o.id for o in sched.catalog.offerings} == set(cfg.backend.placements)  # type: ignore[union-attr]
