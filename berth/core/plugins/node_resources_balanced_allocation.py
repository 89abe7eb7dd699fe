"""NodeResourcesBalancedAllocation (kube-scheduler's plugin of the same name).

Prefers nodes whose utilisation fractions (requested / allocatable, capped at 1, after adding the
pod) are balanced across the configured resources (default cpu and memory): score =
``(1 - standard deviation of the fractions) × 100``; for two resources the deviation is
``|f1 - f2| / 2``. Skipped for pods that request none of the resources (kube's best-effort skip).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from pydantic import Field

from berth.core.framework import (
    MAX_NODE_SCORE,
    CycleContext,
    NodeArray,
    PluginArgs,
    PreScorePlugin,
    ScorePlugin,
    Status,
)
from berth.core.plugins._allocation import requested_and_allocatable
from berth.core.plugins.node_resources_fit import ResourceSpec

__all__ = ["NAME", "NodeResourcesBalancedAllocation", "BalancedAllocationArgs"]

NAME = "NodeResourcesBalancedAllocation"


class BalancedAllocationArgs(PluginArgs):
    resources: tuple[ResourceSpec, ...] = Field(
        default=(ResourceSpec(name="cpu"), ResourceSpec(name="memory")), min_length=1)


class NodeResourcesBalancedAllocation(PreScorePlugin, ScorePlugin):
    NAME = NAME
    Args = BalancedAllocationArgs

    def _resources(self) -> list[str]:
        return [r.name for r in self.args.resources]  # type: ignore[attr-defined]

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        requests = cycle.pod.requests
        if not any(requests.get(name, 0) for name in self._resources()):
            return Status.skip()
        return Status.success()

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        requested, allocatable = requested_and_allocatable(
            cycle.state, cycle.pod, nodes, self._resources(), use_requested=True)
        present = allocatable > 0
        fractions = np.where(present, requested / np.where(present, allocatable, 1), 0.0)
        fractions = np.minimum(fractions, 1.0)
        count = present.sum(axis=1)
        safe_count = np.where(count > 0, count, 1)
        mean = fractions.sum(axis=1) / safe_count
        deviation = np.where(present, fractions - mean[:, None], 0.0)
        std = np.sqrt((deviation * deviation).sum(axis=1) / safe_count)
        if fractions.shape[1] == 2:
            # kube's two-resource shortcut, |f1 - f2| / 2, is the same value computed directly;
            # use it so float rounding matches kube's bit for bit.
            two = count == 2
            std = np.where(two, np.abs(fractions[:, 0] - fractions[:, 1]) / 2, std)
        std = np.where(count >= 2, std, 0.0)
        return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
