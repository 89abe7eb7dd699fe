"""FGD, as the ATC'23 artifact runs it (``FGDScore``).

Fragmentation is :mod:`berth.core.gpu.fragmentation` with ``FGD_MEASURE`` (the same
definition as the artifact's ``NodeGpuShareFragAmountScore``), against the target workload
built from the trace's own pods (the shapes covering 95 % of them, CPU-only pods included).  The artifact
turns the fragmentation change of a node into an integer score
``int(100 x sigmoid((before - after) / 1000))`` - a coarse quantisation: nodes whose changes
differ by a few tens of milli-GPU tie, and ties go to a random node.  For a shared pod the
device is the first one (lowest index) with the best quantised score.
"""

from __future__ import annotations

import numpy as np

from bench.gpu_trace.policies.base import IntArray, Policy
from bench.gpu_trace.simulator import ClusterState, SimContext
from berth.core.gpu.fragmentation import (
    FGD_MEASURE,
    INFEASIBLE,
    PodRequest,
    TargetWorkload,
    device_increase_batch,
    score_placements,
    weight_scale,
)


def target_workload_of(ctx: SimContext) -> TargetWorkload:
    """The artifact's typical pods: the trace's original pods, 95 % popularity coverage."""
    return TargetWorkload.from_requests((ctx.pods.request(i) for i in range(len(ctx.pods))), coverage=0.95)


def quantised_score(increase_weighted: np.ndarray, scale: int) -> IntArray:
    """``int(100 * sigmoid(-increase_milli / 1000))``, the artifact's node score."""
    decrease_gpus = -increase_weighted / scale / 1000.0
    return (100.0 / (1.0 + np.exp(-decrease_gpus))).astype(np.int64)


class FGD(Policy):
    name = "fgd"

    def setup(self, ctx: SimContext) -> None:
        super().setup(ctx)
        self.workload = target_workload_of(ctx)
        self.access = self.workload.model_access(ctx.nodes.model)
        self.scale = weight_scale(self.workload, FGD_MEASURE)

    def score_rows(
        self, state: ClusterState, rows: IntArray, shape: int, request: PodRequest
    ) -> tuple[IntArray, IntArray]:
        free, cpu, access = state.free_gpu[rows], state.free_cpu[rows], self.access[rows]
        if request.is_fractional:
            per_device = device_increase_batch(free, cpu, access, request, self.workload, measure=FGD_MEASURE)
            feasible = per_device != INFEASIBLE
            quantised = np.where(feasible, quantised_score(np.where(feasible, per_device, 0), self.scale), -1)
            device = np.argmax(quantised, axis=1)  # first maximum, as the artifact's strict ">" loop
            return quantised.max(axis=1), device.astype(np.int64)
        scores = score_placements(free, cpu, access, request, self.workload, measure=FGD_MEASURE)
        increase = np.where(scores.fits, scores.increase, 0)
        return quantised_score(increase, self.scale), scores.device
