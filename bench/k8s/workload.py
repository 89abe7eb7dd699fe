"""The benchmark's workload and its figures, without I/O.

GPU-shaped pods that both schedulers understand: whole GPUs through the extended resource
``nvidia.com/gpu`` (1, 2, 4 or 8 per pod), with CPU and memory in proportion (a share of an 8-GPU
node per GPU), so that kube-scheduler's default scoring, which weighs CPU and memory, sees GPU
pods as a real cluster shows them. No fractional pods: kube-scheduler has no notion of the
``gpu-fraction`` annotation and would place such pods on any node, GPU or not (see README.md).

The same seed gives the same pods in the same order, for both schedulers.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GPU = "nvidia.com/gpu"

#: GPUs per pod → share of the pods. Mean 1.9 GPUs per pod: 5,000 pods ask for ~9,500 GPUs, 119 %
#: of 1,000 8-GPU nodes — over-subscribed, so that how a scheduler packs decides how many pods fit.
DEFAULT_MIX: Mapping[int, float] = {1: 0.60, 2: 0.25, 4: 0.10, 8: 0.05}

#: CPU (cores) and memory (GiB) per GPU: 1/8 of the fake nodes' 192 cores and 2 TiB, rounded down.
CPU_PER_GPU = 20
MEMORY_GIB_PER_GPU = 200


@dataclass(frozen=True)
class GpuPod:
    """One pod of the workload: its name and whole GPUs."""

    name: str
    gpus: int


def gpu_pods(count: int, *, seed: int = 1, mix: Mapping[int, float] = DEFAULT_MIX) -> list[GpuPod]:
    """``count`` pods named ``gpu-pod-00000`` … in arrival order; GPUs drawn from ``mix`` with a
    seeded generator (the weights need not sum to 1). Raises ValueError for an empty mix or a
    negative count."""
    if count < 0:
        raise ValueError("count must be >= 0")
    sizes = sorted(size for size, weight in mix.items() if weight > 0)
    if not sizes or any(size < 1 for size in sizes):
        raise ValueError(f"the mix needs at least one size >= 1 with a positive weight: {dict(mix)}")
    rng = random.Random(seed)
    drawn = rng.choices(sizes, weights=[mix[size] for size in sizes], k=count)
    width = max(5, len(str(count - 1)))
    return [GpuPod(f"gpu-pod-{index:0{width}d}", gpus) for index, gpus in enumerate(drawn)]


def parse_mix(text: str) -> dict[int, float]:
    """``"1:0.6,2:0.25,4:0.1,8:0.05"`` → ``{1: 0.6, 2: 0.25, 4: 0.1, 8: 0.05}``."""
    mix: dict[int, float] = {}
    for part in text.split(","):
        size, _, weight = part.partition(":")
        try:
            mix[int(size)] = float(weight)
        except ValueError:
            raise ValueError(f"{part!r} is not GPUS:WEIGHT (e.g. 1:0.6)") from None
    return mix


def pod_manifest(pod: GpuPod, *, scheduler_name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Pod to create for ``pod``, scheduled by ``scheduler_name``. ``terminationGracePeriodSeconds``
    is 0: there is no kubelet to confirm a graceful stop."""
    requests = {"cpu": str(CPU_PER_GPU * pod.gpus), "memory": f"{MEMORY_GIB_PER_GPU * pod.gpus}Gi", GPU: str(pod.gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "labels": {"app": "gpu-bench", **(labels or {})}},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": requests, "limits": {GPU: str(pod.gpus)}},
                }
            ],
        },
    }


def demand_ratio(pods: Iterable[GpuPod], nodes: int, gpus_per_node: int) -> float:
    """GPUs asked for / GPUs there are."""
    total = nodes * gpus_per_node
    return sum(pod.gpus for pod in pods) / total if total else 0.0


def gpu_allocation(bound_gpus: Iterable[int], nodes: int, gpus_per_node: int) -> float:
    """Allocated GPUs / total GPUs (0 when there are none)."""
    total = nodes * gpus_per_node
    return sum(bound_gpus) / total if total else 0.0


def overcommitted_nodes(placements: Iterable[tuple[str, int]], gpus_per_node: int) -> list[str]:
    """Nodes whose bound pods ask for more GPUs than the node has (must be empty), sorted."""
    used: dict[str, int] = {}
    for node, gpus in placements:
        used[node] = used.get(node, 0) + gpus
    return sorted(node for node, total in used.items() if total > gpus_per_node)


def stranded_gpus(
    placements: Iterable[tuple[str, int]], nodes: Sequence[str], gpus_per_node: int, smallest_pending: int | None
) -> int:
    """Free GPUs that the smallest pod still pending cannot use: on every node with fewer free GPUs
    than that pod asks for. 0 when nothing is pending (nothing is stranded then, only idle)."""
    if smallest_pending is None:
        return 0
    used = dict.fromkeys(nodes, 0)
    for node, gpus in placements:
        used[node] = used.get(node, 0) + gpus
    return sum(free for free in (gpus_per_node - u for u in used.values()) if 0 < free < smallest_pending)


def throughput(bound: int, seconds: float) -> float:
    """Pods per second, 0 for an empty window."""
    return bound / seconds if seconds > 0 else 0.0
