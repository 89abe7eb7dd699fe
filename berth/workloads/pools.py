"""AgentPools in a workload: what a replica pod looks like, and the pools file for the services.

An AgentPool's replicas are built from ``spec.template`` (a PodTemplateSpec, as a Deployment's),
or, without one, from ``spec.gpuRequirements`` (``count`` whole GPUs, ``type`` as the required
``nvidia.com/gpu.product``, ``topology.locality``; or ``fraction``/``memoryMiB`` for a share).
Every replica gets ``schedulerName: berth`` unless the template says otherwise, the label
``berth.io/agent-pool``, and an owner reference to its pool.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from collections.abc import Sequence

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

from .model import LABEL_AGENT_POOL, AgentPool, PolicyObject, Workload, WorkloadError

def _template_from_requirements(spec: dict[str, Any]) -> dict[str, Any]:
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
            pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": LABEL_GPU_PRODUCT, "operator": "In", "values": [str(gpu["type"])]}]}]}}}
    elif "fraction" in gpu:
        annotations[ANNOTATION_GPU_FRACTION] = str(gpu["fraction"])
        if "memoryMiB" in gpu:
            annotations[ANNOTATION_GPU_MEMORY] = str(gpu["memoryMiB"])
    limits = {k: v for k, v in requests.items() if k not in ("cpu", "memory")}
    resources: dict[str, Any] = {"requests": requests, **({"limits": limits} if limits else {})}
    pod_spec["containers"] = [{"name": "server", "image": "registry.example/model-server:1",
                               "resources": resources}]
    return {"metadata": {"annotations": annotations}, "spec": pod_spec}


def replica_manifest(pool: AgentPool, index: int) -> dict[str, Any]:
    """The Pod manifest of replica ``index`` of ``pool`` (named ``<pool>-<index>``)."""
    template = copy.deepcopy(dict(pool.spec.get("template") or _template_from_requirements(dict(pool.spec))))
    metadata = dict(template.get("metadata") or {})
    spec = dict(template.get("spec") or {})
    spec.setdefault("schedulerName", "berth")
    labels = dict(metadata.get("labels") or {})
    labels[LABEL_AGENT_POOL] = pool.name
    metadata.update({
        "name": f"{pool.name}-{index}", "namespace": pool.namespace, "labels": labels,
        "ownerReferences": [{"apiVersion": "berth.io/v1alpha1", "kind": "AgentPool", "name": pool.name,
                             "controller": True}],
    })
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def replica_admission(pool: AgentPool, index: int, policies: Sequence[PolicyObject] = ()) -> PodManifest:
    """Replica ``index`` of ``pool`` as the API server's admission sees it: priority resolved
    from the PriorityClasses and LimitRange defaults applied, from ``policies``; ``rejection``
    says whether LimitRanger would refuse it. Raises WorkloadError for a template that is not a
    pod."""
    classes = {p.name: p for p in policies if isinstance(p, PriorityClassInfo)}
    ranges = [p for p in policies if isinstance(p, LimitRangeInfo) and p.namespace == pool.namespace]
    try:
        return pod_from_manifest(replica_manifest(pool, index), priority_classes=classes,
                                 limit_ranges=sorted(ranges, key=lambda r: r.name))
    except ManifestError as exc:
        raise WorkloadError(f"AgentPool {pool.key}: spec.template: {exc}") from exc


def replica_pod(pool: AgentPool, index: int, policies: Sequence[PolicyObject] = ()) -> PodInfo:
    """Replica ``index`` of ``pool`` as the API server would admit it (see
    :func:`replica_admission`); raises WorkloadError if it would be refused."""
    manifest = replica_admission(pool, index, policies)
    if manifest.rejection is not None:
        raise WorkloadError(f"AgentPool {pool.key}: its replicas would be refused: {manifest.rejection}")
    return manifest.pod


def pool_policies(workload: Workload) -> dict[str, Any]:
    """The pools file (``{pools: {NAMESPACE/NAME: {...}}}``) that the decision and token-lag
    services read: each scaled AgentPool's spec as :class:`berth.decider.pools.PoolPolicy`
    validates it (keys the policy does not know are left out; the replica template stays, so
    the decision cell can size replicas before the first one exists). Pools without
    ``tokensPerSecondPerReplica`` and ``ttftSloMs`` are not scaled and are left out."""
    from berth.decider.pools import merge_cluster_spec

    pools: dict[str, Any] = {}
    for pool in sorted(workload.pools, key=lambda p: p.key):
        if "tokensPerSecondPerReplica" not in pool.spec or "ttftSloMs" not in pool.spec:
            continue
        try:
            policy = merge_cluster_spec(None, pool.spec)
        except ValueError as exc:
            raise WorkloadError(f"AgentPool {pool.key}: {exc}") from exc
        pools[pool.key] = policy.model_dump(mode="json", exclude_unset=True)
    return {"pools": pools}


def write_pools_file(workload: Workload, path: Path) -> None:
    """Write :func:`pool_policies` of ``workload`` as YAML to ``path`` (the services' ``--pools``)."""
    path.write_text(yaml.safe_dump(pool_policies(workload), sort_keys=False))
