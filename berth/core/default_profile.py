"""Berth's built-in scheduler profile, the base every profile starts from, as kube-scheduler's
default plugin set is for a KubeSchedulerConfiguration. A profile's `plugins` are merged onto
it the way kube merges (enabled appended, disabled removed, `*` disables all defaults of that
extension point); a profile's `pluginConfig` entry for a plugin replaces the one below.

Kubernetes part: filter order and score weights follow kube-scheduler v1.34's defaults for the
plugins Berth has (NodePorts, volume plugins and ImageLocality do not apply: Berth pods declare
no host ports or volumes to the core). The one difference in spirit: pods that request GPUs
are scored MostAllocated on nvidia.com/gpu (bin-packing), other pods LeastAllocated on
cpu/memory as in kube.

Berth part, after kube's: GPU devices must fit (GpuDeviceFit: whole devices, shares, MIG,
locality); among fitting nodes fill partly used GPUs first (GpuBinPack, which in a cluster with
GPUs also packs pods that ask for no GPU - nodes without GPUs first, then the GPU nodes whose CPU
and memory are most used - instead of letting LeastAllocated spread them over every GPU node's
CPU headroom; bench/gpu_trace/README.md has the figures) and prefer compact
NUMA/NVLink sets (GpuTopologyFitness), nodes with the pod's model cached (ModelCache) or its
data nearby (DataLocality); preempt lower-priority pods when nothing fits (DefaultPreemption).
DynamicResources only says, as kube's does before preemption, that there are no claims to
deallocate (Berth's pods carry no ResourceClaims).
These plugins skip pods they have nothing to say about (e.g. CPU-only pods). Cost, carbon and
GPU availability terms are opt-in (examples/berth-config.yaml).

GpuFragmentation (FGD, ATC'23) is on by default with weight 10: it scores every pod that
asks for GPUs or CPU on a cluster with GPUs by the expected idle GPU the placement strands for
the pod mix the cluster runs (learned from placed pods), 2 milli-GPU per point around 50. Why
10: on the Alibaba v2023 trace (python -m bench.gpu_trace --policies berth-engine) weight 5
allocated 95.06 % on seed 42, 10 95.53 % and 20 95.54 % (at 10 milli-GPU per point): below 10
the kube terms (LeastAllocated CPU, balance) still spread pods and strand GPUs; above, nothing
more is gained. The price: a weight-100 preferred node-affinity term (2 x 100 = 200 points)
or a PreferNoSchedule taint (3 x 100) is worth 20-30 fragmentation points, i.e. 40-60 milli-GPU
of stranded capacity; preferences still decide among nodes closer than that, and between
nodes where the pod strands nothing (CPU-only clusters, identical nodes).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_DOCUMENT"]

DEFAULT_DOCUMENT: dict[str, Any] = {
    "apiVersion": "berth.io/v1alpha1",
    "kind": "BerthSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "berth",
            "keepTopScores": 10,
            "plugins": {
                "multiPoint": {
                    "enabled": [
                        {"name": "NodeUnschedulable"},
                        {"name": "NodeName"},
                        {"name": "TaintToleration", "weight": 3},
                        {"name": "NodeAffinity", "weight": 2},
                        {"name": "NodeResourcesFit", "weight": 1},
                        {"name": "PodTopologySpread", "weight": 2},
                        {"name": "InterPodAffinity", "weight": 2},
                        {"name": "NodeResourcesBalancedAllocation", "weight": 1},
                        {"name": "GpuDeviceFit"},
                        {"name": "GpuBinPack", "weight": 2},
                        {"name": "GpuTopologyFitness", "weight": 1},
                        {"name": "GpuFragmentation", "weight": 10},
                        {"name": "ModelCache", "weight": 1},
                        {"name": "DataLocality", "weight": 1},
                        {"name": "DynamicResources"},
                        {"name": "DefaultPreemption"},
                    ]
                }
            },
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "LeastAllocated",
                            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                        },
                        "gpuScoringStrategy": {
                            "type": "MostAllocated",
                            "resources": [{"name": "nvidia.com/gpu", "weight": 1}],
                        },
                    },
                }
            ],
        }
    ],
}
"""The document; :func:`berth.core.config.default_document` hands out deep copies."""
