"""Random: a uniformly random feasible node and, for a shared GPU, a random device.

Artifact: ``RandomScore`` gives the maximum score to one node drawn uniformly from the
filtered nodes (PreScore), and Open-Gpu-Share's ``random`` GPU selection draws uniformly
among the devices with room.  Whole-GPU pods take the lowest idle devices.
"""

from __future__ import annotations

import numpy as np

from bench.gpu_trace.policies.base import IntArray, Policy
from bench.gpu_trace.simulator import ClusterState, Event
from berth.core.gpu.fragmentation import PodRequest


class RandomFit(Policy):
    name = "random"

    def score_rows(
        self, state: ClusterState, rows: IntArray, shape: int, request: PodRequest
    ) -> tuple[IntArray, IntArray]:
        zeros = np.zeros(rows.size, dtype=np.int64)
        return zeros, np.full(rows.size, -1, dtype=np.int64)

    def select(self, state: ClusterState, candidates: IntArray, scores: IntArray, event: Event) -> int:
        return int(candidates[self.ctx.rng.integers(candidates.size)])

    def devices(self, state: ClusterState, node: int, request: PodRequest, cached_device: int) -> tuple[int, ...]:
        if request.is_fractional:
            roomy = np.flatnonzero(state.free_gpu[node] >= request.gpu_milli)
            return (int(roomy[self.ctx.rng.integers(roomy.size)]),)
        return super().devices(state, node, request, cached_device)
