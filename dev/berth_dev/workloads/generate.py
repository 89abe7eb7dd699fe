"""Deterministic workload generators, written as the Kubernetes manifests a user would write.

Each generator returns manifest documents (dicts); :func:`berth_dev.workloads.from_documents` turns
them into a :class:`~berth_dev.workloads.Workload`, and ``berth cluster-sim generate`` writes them to
a file that loads back into the same workload. Same name and seed, same documents, byte for byte:
all randomness comes from one ``random.Random(seed)``, drawn in a fixed order, and nothing
iterates an unordered collection.

``demo``: a mixed GPU cluster for the end-to-end demo, see :func:`demo_documents`.
``bench``: many identical GPU nodes and a stream of pods for the pipeline benchmark, see
:func:`bench_documents`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from berth.kube.manifests import (
    ANNOTATION_CARBON,
    ANNOTATION_GPU_FRACTION,
    ANNOTATION_GPU_LOCALITY,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPU_MIG,
    ANNOTATION_GPU_TOPOLOGY,
    ANNOTATION_PRICE,
    LABEL_CAPACITY_TYPE,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_POD_GROUP,
    LABEL_REGION,
    LABEL_ZONE,
)

from .manifests import TIMELINE_API_VERSION, TIMELINE_KIND
from .model import ANNOTATION_ARRIVAL, ANNOTATION_RUN

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
CARBON_BY_ZONE = {"us-east-1a": 380.0, "us-east-1b": 250.0, "us-east-1c": 120.0}
"""Grid carbon intensity per zone, gCO2eq/kWh: made-up but distinct, so carbon scoring matters."""


# --- manifest builders ---------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def pod_manifest(
    name: str,
    namespace: str,
    *,
    requests: Mapping[str, str],
    at_s: float = 0.0,
    run_s: float | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gpu_toleration: bool = False,
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    priority_class: str | None = None,
    image: str = "registry.example/app:1",
) -> dict[str, Any]:
    """A Pod for Berth (``schedulerName: berth``) with one container. Extended resources (GPUs,
    MIG slices) are given as limits too, as Kubernetes requires for them."""
    meta_annotations = {ANNOTATION_ARRIVAL: _seconds(at_s)}
    if run_s is not None:
        meta_annotations[ANNOTATION_RUN] = _seconds(run_s)
    meta_annotations.update(annotations or {})
    limits = {k: v for k, v in requests.items() if k not in ("cpu", "memory")}
    resources: dict[str, Any] = {"requests": dict(requests)}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {"schedulerName": "berth"}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = dict(affinity)
    if gpu_toleration:
        spec["tolerations"] = [dict(GPU_TOLERATION)]
    spec["containers"] = [{"name": "main", "image": image, "resources": resources}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": meta_annotations,
        },
        "spec": spec,
    }


def _required_product(*products: str) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": LABEL_GPU_PRODUCT, "operator": "In", "values": list(products)}]}
                ]
            }
        }
    }


def _preferred_zone(zone: str, weight: int = 50) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": weight,
                    "preference": {"matchExpressions": [{"key": LABEL_ZONE, "operator": "In", "values": [zone]}]},
                }
            ]
        }
    }


@dataclass(frozen=True)
class GpuNodeType:
    """One kind of GPU server. ``nvlink``: ``all`` (NVSwitch, every GPU peers with every other),
    ``pairs`` (NVLink bridges between GPU 2k and 2k+1) or ``none`` (PCIe only)."""

    product: str
    gpu_memory_mib: int
    gpus: int
    cpu: int
    memory_gi: int
    nvlink: str
    numa_nodes: int
    price_on_demand: float
    price_spot: float
    instance_type: str
    mig: Mapping[int, Mapping[str, int]] = field(default_factory=dict)
    """Device index → MIG profile → count, for devices partitioned with MIG ("mixed" strategy)."""

    def peers(self, index: int) -> list[int]:
        if self.nvlink == "all":
            return [p for p in range(self.gpus) if p != index]
        if self.nvlink == "pairs":
            return [index ^ 1] if (index ^ 1) < self.gpus else []
        return []

    def topology(self) -> str:
        per_numa = max(1, self.gpus // self.numa_nodes)
        devices = [
            {
                "index": i,
                "numa": min(i // per_numa, self.numa_nodes - 1),
                "nvlink": self.peers(i),
                "pcieSwitch": f"pcie-{i // 2}",
            }
            for i in range(self.gpus)
        ]
        return json.dumps({"devices": devices}, separators=(",", ":"))


H100 = GpuNodeType("NVIDIA-H100-80GB-HBM3", 81559, 8, 192, 2048, "all", 2, 98.32, 39.33, "p5.48xlarge")
A100_PCIE = GpuNodeType("NVIDIA-A100-PCIE-80GB", 81920, 8, 128, 1024, "pairs", 2, 40.96, 16.38, "a100-pcie-8x")
A100_MIG = GpuNodeType(
    "NVIDIA-A100-SXM4-40GB",
    40960,
    8,
    96,
    1152,
    "all",
    2,
    32.77,
    13.11,
    "p4d.24xlarge",
    mig={0: {"1g.5gb": 7}, 1: {"1g.5gb": 7}, 2: {"3g.20gb": 2}, 3: {"3g.20gb": 2}},
)
L4 = GpuNodeType("NVIDIA-L4", 23034, 4, 48, 192, "none", 1, 4.89, 1.96, "g6.12xlarge")


def gpu_node_manifest(
    name: str, kind: GpuNodeType, *, zone: str, spot: bool = False, extra_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A GPU Node with GPU Feature Discovery labels, the GPU taint, its price, carbon intensity
    and per-device topology (``berth.io/gpu-topology``; ``berth.io/gpu-mig`` for MIG devices)."""
    whole = kind.gpus - len(kind.mig)
    labels = {
        LABEL_GPU_PRODUCT: kind.product,
        LABEL_GPU_MEMORY: str(kind.gpu_memory_mib),
        LABEL_GPU_COUNT: str(kind.gpus),
        LABEL_ZONE: zone,
        LABEL_REGION: REGION,
        LABEL_CAPACITY_TYPE: "spot" if spot else "on-demand",
        "node.kubernetes.io/instance-type": kind.instance_type,
        "kubernetes.io/hostname": name,
    }
    labels.update(extra_labels or {})
    annotations = {
        ANNOTATION_GPU_TOPOLOGY: kind.topology(),
        ANNOTATION_PRICE: f"{kind.price_spot if spot else kind.price_on_demand:.2f}",
        ANNOTATION_CARBON: f"{CARBON_BY_ZONE.get(zone, 300.0):.0f}",
    }
    capacity = {"cpu": str(kind.cpu), "memory": f"{kind.memory_gi}Gi", "pods": "110", GPU: str(whole)}
    if kind.mig:
        annotations[ANNOTATION_GPU_MIG] = json.dumps(
            {str(i): dict(p) for i, p in sorted(kind.mig.items())}, separators=(",", ":"), sort_keys=True
        )
        totals: dict[str, int] = {}
        for profiles in kind.mig.values():
            for profile, count in profiles.items():
                totals[profile] = totals.get(profile, 0) + count
        capacity.update({f"nvidia.com/mig-{p}": str(c) for p, c in sorted(totals.items())})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"taints": [dict(GPU_TAINT)]},
        "status": {"capacity": capacity},
    }


