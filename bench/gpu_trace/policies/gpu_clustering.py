"""GpuClustering, as the ATC'23 artifact defines it (``GpuClusteringScore``).

Pods are tagged by GPU demand (shared GPU, 1 GPU, 2 GPUs, ...).  Prefer nodes that host only
pods of the same tag (75..100), then nodes hosting that tag among others (50..75), then idle
nodes (25..50), then nodes hosting other tags only (0..25); within a band, the less free GPU
the better: ``25 x (8000 - free milli) // 8000``.  Pods without GPUs score 0 everywhere.
Device: the tightest device.
"""

from __future__ import annotations

import numpy as np

from bench.gpu_trace.policies.base import BestFitDevicePolicy, IntArray
from bench.gpu_trace.simulator import ClusterState, affinity_tag
from berth.core.gpu.fragmentation import PodRequest

MAX_SPEC_GPU_MILLI = 8_000


class GpuClustering(BestFitDevicePolicy):
    name = "gpuclustering"

    def score_rows(
        self, state: ClusterState, rows: IntArray, shape: int, request: PodRequest
    ) -> tuple[IntArray, IntArray]:
        device = self.best_devices(state, rows, request)
        if request.num_gpu == 0:
            return np.zeros(rows.size, dtype=np.int64), device
        counts = state.tag_count[rows]
        same = counts[:, state.tags.index(affinity_tag(request))] > 0
        distinct = (counts > 0).sum(axis=1)
        band = np.where(same, np.where(distinct == 1, 75, 50), np.where(distinct == 0, 25, 0))
        fill = 25 * (MAX_SPEC_GPU_MILLI - state.free_gpu[rows].sum(axis=1)) // MAX_SPEC_GPU_MILLI
        return (band + fill).astype(np.int64), device
