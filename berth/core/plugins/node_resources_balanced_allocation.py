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
        default=(ResourceSpec(name="cpu"), ResourceSpec(name="memory")), min_length=1
    )


class NodeResourcesBalancedAllocation(PreScorePlugin, ScorePlugin):
    NAME = NAME
    Args = BalancedAllocationArgs

    def _resources(self) -> list[str]:
        return [r.name for r in self.args.resources]  # type: ignore[attr-defined]  # self.args is typed as the base PluginArgs

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        requests = cycle.pod.requests
        if not any(requests.get(name, 0) for name in self._resources()):
            return Status.skip()
        return Status.success()

    def score_signature(self, cycle: CycleContext) -> tuple[tuple[str, int], ...]:
        # A node's balance depends on the pod's requests and that node's row only.
        return tuple(sorted(cycle.pod.requests.items()))

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        columns = requested_and_allocatable(cycle.state, cycle.pod, nodes, self._resources(), use_requested=True)
        fractions: list[npt.NDArray[np.float64]] = []
        present: list[npt.NDArray[np.bool_] | None] = []
        for _, requested, allocatable in columns:
            everywhere = bool(allocatable.min(initial=1) > 0)
            safe = allocatable if everywhere else np.where(allocatable > 0, allocatable, 1)
            fraction = np.minimum(requested / safe, 1.0)
            fractions.append(fraction)
            present.append(None if everywhere else allocatable > 0)
        if all(mask is None for mask in present):
            return _balanced_dense(fractions, nodes.size)
        return _balanced_masked(fractions, present, nodes.size)


def _score_from_std(std: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    # int64((1 - std) * MaxNodeScore): truncation toward zero; the value is never negative.
    return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)


def _balanced_dense(fractions: list[npt.NDArray[np.float64]], count: int) -> npt.NDArray[np.int64]:
    """Every resource present on every node (the common case)."""
    if len(fractions) < 2:
        return np.full(count, MAX_NODE_SCORE, dtype=np.int64)
    if len(fractions) == 2:
        return _score_from_std(np.abs((fractions[0] - fractions[1]) / 2))
    mean = sum(fractions) / len(fractions)
    variance = sum((f - mean) * (f - mean) for f in fractions) / len(fractions)
    return _score_from_std(np.sqrt(variance))


def _balanced_masked(
    fractions: list[npt.NDArray[np.float64]], present: list[npt.NDArray[np.bool_] | None], count: int
) -> npt.NDArray[np.int64]:
    """Some nodes lack some resource: each node's deviation over the resources it has."""
    masks = [np.ones(count, dtype=bool) if m is None else m for m in present]
    n = sum(m.astype(np.int64) for m in masks)
    safe_n = np.where(n > 0, n, 1)
    mean = sum(np.where(m, f, 0.0) for f, m in zip(fractions, masks, strict=True)) / safe_n
    variance = sum(np.where(m, (f - mean) * (f - mean), 0.0) for f, m in zip(fractions, masks, strict=True)) / safe_n
    std = np.sqrt(variance)
    # kube's shortcut for exactly two resources, |f1 - f2| / 2 (same value, same rounding).
    if len(fractions) >= 2:
        pair_std = np.zeros(count)
        for i in range(len(fractions)):
            for j in range(i + 1, len(fractions)):
                only = masks[i] & masks[j] & (n == 2)
                pair_std = np.where(only, np.abs((fractions[i] - fractions[j]) / 2), pair_std)
        std = np.where(n == 2, pair_std, std)
    std = np.where(n >= 2, std, 0.0)
    return _score_from_std(std)
