"""DotProd, as the ATC'23 artifact runs it (``DotProductScore``, dimExt "merge", norm "max").

Node vector: (free CPU / 128 cores, free GPU milli / 8 GPUs); pod vector: (CPU request / 128
cores, GPU request / 8 GPUs).  Score ``int(100 x (1 - dot / 2))``: the smaller the dot product
the better.  Device: the tightest device (the artifact's default for "merge").
"""

from __future__ import annotations

import numpy as np

from bench.gpu_trace.policies.base import BestFitDevicePolicy, IntArray
from bench.gpu_trace.simulator import ClusterState
from berth.core.gpu.fragmentation import PodRequest

MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000


class DotProduct(BestFitDevicePolicy):
    name = "dotprod"

    def score_rows(
        self, state: ClusterState, rows: IntArray, shape: int, request: PodRequest
    ) -> tuple[IntArray, IntArray]:
        node_cpu = state.free_cpu[rows] / MAX_SPEC_CPU_MILLI
        node_gpu = state.free_gpu[rows].sum(axis=1) / MAX_SPEC_GPU_MILLI
        dot = node_cpu * (request.cpu_milli / MAX_SPEC_CPU_MILLI) + node_gpu * (
            request.total_gpu_milli / MAX_SPEC_GPU_MILLI
        )
        score = (100 * (1 - dot / 2)).astype(np.int64)
        return score, self.best_devices(state, rows, request)
