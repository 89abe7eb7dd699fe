"""The replica pods of an AgentPool, as its controller would create them.

An AgentPool's replicas are built from ``spec.template`` (a PodTemplateSpec, as a Deployment's),
or, without one, from ``spec.gpuRequirements`` (``count`` whole GPUs, ``type`` as the required
``nvidia.com/gpu.product``, ``topology.locality``; or ``fraction``/``memoryMiB`` for a share).
Every replica gets ``schedulerName: berth`` unless the template says otherwise, the label
``berth.io/agent-pool``, and an owner reference to its pool.

Pure: no I/O, and the same pool and index always give the same replica.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from berth.kube.manifests import (
    ANNOTATION_GPU_FRACTION,
    ANNOTATION_GPU_LOCALITY,
    ANNOTATION_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    ManifestError,
    PodManifest,
    pod_from_manifest,
)
from berth.schemas.cluster import PodInfo
from berth.schemas.policy import LimitRangeInfo, PriorityClassInfo

__all__ = [
    "LABEL_AGENT_POOL",
    "AgentPool",
    "ReplicaError",
    "replica_admission",
    "replica_manifest",
    "replica_pod",
]

LABEL_AGENT_POOL = "berth.io/agent-pool"
"""Label on the replica pods of an AgentPool (value: the pool's name)."""


class ReplicaError(ValueError):
    """An AgentPool whose replicas cannot be made: its template is not a pod, or admission would
    refuse the replica. The message names the pool (``AgentPool NAMESPACE/NAME: ...``)."""


@dataclass(frozen=True)
class AgentPool:
    """A ``berth.io/v1alpha1`` AgentPool: an inference pool whose replica count Berth scales.

    ``spec`` is the manifest's spec, verbatim. Its controller keeps ``initial_replicas`` replica
    pods at the start and adds or removes replicas when the pool is scaled.
    """

    namespace: str
    name: str
    spec: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def initial_replicas(self) -> int:
        value = self.spec.get("replicas", self.spec.get("minReplicas", 1))
        return int(value)


def _template_from_requirements(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A PodTemplateSpec for a pool that gives only ``gpuRequirements``: one model-server
    container asking for the GPUs (or the GPU share) and tolerating GPU taints."""
    gpu = spec.get("gpuRequirements") or {}
    requests: dict[str, str] = {"cpu": "4", "memory": "32Gi"}
    annotations: dict[str, str] = {}
    pod_spec: dict[str, Any] = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    if "count" in gpu:
        requests["nvidia.com/gpu"] = str(gpu["count"])
        locality = (gpu.get("topology") or {}).get("locality")
        if locality:
            annotations[ANNOTATION_GPU_LOCALITY] = str(locality)
        if gpu.get("type"):
            pod_spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": LABEL_GPU_PRODUCT, "operator": "In", "values": [str(gpu["type"])]}
                                ]
                            }
                        ]
                    }
                }
            }
    elif "fraction" in gpu:
        annotations[ANNOTATION_GPU_FRACTION] = str(gpu["fraction"])
        if "memoryMiB" in gpu:
            annotations[ANNOTATION_GPU_MEMORY] = str(gpu["memoryMiB"])
    limits = {k: v for k, v in requests.items() if k not in ("cpu", "memory")}
    resources: dict[str, Any] = {"requests": requests, **({"limits": limits} if limits else {})}
    pod_spec["containers"] = [{"name": "server", "image": "registry.example/model-server:1", "resources": resources}]
    return {"metadata": {"annotations": annotations}, "spec": pod_spec}


def replica_manifest(pool: AgentPool, index: int) -> dict[str, Any]:
    """The Pod manifest of replica ``index`` of ``pool`` (named ``<pool>-<index>``)."""
    template = copy.deepcopy(dict(pool.spec.get("template") or _template_from_requirements(pool.spec)))
    metadata = dict(template.get("metadata") or {})
    spec = dict(template.get("spec") or {})
    spec.setdefault("schedulerName", "berth")
    labels = dict(metadata.get("labels") or {})
    labels[LABEL_AGENT_POOL] = pool.name
    metadata.update(
        {
            "name": f"{pool.name}-{index}",
            "namespace": pool.namespace,
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "berth.io/v1alpha1", "kind": "AgentPool", "name": pool.name, "controller": True}
            ],
        }
    )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def replica_admission(pool: AgentPool, index: int, policies: Sequence[object] = ()) -> PodManifest:
    """Replica ``index`` of ``pool`` as the API server's admission sees it: priority resolved
    from the PriorityClasses and LimitRange defaults applied, taken from ``policies`` (policy
    objects of any kind; the other kinds are ignored); ``rejection`` says whether LimitRanger
    would refuse it. Raises ReplicaError for a template that is not a pod."""
    classes = {p.name: p for p in policies if isinstance(p, PriorityClassInfo)}
    ranges = [p for p in policies if isinstance(p, LimitRangeInfo) and p.namespace == pool.namespace]
    try:
        return pod_from_manifest(
            replica_manifest(pool, index), priority_classes=classes, limit_ranges=sorted(ranges, key=lambda r: r.name)
        )
    except ManifestError as exc:
        raise ReplicaError(f"AgentPool {pool.key}: spec.template: {exc}") from exc


def replica_pod(pool: AgentPool, index: int, policies: Sequence[object] = ()) -> PodInfo:
    """Replica ``index`` of ``pool`` as the API server would admit it (see
    :func:`replica_admission`); raises ReplicaError if it would be refused."""
    manifest = replica_admission(pool, index, policies)
    if manifest.rejection is not None:
        raise ReplicaError(f"AgentPool {pool.key}: its replicas would be refused: {manifest.rejection}")
    return manifest.pod
