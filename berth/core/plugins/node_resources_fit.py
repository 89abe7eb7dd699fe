"""NodeResourcesFit (kube-scheduler's plugin of the same name).

Filter: the node must have room for the pod's requests: one more pod than it runs within
allocatable ``pods`` ("Too many pods"), and for cpu, memory, ephemeral-storage and every extended
resource the pod requests (``nvidia.com/gpu``, ``nvidia.com/mig-*``, ... as counts) the request
must not exceed allocatable minus requested ("Insufficient <resource>"). A node gets every reason
that applies. The status is UnschedulableAndUnresolvable when some request exceeds the node's
whole allocatable (no preemption can help), else Unschedulable. ``ignoredResources`` /
``ignoredResourceGroups`` skip extended resources (by name / by the prefix before "/").

Score: ``scoringStrategy`` — LeastAllocated (spread), MostAllocated (pack) or
RequestedToCapacityRatio (a piecewise-linear shape) over the configured resources and weights.
Berth adds ``gpuScoringStrategy``: when set, it replaces ``scoringStrategy`` for pods that request
``nvidia.com/gpu`` or MIG slices, which is how the built-in profile bin-packs GPU pods while
spreading the others.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from berth.core import messages
from berth.core.framework import (
    MAX_NODE_SCORE,
    CycleContext,
    FilterPlugin,
    FilterResult,
    NodeArray,
    PluginArgs,
    PreFilterPlugin,
    PreFilterResult,
    ScorePlugin,
    Status,
)
from berth.core.plugins._allocation import requested_and_allocatable
from berth.core.plugins._normalize import go_div
from berth.core.resource_columns import PODS
from berth.schemas.cluster import PodInfo

__all__ = ["NAME", "NodeResourcesFit", "NodeResourcesFitArgs", "ScoringStrategy", "resource_scores"]

NAME = "NodeResourcesFit"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
MAX_UTILIZATION = 100
MAX_CUSTOM_PRIORITY_SCORE = 10
"""kube's ``MaxCustomPriorityScore``: shape scores are 0..10, scaled ×10 to 0..100."""


class ResourceSpec(PluginArgs):
    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1, le=100)


class UtilizationShapePoint(PluginArgs):
    utilization: int = Field(ge=0, le=100)
    score: int = Field(ge=0, le=MAX_CUSTOM_PRIORITY_SCORE)


class RequestedToCapacityRatioParam(PluginArgs):
    shape: tuple[UtilizationShapePoint, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _increasing(self) -> RequestedToCapacityRatioParam:
        points = [p.utilization for p in self.shape]
        if any(b <= a for a, b in zip(points, points[1:], strict=False)):
            raise ValueError("shape utilization values must be strictly increasing")
        return self


_DEFAULT_RESOURCES = (ResourceSpec(name="cpu"), ResourceSpec(name="memory"))


class ScoringStrategy(PluginArgs):
    type: Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"] = "LeastAllocated"
    resources: tuple[ResourceSpec, ...] = Field(default=_DEFAULT_RESOURCES, min_length=1)
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = Field(
        default=None, alias="requestedToCapacityRatio"
    )

    @model_validator(mode="after")
    def _shape_when_needed(self) -> ScoringStrategy:
        if self.type == "RequestedToCapacityRatio" and self.requested_to_capacity_ratio is None:
            raise ValueError("requestedToCapacityRatio.shape is required for type RequestedToCapacityRatio")
        names = [r.name for r in self.resources]
        if len(set(names)) != len(names):
            raise ValueError(f"resources listed more than once: {names}")
        return self


class NodeResourcesFitArgs(PluginArgs):
    ignored_resources: tuple[str, ...] = Field(default=(), alias="ignoredResources")
    ignored_resource_groups: tuple[str, ...] = Field(default=(), alias="ignoredResourceGroups")
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy, alias="scoringStrategy")
    gpu_scoring_strategy: ScoringStrategy | None = Field(default=None, alias="gpuScoringStrategy")
    """Berth: the strategy for pods requesting whole GPUs or MIG slices (None: the same)."""


