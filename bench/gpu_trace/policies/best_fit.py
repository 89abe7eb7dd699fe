"""BestFit, as the ATC'23 artifact defines it (``BestFitScore``).

Raw score per node: ``int(100 x (1 - sum_i w_i (free_i - request_i) / maxspec_i))`` over
i in {CPU, total GPU} with weights 0.5/0.5 and max specs 128 cores / 8 GPUs, i.e. prefer the
node left with the least free CPU and GPU.  kube-scheduler then min-max normalises the raw
scores of the feasible nodes to 0..100 with integer arithmetic (which can merge nearly equal
scores into ties) and picks the best, ties at random.  Device: the tightest device.
"""

from __future__ import annotations

import numpy as np

from bench.gpu_trace.policies.base import BestFitDevicePolicy, IntArray
from bench.gpu_trace.simulator import ClusterState, Event
from berth.core.gpu.fragmentation import PodRequest

MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000


class BestFit(BestFitDevicePolicy):
    name = "bestfit"

    def score_rows(
        self, state: ClusterState, rows: IntArray, shape: int, request: PodRequest
    ) -> tuple[IntArray, IntArray]:
        cpu_left = (state.free_cpu[rows] - request.cpu_milli) / MAX_SPEC_CPU_MILLI
        gpu_left = (state.free_gpu[rows].sum(axis=1) - request.total_gpu_milli) / MAX_SPEC_GPU_MILLI
        raw = ((1.0 - (0.5 * cpu_left + 0.5 * gpu_left)) * 100).astype(np.int64)  # Go's int64() truncates
        return raw, self.best_devices(state, rows, request)

    def select(self, state: ClusterState, candidates: IntArray, scores: IntArray, event: Event) -> int:
        low, high = scores.min(), scores.max()
        normalised = np.zeros_like(scores) if high == low else (scores - low) * 100 // (high - low)
        return super().select(state, candidates, normalised, event)
