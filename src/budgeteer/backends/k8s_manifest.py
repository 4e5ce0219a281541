"""The Kubernetes ``batch/v1`` Job of one attempt (pure: the backend sends it, ``budgeteer k8s
render`` prints it).

- **Name and labels.** ``bgt-<deployment>-<job>-<attempt>`` made a DNS-1123 label (lowercase,
  at most 63 characters, a hash where the job's id had to be cut or changed); labels
  ``app.kubernetes.io/managed-by: budgeteer``, ``budgeteer.io/deployment``, ``budgeteer.io/job``
  (the same sanitised id), ``budgeteer.io/attempt``, and ``budgeteer.io/key`` (the Job's name:
  a restarted service re-attaches by it); the job's real id and offering as annotations; with a
  Kueue queue, ``kueue.x-k8s.io/queue-name`` (Kueue keeps quota; budgeteer decides money and
  market — Kueue admits the Job by un-suspending it).
- **Where.** ``nodeSelector`` ``node.kubernetes.io/instance-type`` (the well-known label), the
  zone for an offering in one zone (``topology.k8s.aws/zone-id`` on AWS, whose catalog zones are
  AZ ids; ``topology.kubernetes.io/zone`` elsewhere), the market by the platform's own label —
  :data:`MARKETS` — and its toleration where spot nodes are tainted (AKS), plus the placement's
  own selectors and tolerations.
- **What.** One container (the image configured for the accelerator) running the command with
  the job's environment; ``nvidia.com/gpu`` (``gpu_resource``) = the offering's GPUs as limits;
  on ``n > 1`` instances an Indexed Job of ``n`` pods (``BUDGETEER_NODE_RANK`` from
  ``JOB_COMPLETION_INDEX``) spread one per node; the checkpoint folder on a persistent volume
  claim when configured (``/budgeteer/checkpoints/<job>``).
- **Failures.** ``backoffLimit: 0`` (budgeteer decides what to try next) and a
  ``podFailurePolicy`` that ignores ``DisruptionTarget`` (a preemption or eviction is not the
  job's failure; the backend reports it ``preempted``); ``restartPolicy: Never``;
  ``terminationGracePeriodSeconds`` = the checkpoint grace.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from budgeteer.backends.base import LaunchRequest
from budgeteer.domain.offering import Market, Offering


@dataclass(frozen=True, slots=True)
class MarketMarker:
    """How a platform marks spot and on-demand nodes: a label (and values), and the taint a
    spot node carries, if any."""

    label: str
    spot: str
    on_demand: str
    spot_taint: tuple[str, str, str] | None = None  # key, value, effect


#: The platforms' node labels for the market (see ``../shared/notes/clouds.md``).
MARKETS: dict[str, MarketMarker] = {
    "karpenter": MarketMarker("karpenter.sh/capacity-type", "spot", "on-demand"),
    "eks": MarketMarker("eks.amazonaws.com/capacityType", "SPOT", "ON_DEMAND"),
    "gke": MarketMarker("cloud.google.com/gke-spot", "true", "false"),
    "aks": MarketMarker(
        "kubernetes.azure.com/scalesetpriority",
        "spot",
        "regular",
        ("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule"),
    ),
}


@dataclass(frozen=True, slots=True)
class K8sPlacement:
    """What a cluster adds for one offering: node selectors and tolerations of its pool."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class K8sSettings:
    """The ``kubernetes`` backend's configuration (see :mod:`budgeteer.backends.kubernetes`)."""

    namespace: str
    images: Mapping[str, str]
    platform: str = "karpenter"
    placements: Mapping[str, K8sPlacement] = field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    queue_name: str | None = None
    checkpoint_claim: str | None = None
    service_account: str | None = None
    grace_seconds: float = 30.0
    unschedulable_seconds: float = 600.0
    ttl_seconds_after_finished: int = 3600

    def image(self, offering: Offering) -> str | None:
        """The image for ``offering``'s accelerator (or the default)."""
        return self.images.get(offering.accelerator) or self.images.get("*")


CHECKPOINT_ROOT = "/budgeteer/checkpoints"
#: The annotation an Indexed Job's pod carries its index in.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def dns_label(text: str, limit: int = 63) -> str:
    """``text`` as a DNS-1123 label: lowercase alphanumerics and ``-``, at most ``limit``
    characters, starting and ending alphanumeric; a short hash of the original is appended
    whenever anything had to change (distinct ids stay distinct)."""
    clean = _NOT_DNS.sub("-", text.lower()).strip("-")
    if clean == text and len(clean) <= limit:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    head = clean[: limit - 9].rstrip("-")
    return f"{head}-{digest}" if head else digest