def _requests_key(pod: PodInfo) -> tuple[tuple[str, int], ...]:
    """The pod's requests as a hashable value (the plugin's memo signature)."""
    return tuple(sorted(pod.requests.items()))


def requests_gpus(pod: PodInfo) -> bool:
    return any(
        amount and (name == GPU_RESOURCE or name.startswith(MIG_PREFIX)) for name, amount in pod.requests.items()
    )


def resource_scores(
    strategy: ScoringStrategy, columns: list[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]], count: int
) -> npt.NDArray[np.int64]:
    """A node score per node from per-resource ``(index, requested, allocatable)`` columns (see
    :func:`~berth.core.plugins._allocation.requested_and_allocatable`), as kube's least / most /
    requested-to-capacity-ratio scorers compute it: integer arithmetic, a resource counts (with
    its weight) only on nodes where its allocatable is positive, no resource left → 0."""
    node_score = np.zeros(count, dtype=np.int64)
    weight_sum = np.zeros(count, dtype=np.int64)
    ratio = strategy.type == "RequestedToCapacityRatio"
    for index, requested, allocatable in columns:
        weight = strategy.resources[index].weight
        everywhere = bool(allocatable.min(initial=1) > 0) if allocatable.size else True
        safe = allocatable if everywhere else np.where(allocatable > 0, allocatable, 1)
        if strategy.type == "LeastAllocated":
            per = (allocatable - requested) * MAX_NODE_SCORE // safe
            np.maximum(per, 0, out=per)  # requested > allocatable scores 0
        elif strategy.type == "MostAllocated":
            # kube caps requested at capacity (pods without requests get non-zero defaults).
            per = np.minimum(requested, allocatable) * MAX_NODE_SCORE // safe
        else:
            shape = strategy.requested_to_capacity_ratio.shape  # type: ignore[union-attr]  # set for the RequestedToCapacityRatio type (validated)
            utilization = np.minimum(requested * MAX_UTILIZATION // safe, MAX_UTILIZATION)
            per = _broken_linear(shape, utilization)
        if ratio:
            # kube counts a resource (and its weight) only where its score is positive.
            counted = per > 0 if everywhere else (per > 0) & (allocatable > 0)
        elif everywhere:
            node_score += per * weight
            weight_sum += weight
            continue
        else:
            counted = allocatable > 0
        node_score += np.where(counted, per * weight, 0)
        weight_sum += counted * weight
    scored = weight_sum > 0
    safe_sum = np.where(scored, weight_sum, 1)
    if ratio:
        # math.Round(float64(nodeScore) / float64(weightSum)): half away from zero (scores >= 0).
        return np.where(scored, (2 * node_score + safe_sum) // (2 * safe_sum), 0)
    return np.where(scored, node_score // safe_sum, 0)


def _broken_linear(
    shape: tuple[UtilizationShapePoint, ...], utilization: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    xs = [p.utilization for p in shape]
    ys = [p.score * scale for p in shape]
    result = np.full(utilization.shape, ys[-1], dtype=np.int64)
    # Walk segments from the last to the first so the first matching segment wins, as kube's
    # loop returns at the first point with utilization <= p.
    for i in range(len(xs) - 1, -1, -1):
        inside = utilization <= xs[i]
        if i == 0:
            value = np.full(utilization.shape, ys[0], dtype=np.int64)
        else:
            value = ys[i - 1] + go_div((ys[i] - ys[i - 1]) * (utilization - xs[i - 1]), xs[i] - xs[i - 1])
        result = np.where(inside, value, result)
    return result


class _Demand:
    """The pod's requests resolved against the state's resource columns, once per cycle."""

    __slots__ = ("checks", "reasons", "only_pods")

    def __init__(self, cycle: CycleContext, args: NodeResourcesFitArgs) -> None:
        pod, state = cycle.pod, cycle.state
        ignored = set(args.ignored_resources)
        groups = set(args.ignored_resource_groups)
        checks: list[tuple[int | None, int]] = []
        reasons: list[str] = []
        native = [(r, pod.requests.get(r, 0)) for r in ("cpu", "memory", "ephemeral-storage")]
        extended = sorted(
            (name, amount)
            for name, amount in pod.requests.items()
            if name not in ("cpu", "memory", "ephemeral-storage", "pods")
        )
        for name, amount in [*native, *extended]:
            if amount <= 0:
                continue
            if "/" in name and (name in ignored or name.split("/", 1)[0] in groups):
                continue
            checks.append((state.resources.column(name), amount))
            reasons.append(messages.insufficient(name))
        self.checks = checks
        self.reasons = reasons
        self.only_pods = not any(amount for name, amount in pod.requests.items() if name != "pods")


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, ScorePlugin):
    NAME = NAME
    Args = NodeResourcesFitArgs

    def pre_filter(self, cycle: CycleContext) -> tuple[Status, PreFilterResult | None]:
        # kube computes the pod's request here; Berth resolves it lazily in Filter, which the
        # node memo often does not need to call at all.
        return Status.success(), None

    def filter_signature(self, cycle: CycleContext) -> tuple[tuple[str, int], ...]:
        # The verdict on a node depends on the pod's requests and that node's row only.
        return _requests_key(cycle.pod)

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        state = cycle.state
        demand: _Demand | None = cycle.data.get(NAME)
        if demand is None:
            demand = cycle.data[NAME] = _Demand(cycle, self.args)  # type: ignore[arg-type]  # self.args is typed as the base PluginArgs
        n = nodes.size
        too_many = state.resources.requested_of(PODS, nodes) >= state.resources.allocatable_of(PODS, nodes)
        # Bit 0: too many pods; bit k: check k-1 failed; a parallel mask marks "exceeds the
        # node's whole allocatable" (unresolvable).
        bits = too_many.astype(np.int64)
        unresolvable = np.zeros(n, dtype=bool)
        if not demand.only_pods:
            for k, (column, amount) in enumerate(demand.checks, start=1):
                if column is None:
                    short = np.ones(n, dtype=bool)  # no node offers this resource at all
                    whole = short
                else:
                    alloc = state.resources.allocatable_of(column, nodes)
                    short = amount > alloc - state.resources.requested_of(column, nodes)
                    whole = amount > alloc
                if short.any():
                    bits |= short.astype(np.int64) << k
                    unresolvable |= whole & short
        failed = bits != 0
        if not failed.any():
            return FilterResult.all_pass()
        # One Status per distinct (reasons, unresolvable) combination among failing nodes.
        keys, inverse = np.unique(bits[failed] * 2 + unresolvable[failed], return_inverse=True)
        statuses = tuple(_status(demand, key >> 1, hopeless=bool(key & 1)) for key in keys.tolist())
        codes = np.full(n, -1, dtype=np.int32)
        codes[failed] = inverse
        return FilterResult.from_codes(codes, statuses)

    def _strategy(self, pod: PodInfo) -> ScoringStrategy:
        args: NodeResourcesFitArgs = self.args  # type: ignore[assignment]  # self.args is typed as the base PluginArgs
        if args.gpu_scoring_strategy is not None and requests_gpus(pod):
            return args.gpu_scoring_strategy
        return args.scoring_strategy

    def score_signature(self, cycle: CycleContext) -> tuple[tuple[str, int], ...]:
        return _requests_key(cycle.pod)

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        strategy = self._strategy(cycle.pod)
        columns = requested_and_allocatable(
            cycle.state, cycle.pod, nodes, [r.name for r in strategy.resources], use_requested=False
        )
        return resource_scores(strategy, columns, nodes.size)


def _status(demand: _Demand, mask: int, *, hopeless: bool) -> Status:
    """Reasons in kube's order: pods, cpu, memory, ephemeral-storage, extended (by name)."""
    reasons = [messages.TOO_MANY_PODS] if mask & 1 else []
    reasons += [reason for k, reason in enumerate(demand.reasons, start=1) if mask >> k & 1]
    maker = Status.unresolvable if hopeless else Status.unschedulable
    return maker(*reasons, plugin=NAME)
