"""GpuPacking, as the ATC'23 artifact defines it (``GpuPackingScore``).

Prefer, in this order: (1) a shared pod on partly used devices - the fuller the better
(score 100 - free%/10, at least 50); (2) using idle devices on a node that is already in use -
fewer idle devices consumed is better (50 - devices, at least 33); (3) an entirely idle node
(33 - its device count, but never below that count, as the artifact writes it).  Pods without
GPUs score 0 everywhere (random).  Device: the tightest device.
"""

from __future__ import annotations

import numpy as np

from bench.gpu_trace.policies.base import BestFitDevicePolicy, IntArray
from bench.gpu_trace.simulator import ClusterState
from berth.core.gpu.fragmentation import MILLI_PER_GPU, PodRequest


class GpuPacking(BestFitDevicePolicy):
    name = "gpupacking"

    def score_rows(
        self, state: ClusterState, rows: IntArray, shape: int, request: PodRequest
    ) -> tuple[IntArray, IntArray]:
        device = self.best_devices(state, rows, request)
        if request.num_gpu == 0:
            return np.zeros(rows.size, dtype=np.int64), device
        free = state.free_gpu[rows]
        idle = (free == MILLI_PER_GPU).sum(axis=1)
        all_idle = idle == state.nodes.gpu_count[rows]
        whole_node_score = np.maximum(100 // 3 - idle, idle)
        if request.is_fractional:
            chosen_free = free[np.arange(rows.size), device]
            uses_idle = (chosen_free == MILLI_PER_GPU).astype(np.int64)
            shared_score = np.maximum(100 - (chosen_free * 100 // MILLI_PER_GPU) // 10, 100 // 2)
        else:
            uses_idle = np.full(rows.size, request.num_gpu, dtype=np.int64)
            shared_score = np.zeros(rows.size, dtype=np.int64)
        idle_score = np.maximum(100 // 2 - uses_idle, 100 // 3)
        score = np.where(all_idle, whole_node_score, np.where(uses_idle > 0, idle_score, shared_score))
        return score.astype(np.int64), device