def cpu_node_manifest(name: str, *, zone: str, cpu: int = 64, memory_gi: int = 256) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                LABEL_ZONE: zone,
                LABEL_REGION: REGION,
                LABEL_CAPACITY_TYPE: "on-demand",
                "kubernetes.io/hostname": name,
            },
            "annotations": {ANNOTATION_PRICE: "2.72", ANNOTATION_CARBON: f"{CARBON_BY_ZONE.get(zone, 300.0):.0f}"},
        },
        "status": {"capacity": {"cpu": str(cpu), "memory": f"{memory_gi}Gi", "pods": "110"}},
    }


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _priority_class(
    name: str, value: int, *, preemption: str = "PreemptLowerPriority", default: bool = False
) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
        "preemptionPolicy": preemption,
    }


def _pod_group(name: str, namespace: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }


# --- demo ----------------------------------------------------------------------------------------

DEMO_POOLS = (
    # name, namespace, replicas per pool at start, GPU request of a replica, scaling policy
    (
        "llama-70b",
        "serving",
        2,
        {"count": 4, "locality": "nvlink", "product": H100.product},
        {"tokensPerSecondPerReplica": 2500, "ttftSloMs": 2000, "minReplicas": 1, "maxReplicas": 8},
    ),
    (
        "embedder",
        "serving",
        2,
        {"fraction": "0.5", "memoryMiB": 20480},
        {"tokensPerSecondPerReplica": 8000, "ttftSloMs": 500, "minReplicas": 1, "maxReplicas": 6},
    ),
)