def job_name(request: LaunchRequest, namespace: str) -> str:
    """The Job's name: ``bgt-<deployment>-<job>-<attempt>`` as a DNS label."""
    return dns_label(f"bgt-{namespace}-{request.job_id}-{request.attempt}")


def node_selector(settings: K8sSettings, offering: Offering) -> dict[str, str]:
    """The labels of ``offering``'s nodes: instance type, zone (one-zone offerings), market by
    the platform's label, and the placement's own selectors."""
    marker = MARKETS[settings.platform]
    selector = {"node.kubernetes.io/instance-type": offering.instance_type}
    if len(offering.zones) == 1:
        zone_label = (
            "topology.k8s.aws/zone-id"
            if offering.provider == "aws"
            else ("topology.kubernetes.io/zone")
        )
        selector[zone_label] = offering.zones[0]
    spot = offering.market is Market.SPOT
    selector[marker.label] = marker.spot if spot else marker.on_demand
    selector.update(settings.placements.get(offering.id, K8sPlacement()).node_selector)
    return selector


def render_job(
    settings: K8sSettings, request: LaunchRequest, deployment: str, env: Mapping[str, str]
) -> dict[str, Any]:
    """The Job manifest (a plain mapping, as ``kubectl apply`` takes it)."""
    offering = request.offering
    name = job_name(request, deployment)
    labels = {
        "app.kubernetes.io/managed-by": "budgeteer",
        "budgeteer.io/deployment": dns_label(deployment),
        "budgeteer.io/job": dns_label(request.job_id),
        "budgeteer.io/attempt": str(request.attempt),
        "budgeteer.io/key": name,
    }
    if settings.queue_name:
        labels["kueue.x-k8s.io/queue-name"] = settings.queue_name
    marker = MARKETS[settings.platform]
    selector = node_selector(settings, offering)
    spot = offering.market is Market.SPOT
    placement = settings.placements.get(offering.id, K8sPlacement())
    tolerations: list[dict[str, str]] = []
    if offering.accelerators_per_instance > 0:
        tolerations.append(
            {"key": settings.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}
        )
    if spot and marker.spot_taint is not None:
        key, value, effect = marker.spot_taint
        tolerations.append({"key": key, "operator": "Equal", "value": value, "effect": effect})
    tolerations += [dict(t) for t in placement.tolerations]
    variables = dict(env)
    checkpoint = f"{CHECKPOINT_ROOT}/{request.job_id}"
    variables |= {
        "BUDGETEER_CHECKPOINT_DIR": checkpoint,
        "BUDGETEER_PROGRESS_FILE": f"{checkpoint}/progress.jsonl",
        "BUDGETEER_NUM_NODES": str(request.instances),
    }
    env_list: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(variables.items())]
    if request.instances > 1:
        env_list.append(
            {
                "name": "BUDGETEER_NODE_RANK",
                "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}
                },
            }
        )
    else:
        env_list.append({"name": "BUDGETEER_NODE_RANK", "value": "0"})
    container: dict[str, Any] = {
        "name": "job",
        "image": settings.image(offering),
        "command": list(request.command),
        "env": env_list,
    }
    if offering.accelerators_per_instance > 0:
        gpus = str(offering.accelerators_per_instance)
        container["resources"] = {"limits": {settings.gpu_resource: gpus}}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": int(settings.grace_seconds),
        "nodeSelector": selector,
        "tolerations": tolerations,
        "containers": [container],
    }
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    if settings.checkpoint_claim:
        pod_spec["volumes"] = [
            {
                "name": "checkpoints",
                "persistentVolumeClaim": {"claimName": settings.checkpoint_claim},
            }
        ]
        container["volumeMounts"] = [
            {"name": "checkpoints", "mountPath": checkpoint, "subPath": dns_label(request.job_id)}
        ]
    if request.instances > 1:  # one pod per node
        pod_spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"budgeteer.io/key": name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "completions": request.instances,
        "parallelism": request.instances,
        "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                }
            ]
        },
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if request.instances > 1:
        spec["completionMode"] = "Indexed"
    if settings.queue_name:
        spec["suspend"] = True  # Kueue admits it
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": {
                "budgeteer.io/job-id": request.job_id,
                "budgeteer.io/offering": offering.id,
            },
        },
        "spec": spec,
    }