def _agent_pool(
    name: str, namespace: str, replicas: int, gpu: Mapping[str, Any], scaling: Mapping[str, Any]
) -> dict[str, Any]:
    """An AgentPool with an explicit replica pod template (what the simulator instantiates)."""
    annotations: dict[str, str] = {}
    requests = {"cpu": "8", "memory": "64Gi"}
    affinity = None
    if "count" in gpu:
        requests[GPU] = str(gpu["count"])
        annotations[ANNOTATION_GPU_LOCALITY] = gpu.get("locality", "any")
        if gpu.get("product"):
            affinity = _required_product(gpu["product"])
    else:
        annotations[ANNOTATION_GPU_FRACTION] = gpu["fraction"]
        annotations[ANNOTATION_GPU_MEMORY] = str(gpu["memoryMiB"])
    template_spec: dict[str, Any] = {"schedulerName": "berth", "priorityClassName": "serving-critical"}
    if affinity:
        template_spec["affinity"] = affinity
    template_spec["tolerations"] = [dict(GPU_TOLERATION)]
    limits = {k: v for k, v in requests.items() if k not in ("cpu", "memory")}
    template_spec["containers"] = [
        {
            "name": "server",
            "image": "registry.example/vllm:0.6",
            "resources": {"requests": requests, **({"limits": limits} if limits else {})},
        }
    ]
    gpu_requirements: dict[str, Any] = (
        {"count": gpu["count"], "type": gpu.get("product", ""), "topology": {"locality": gpu.get("locality", "any")}}
        if "count" in gpu
        else {"fraction": gpu["fraction"], "memoryMiB": gpu["memoryMiB"]}
    )
    return {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": name,
            "replicas": replicas,
            **scaling,
            "gpuRequirements": gpu_requirements,
            "template": {"metadata": {"labels": {"app": name}, "annotations": annotations}, "spec": template_spec},
        },
    }


def demo_documents(seed: int = 1) -> list[dict[str, Any]]:
    """The demo cluster and workload (about 120 nodes, 1,150 pods, 15 simulated minutes).

    Nodes: 48 H100 (NVSwitch; 12 spot), 40 A100 PCIe (NVLink pairs; 8 spot), 8 A100 with MIG
    (4 whole GPUs, 14 ``1g.5gb`` and 4 ``3g.20gb`` slices each), 16 L4 (PCIe only), 8 CPU-only,
    across three zones. Pods, arriving over 600 s with run times: whole 1/2/4/8-GPU, fractional
    0.25/0.5, MIG slices, CPU-only, gangs (PodGroups of 4, one that can never be complete) and a
    handful that fit nowhere (16 GPUs, a GPU model no node has, 512 CPUs). Two AgentPools with
    queue-lag bursts; three spot notices (the nodes are reclaimed at the deadline); one node
    decommissioned.
    """
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = [_namespace(n) for n in ("ml", "serving", "batch", "research")]
    docs += [
        _priority_class("serving-critical", 100000),
        _priority_class("training", 10000),
        _priority_class("batch-low", 100, preemption="Never"),
    ]

    nodes: list[dict[str, Any]] = []
    spot_nodes: list[str] = []
    for kind, prefix, count, spot_every in (
        (H100, "h100", 48, 4),
        (A100_PCIE, "a100", 40, 5),
        (A100_MIG, "a100mig", 8, 0),
        (L4, "l4", 16, 0),
    ):
        for i in range(count):
            zone = ZONES[i % len(ZONES)]
            spot = bool(spot_every) and i % spot_every == spot_every - 1
            name = f"{prefix}-{zone[-1]}-{i:03d}"
            nodes.append(gpu_node_manifest(name, kind, zone=zone, spot=spot))
            if spot:
                spot_nodes.append(name)
    for i in range(8):
        nodes.append(cpu_node_manifest(f"cpu-{ZONES[i % 3][-1]}-{i:03d}", zone=ZONES[i % 3]))
    docs += nodes

    pods: list[dict[str, Any]] = []

    def arrival() -> float:
        return round(rng.uniform(0, 600), 3)

    def maybe_run(low: float, high: float, forever: float) -> float | None:
        return None if rng.random() < forever else round(rng.uniform(low, high), 1)

    products = (H100.product, A100_PCIE.product)
    for i in range(330):
        affinity = _required_product(rng.choice(products)) if rng.random() < 0.3 else None
        if affinity is None and rng.random() < 0.3:
            affinity = _preferred_zone(rng.choice(ZONES))
        pods.append(
            pod_manifest(
                f"infer-1g-{i:04d}",
                "serving",
                at_s=arrival(),
                run_s=maybe_run(300, 1800, 0.4),
                requests={"cpu": "8", "memory": "64Gi", GPU: "1"},
                gpu_toleration=True,
                labels={"app": "inference", "size": "1g"},
                priority_class="serving-critical",
                affinity=affinity,
            )
        )
    for size, count, locality in ((2, 120, "nvlink"), (4, 80, "nvlink"), (8, 40, "same-node")):
        for i in range(count):
            affinity = _required_product(H100.product) if size == 8 and rng.random() < 0.5 else None
            pods.append(
                pod_manifest(
                    f"train-{size}g-{i:04d}",
                    "ml",
                    at_s=arrival(),
                    run_s=maybe_run(600, 3600, 0.2),
                    requests={"cpu": str(12 * size), "memory": f"{96 * size}Gi", GPU: str(size)},
                    annotations={ANNOTATION_GPU_LOCALITY: locality},
                    gpu_toleration=True,
                    labels={"app": "training", "size": f"{size}g"},
                    priority_class="training",
                    affinity=affinity,
                )
            )
    for share, count in (("0.25", 150), ("0.5", 100)):
        memory = 20480 if share == "0.25" else 40960
        for i in range(count):
            pods.append(
                pod_manifest(
                    f"share-{share[2:]}-{i:04d}",
                    "research",
                    at_s=arrival(),
                    run_s=maybe_run(120, 900, 0.1),
                    requests={"cpu": "4", "memory": "32Gi"},
                    gpu_toleration=True,
                    annotations={ANNOTATION_GPU_FRACTION: share, ANNOTATION_GPU_MEMORY: str(memory)},
                    labels={"app": "notebook", "share": share},
                )
            )
    for profile, count in (("1g.5gb", 30), ("3g.20gb", 10)):
        for i in range(count):
            pods.append(
                pod_manifest(
                    f"mig-{profile.split('.')[0]}-{i:04d}",
                    "research",
                    at_s=arrival(),
                    run_s=maybe_run(120, 900, 0.2),
                    requests={"cpu": "2", "memory": "16Gi", f"nvidia.com/mig-{profile}": "1"},
                    gpu_toleration=True,
                    labels={"app": "mig", "profile": profile},
                )
            )
    for i in range(250):
        cpu = rng.choice(("500m", "1", "2", "4", "8"))
        pods.append(
            pod_manifest(
                f"cpu-job-{i:04d}",
                "batch",
                at_s=arrival(),
                run_s=maybe_run(60, 600, 0.1),
                requests={"cpu": cpu, "memory": rng.choice(("1Gi", "4Gi", "8Gi", "16Gi"))},
                labels={"app": "etl"},
                priority_class="batch-low",
            )
        )
    # Pods that fit nowhere: the demo shows why, in kube-scheduler's words.
    for i in range(4):
        pods.append(
            pod_manifest(
                f"huge-16g-{i}",
                "ml",
                at_s=arrival(),
                gpu_toleration=True,
                requests={"cpu": "32", "memory": "256Gi", GPU: "16"},
                labels={"app": "misfit"},
            )
        )
    for i in range(4):
        pods.append(
            pod_manifest(
                f"b200-only-{i}",
                "ml",
                at_s=arrival(),
                gpu_toleration=True,
                requests={"cpu": "16", "memory": "128Gi", GPU: "1"},
                node_selector={LABEL_GPU_PRODUCT: "NVIDIA-B200"},
                labels={"app": "misfit"},
            )
        )
    for i in range(2):
        pods.append(
            pod_manifest(
                f"cpu-512-{i}",
                "batch",
                at_s=arrival(),
                requests={"cpu": "512", "memory": "64Gi"},
                labels={"app": "misfit"},
            )
        )
    # Gangs: all members arrive within a few seconds of each other, as a Job controller creates them.
    groups: list[dict[str, Any]] = []
    gangs = [(f"llm-pretrain-{i}", 4, 4, 8) for i in range(4)] + [(f"finetune-{i}", 4, 4, 2) for i in range(4)]
    gangs.append(("incomplete-gang", 6, 4, 1))  # minMember 6 but only 4 members: held forever
    for group, min_member, members, size in gangs:
        groups.append(_pod_group(group, "ml", min_member))
        start = arrival()
        for m in range(members):
            pods.append(
                pod_manifest(
                    f"{group}-{m}",
                    "ml",
                    at_s=round(start + m * rng.uniform(0.1, 2.0), 3),
                    requests={"cpu": str(12 * size), "memory": f"{96 * size}Gi", GPU: str(size)},
                    annotations={ANNOTATION_GPU_LOCALITY: "nvlink" if size < 8 else "same-node"},
                    gpu_toleration=True,
                    labels={"app": "training", LABEL_POD_GROUP: group},
                    priority_class="training",
                )
            )
    docs += groups
    docs += [_agent_pool(name, ns, replicas, gpu, scaling) for name, ns, replicas, gpu, scaling in DEMO_POOLS]
    docs += pods

    notices = []
    for at_s, node, (provider, notice_s) in zip(
        (200.0, 350.0, 500.0), rng.sample(spot_nodes, 3), (("aws", 120.0), ("gcp", 30.0), ("aws", 120.0)), strict=True
    ):
        notices.append({"node": node, "atSeconds": at_s, "noticeSeconds": notice_s, "provider": provider})
    removable = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"].startswith("l4-")]
    timeline = {
        "spotNotices": notices,
        "nodeRemovals": [{"node": rng.choice(removable), "atSeconds": 700.0}],
        "queueLagBursts": [
            {
                "pool": "llama-70b",
                "namespace": "serving",
                "atSeconds": 120.0,
                "durationSeconds": 120.0,
                "intervalSeconds": 5.0,
                "baseTokens": 5000,
                "peakTokens": 200000,
                "tokenRate": 3000.0,
                "activeSessions": 400,
                "meanContextTokens": 2048,
            },
            {
                "pool": "llama-70b",
                "namespace": "serving",
                "atSeconds": 480.0,
                "durationSeconds": 90.0,
                "intervalSeconds": 5.0,
                "baseTokens": 5000,
                "peakTokens": 120000,
                "tokenRate": 3000.0,
                "activeSessions": 250,
                "meanContextTokens": 2048,
            },
            {
                "pool": "embedder",
                "namespace": "serving",
                "atSeconds": 300.0,
                "durationSeconds": 60.0,
                "intervalSeconds": 5.0,
                "baseTokens": 1000,
                "peakTokens": 30000,
                "tokenRate": 6000.0,
                "activeSessions": 900,
                "meanContextTokens": 512,
            },
        ],
    }
    docs.append(
        {
            "apiVersion": TIMELINE_API_VERSION,
            "kind": TIMELINE_KIND,
            "metadata": {"name": f"demo-{seed}"},
            "spec": timeline,
        }
    )
    return docs


# --- bench ---------------------------------------------------------------------------------------


def bench_documents(
    seed: int = 1, *, nodes: int = 5000, pods: int = 10000, rate: float | None = None
) -> list[dict[str, Any]]:
    """The pipeline benchmark: ``nodes`` GPU nodes and ``pods`` pods, nothing else.

    Like kube-scheduler's scheduler_perf SchedulingBasic (many nodes, a stream of small pods),
    with GPUs: nodes are 8-GPU H100 (three in four) or A100 PCIe servers in three zones; pods ask
    for 1 GPU (60 %), 2 GPUs with NVLink (10 %), a 0.5 share (10 %) or CPU only (20 %). With
    ``rate`` pods arrive evenly at that many per second, else all at once. No pod ever ends.
    """
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = [_namespace("bench")]
    for i in range(nodes):
        kind = H100 if i % 4 else A100_PCIE
        docs.append(gpu_node_manifest(f"bench-node-{i:05d}", kind, zone=ZONES[i % 3]))
    for i in range(pods):
        at_s = i / rate if rate else 0.0
        draw = rng.random()
        annotations: dict[str, str] = {}
        if draw < 0.6:
            requests = {"cpu": "4", "memory": "16Gi", GPU: "1"}
        elif draw < 0.7:
            requests = {"cpu": "8", "memory": "32Gi", GPU: "2"}
            annotations[ANNOTATION_GPU_LOCALITY] = "nvlink"
        elif draw < 0.8:
            requests = {"cpu": "2", "memory": "8Gi"}
            annotations[ANNOTATION_GPU_FRACTION] = "0.5"
        else:
            requests = {"cpu": "1", "memory": "2Gi"}
        docs.append(
            pod_manifest(
                f"bench-pod-{i:06d}",
                "bench",
                at_s=at_s,
                requests=requests,
                annotations=annotations,
                gpu_toleration=True,
                labels={"app": "bench"},
            )
        )
    return docs
