"""GpuFragmentation (Score): FGD's fragmentation gradient (Weng et al., USENIX ATC'23).

Prefer the node — and, for a share of one GPU, the device — where placing the pod makes the
cluster's GPU *fragmentation* grow least: the expected idle GPU capacity that the pods the
cluster sees could no longer use (:mod:`berth.core.gpu.fragmentation`, Berth's blended measure).

What it measures against (the *target workload*, a set of pod shapes with popularities):

- learned from the pods placed in the ClusterState (running and assumed), when at least
  ``minLearnedPods`` of them have a shape the measure understands (CPU-only pods, whole GPUs,
  ``gpu-fraction`` shares): the most popular shapes covering ``coverage`` of them, as FGD's
  artifact does; pending pods are not part of the core's state and do not count;
- otherwise the configured ``targetWorkload`` shapes.

The learned workload is a pure function of the placed pods (order-independent counts), so
decisions stay deterministic and replayable. It is learned from a *window*: the oldest placed
pods (by creation time, then UID), as many as the largest milestone not above their number
(1, 2, 3, ..., each 5/4 of the last), so a newer pod does not move it until the count grows by
a quarter — a change of workload makes every node's score stale for every pod shape (on
gpu-mixed, 10,000 pods: about 24 changes instead of 232). Counts are then bucketed on a
half-octave scale (1, 2, 3, 4, 6, 8, 12, ...): each shape's weight is exact to about ±17 %, and
pods leaving the window change the workload only when a shape's bucket does.

A shape's GPU model list comes from required node affinity (``nvidia.com/gpu.product In
[...]``, one term) or the node selector; a node's model is its first device's. Nodes whose model
a shape may not use count all their idle GPU as that shape's fragment, as in the paper.

Scores use a fixed scale, not min-max normalisation over the candidates: FGD's signal is the
absolute change, and a fixed scale keeps it commensurable with the other weighted terms. A node
scores ``50 - increase / milliGpuPerPoint`` clipped to 0..100 (default: 2 milli-GPU of expected
fragmentation per point, so ±100 milli-GPU spans the range and a decrease scores above 50; on
the Alibaba trace a finer scale allocates more — 10: 95.53 %, 5: 95.68 %, 3: 95.80 %, 2: 95.86 %
on seed 42 — because FGD's small differences decide where the other terms tie).

Reserve: for a share, the device FGD chose on the selected node is handed to GpuDeviceFit's
Reserve (cycle data :data:`DEVICE_HINT`), which takes it if it fits (memory included) and
otherwise falls back to its own bin-packing choice.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Hashable, Mapping
from typing import ClassVar, cast

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
    StateExtension,
    Status,
)
from berth.core.gpu.fragmentation import (
    BERTH_MEASURE,
    MILLI_PER_GPU,
    PodRequest,
    TargetWorkload,
    score_placements,
    weight_scale,
    weighted_fragmentation_batch,
    weighted_fragmentation_one,
)
from berth.core.placed_pods import PlacedPod
from berth.core.plugins.gpu_extension import gpu_inventory
from berth.core.plugins.gpu_requests import GpuRequest
from berth.core.resource_columns import CPU
from berth.core.state import ClusterState
from berth.schemas.cluster import PodInfo

__all__ = [
    "DEVICE_HINT",
    "DeviceHint",
    "FragmentationArgs",
    "GpuFragmentation",
    "Shape",
    "TargetShape",
    "WorkloadExtension",
    "bucket_count",
    "learned_workload",
    "milestone",
    "shape_of",
]

DEVICE_HINT = "GpuFragmentation/device"
"""Cycle data: a :class:`DeviceHint` — per feasible node the device column FGD chose for a
share there (-1: none)."""

Shape = tuple[int, int, int, frozenset[str]]
"""(cpu milli, GPUs, milli-GPU per GPU, allowed GPU models) — :class:`PodRequest`'s fields."""

GPU_PRODUCT_LABEL_KEYS = ("nvidia.com/gpu.product",)
"""Node labels naming a node's GPU model (GPU Feature Discovery's)."""

_SHAPE = "GpuFragmentation/shape"
"""Cycle data: the pod's :data:`Shape`, computed once in PreScore."""
_DEVICE_BITS = 6
"""Raw scores pack ``increase << 6 | device + 1``: one memoised int64 per node carries both."""
_INCREASE_LIMIT = 1 << 50
_UNFIT_CLIPS_BELOW = 1 << 40
"""Milli-GPU-per-point scales below this turn an increase of ``_INCREASE_LIMIT`` into far more
than 50 points (so a score of 0) by themselves."""
_DEDUPE_ABOVE = 32
"""Score distinct node states only when more nodes than this are asked for at once."""
_PLAIN_UP_TO = 8
"""Node states a cycle computes F of in plain Python (:func:`weighted_fragmentation_one`)
rather than in one numpy batch, whose fixed cost is far above a few states' worth of work."""
_RESULTS_KEPT = 50_000
"""Content-addressed raw scores, and fragmentation values, kept per state (a few hundred bytes
each, key included) before starting over. Small enough to fill, and so stop growing, within
minutes of a steady load; four times as many take most of an hour, and a cell's memory climbs
all that time. The keys a cycle needs are few and recur, so starting over costs one
recomputation of each."""
_ANY_MODEL: frozenset[str] = frozenset()
"""The models of a shape that requires none: one object, since shapes are held by every cached
key (an empty frozenset is over 200 bytes)."""


class TargetShape(PluginArgs):
    """One pod shape of the configured target workload and its popularity."""

    gpu_milli: int = Field(
        default=1000,
        ge=0,
        le=1000,
        alias="gpuMilli",
        description="Milli-GPU per device (1000: whole GPUs; 0 with numGpu 0: CPU-only)",
    )
    num_gpu: int = Field(default=1, ge=0, alias="numGpu", description="Devices per pod (1 for a share)")
    cpu_milli: int = Field(default=0, ge=0, alias="cpuMilli", description="CPU request in millicores")
    weight: int = Field(default=1, ge=1, description="Popularity (relative count)")
    gpu_models: tuple[str, ...] = Field(default=(), alias="gpuModels", description="Allowed GPU models (empty: any)")

    def request(self) -> PodRequest:
        return PodRequest(
            cpu_milli=self.cpu_milli,
            num_gpu=self.num_gpu,
            gpu_milli=self.gpu_milli if self.num_gpu else 0,
            allowed_models=frozenset(self.gpu_models),
        )


class FragmentationArgs(PluginArgs):
    """``pluginConfig`` args of GpuFragmentation."""

    target_workload: tuple[TargetShape, ...] = Field(
        default=(
            TargetShape(gpu_milli=1000, num_gpu=1, cpu_milli=4000, weight=30),
            TargetShape(gpu_milli=1000, num_gpu=2, cpu_milli=8000, weight=15),
            TargetShape(gpu_milli=1000, num_gpu=4, cpu_milli=16000, weight=8),
            TargetShape(gpu_milli=1000, num_gpu=8, cpu_milli=32000, weight=3),
            TargetShape(gpu_milli=500, num_gpu=1, cpu_milli=2000, weight=20),
            TargetShape(gpu_milli=250, num_gpu=1, cpu_milli=1000, weight=24),
        ),
        alias="targetWorkload",
        description="Shapes used until enough pods are placed to learn the cluster's own mix",
    )
    learn_from_cluster: bool = Field(
        default=True, alias="learnFromCluster", description="Learn the target workload from placed pods"
    )
    min_learned_pods: int = Field(
        default=50, ge=1, alias="minLearnedPods", description="Placed pods needed before the learned mix is used"
    )
    coverage: float = Field(
        default=0.95, gt=0.0, le=1.0, description="Share of placed pods the learned shapes must cover"
    )
    milli_gpu_per_point: int = Field(
        default=2, ge=1, alias="milliGpuPerPoint", description="Expected fragmented milli-GPU per score point"
    )


def shape_of(pod: PodInfo) -> Shape | None:
    """The pod's shape for the fragmentation measure, or None if it has none (MIG slices, a
    memory-only share, or a CPU request of 0 with no GPU — nothing to learn from)."""
    request = GpuRequest.of(pod)
    if request.mig or (request.is_share and not request.milli):
        return None
    cpu = int(pod.requests.get("cpu", 0))
    models = _required_models(pod)
    if request.whole:
        return (cpu, request.whole, MILLI_PER_GPU, models)
    if request.is_share:
        return (cpu, 1, min(request.milli, MILLI_PER_GPU), models)
    return (cpu, 0, 0, _ANY_MODEL) if cpu else None


def _required_models(pod: PodInfo) -> frozenset[str]:
    for key in GPU_PRODUCT_LABEL_KEYS:
        if key in pod.node_selector:
            return frozenset((pod.node_selector[key],))
    affinity = pod.affinity.node_affinity if pod.affinity else None
    if affinity and affinity.required and len(affinity.required) == 1:
        for requirement in affinity.required[0].match_expressions:
            if requirement.key in GPU_PRODUCT_LABEL_KEYS and requirement.operator == "In":
                return frozenset(requirement.values)
    return _ANY_MODEL


def bucket_count(count: int) -> int:
    """``count`` rounded down to the half-octave scale 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
    (the largest ``2**k`` or ``3 * 2**(k-1)`` not above it); 0 stays 0."""
    if count <= 0:
        return 0
    top = 1 << (count.bit_length() - 1)
    three_halves = top + (top >> 1)
    return three_halves if top > 1 and count >= three_halves else top


def learned_workload(counts: Mapping[Shape, int], coverage: float) -> tuple[tuple[Shape, int], ...]:
    """The learned target workload as ``(shape, weight)`` pairs: bucketed counts, ranked by
    weight then shape (descending, so input order never matters), the shortest prefix covering
    ``coverage`` of the bucketed total. Empty when there are no counts."""
    weights = {shape: bucket_count(count) for shape, count in counts.items() if count > 0}
    total = sum(weights.values())
    ranked = sorted(
        weights.items(),
        key=lambda item: (item[1], item[0][0], item[0][2], item[0][1], "|".join(sorted(item[0][3]))),
        reverse=True,
    )
    kept: list[tuple[Shape, int]] = []
    covered = 0
    for shape, weight in ranked:
        if covered >= coverage * total:
            break
        kept.append((shape, weight))
        covered += weight
    return tuple(kept)


RELEARN_GROWTH = (5, 4)
"""The learned workload is taken from the oldest placed pods, as many as the largest
*milestone* not above the placed count: 1, 2, 3, ... each ``5/4`` of the previous (rounded
down, at least one more). Between two milestones newer pods do not move it."""


def milestone(count: int) -> int:
    """The largest milestone not above ``count`` (0 for 0): the sequence starts at 1 and each
    term is the previous times :data:`RELEARN_GROWTH`, rounded down, and at least one more."""
    if count <= 0:
        return 0
    term = 1
    while True:
        following = _next_milestone(term)
        if following > count:
            return term
        term = following


def _next_milestone(term: int) -> int:
    num, den = RELEARN_GROWTH
    return max(term + 1, term * num // den)


class WorkloadExtension(StateExtension):
    """Counts the shapes of the pods placed in the ClusterState (bound and assumed).

    The learned workload reads the shape counts of the *window*: the ``milestone(total)``
    oldest placed pods with a shape, oldest by (creation time, UID). It is a pure function
    of the set of placed pods — removing a pod and adding it back restores it exactly, and the
    order pods were added in never matters — yet it rarely changes: a newer pod only enters the
    window when the placed count reaches the next milestone (every +25 %), or when a pod of the
    window leaves. Each change of the learned workload makes every node's fragmentation score
    stale for every pod shape, the costliest thing this plugin does."""

    KEY = "GpuFragmentation"

    def __init__(self) -> None:
        self.counts: Counter[Shape] = Counter()
        """Shapes of every placed pod that has one."""
        self.total = 0
        self.window: Counter[Shape] = Counter()
        """Shapes of the ``milestone(total)`` oldest of them (what the workload is learned from)."""
        self._order: list[tuple[object, str]] = []
        """(creation time, UID) of the placed pods with a shape, sorted (oldest first)."""
        self._shapes: dict[str, Shape] = {}
        self._window_size = 0
        self._milestone_span = (0, 1)
        """[milestone(total), the next milestone): totals in it share the window size."""
        self._learned: dict[float, tuple[tuple[Shape, int], ...]] = {}
        self._workloads: dict[tuple[tuple[Shape, int], ...], tuple[int, TargetWorkload]] = {}
        self.fragments: dict[tuple[object, ...], int] = {}
        """Weighted fragmentation by (workload id, GPU model or None, free CPU, free milli per
        device sorted): a pure function of the key."""
        self.results: dict[tuple[object, ...], int] = {}
        """Raw scores by (pod shape, workload id, free CPU, model, free milli per device): a
        pure function of the key, so a cache hit is the value a computation would give."""

    def _window_add(self, shape: Shape, delta: int) -> None:
        before = self.window[shape]
        after = before + delta
        if after:
            self.window[shape] = after
        else:
            del self.window[shape]
        # The learned workload reads bucketed counts only: most moves leave it unchanged.
        if bucket_count(before) != bucket_count(after):
            self._learned.clear()

    def _count(self, placed: PlacedPod, delta: int) -> None:
        pod = placed.pod
        shape = shape_of(pod)
        if shape is None:
            return
        key = (pod.creation_time, pod.uid)
        order = self._order
        at = bisect_left(order, key)
        if delta > 0:
            order.insert(at, key)
            self._shapes[pod.uid] = shape
            self.counts[shape] += 1
            if at < self._window_size:
                # It joins the window and pushes the window's newest pod out.
                self._window_add(shape, 1)
                self._window_add(self._shapes[order[self._window_size][1]], -1)
        else:
            if at == len(order) or order[at] != key:
                return  # never counted (added before a shape rule change): nothing to undo
            del order[at]
            del self._shapes[pod.uid]
            self.counts[shape] -= 1
            if not self.counts[shape]:
                del self.counts[shape]
            if at < self._window_size:
                self._window_add(shape, -1)
                if self._window_size <= len(order):  # the next oldest moves up into it
                    self._window_add(self._shapes[order[self._window_size - 1][1]], 1)
                else:  # the window was every pod: it is one shorter now
                    self._window_size = len(order)
        self.total += delta
        size = self._milestone()
        while self._window_size < size:
            self._window_add(self._shapes[order[self._window_size][1]], 1)
            self._window_size += 1
        while self._window_size > size:
            self._window_size -= 1
            self._window_add(self._shapes[order[self._window_size][1]], -1)

    def configured_id(self, pairs: tuple[tuple[Shape, int], ...], workload: TargetWorkload) -> int:
        """An id for a configured workload, from the same numbering as learned ones, so that
        the cached results of plugins configured differently never mix."""
        known = self._workloads.get(pairs)
        if known is None:
            known = self._workloads[pairs] = (len(self._workloads) + 1, workload)
        return known[0]

    def _milestone(self) -> int:
        """``milestone(self.total)``, remembered between calls (the total moves by one)."""
        low, high = self._milestone_span
        if not low <= self.total < high:
            low = milestone(self.total)
            high = _next_milestone(low) if low else 1
            self._milestone_span = (low, high)
        return low

    def pod_added(self, slot: int | None, placed: PlacedPod) -> None:
        self._count(placed, 1)

    def pod_removed(self, slot: int | None, placed: PlacedPod) -> None:
        self._count(placed, -1)

    def workload(self, coverage: float) -> tuple[int, TargetWorkload]:
        """``(id, workload)`` learned from the window's counts; equal learned workloads get the
        same id (so memoised scores stay valid) for the life of this extension."""
        pairs = self._learned.get(coverage)
        if pairs is None:
            pairs = self._learned[coverage] = learned_workload(self.window, coverage)
        known = self._workloads.get(pairs)
        if known is None:
            known = self._workloads[pairs] = (len(self._workloads) + 1, _workload_of(pairs))
        return known


def _workload_of(pairs: tuple[tuple[Shape, int], ...]) -> TargetWorkload:
    return TargetWorkload(
        cpu_milli=np.array([s[0] for s, _ in pairs]),
        num_gpu=np.array([s[1] for s, _ in pairs]),
        gpu_milli=np.array([s[2] for s, _ in pairs]),
        allowed_models=tuple(s[3] for s, _ in pairs),
        weight=np.array([w for _, w in pairs]),
    )


class GpuFragmentation(PreScorePlugin, ScorePlugin):
    """FGD: the node (and device) whose GPU fragmentation grows least scores highest; see the
    module docstring for the target workload, the scale and the device hint."""

    NAME: ClassVar[str] = "GpuFragmentation"
    NORMALIZES_PER_NODE = True  # a fixed scale per workload, and the workload is in the signature
    Args = FragmentationArgs
    STATE_EXTENSIONS = (WorkloadExtension,)

    def __init__(self, args: PluginArgs | None = None) -> None:
        super().__init__(args)
        configured = [(shape.request(), shape.weight) for shape in self.args.target_workload]  # type: ignore[attr-defined]  # self.args is typed as the base PluginArgs
        pairs = tuple(((r.cpu_milli, r.num_gpu, r.gpu_milli, r.allowed_models), w) for r, w in configured)
        self._configured = _workload_of(pairs)
        self._configured_pairs = pairs

    def _workload(self, state: ClusterState) -> tuple[int, TargetWorkload]:
        args: FragmentationArgs = self.args  # type: ignore[assignment]  # self.args is typed as the base PluginArgs
        if args.learn_from_cluster:
            extension: WorkloadExtension = state.ensure_extension(WorkloadExtension)  # type: ignore[assignment]  # ensure_extension is typed by the extension base class
            if extension.total >= args.min_learned_pods:
                return extension.workload(args.coverage)
        return 0, self._configured

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        shape = shape_of(cycle.pod)
        if shape is None or not gpu_inventory(cycle.state).devices.node_total.any():
            return Status.skip()  # nothing the measure understands, or no GPUs to fragment
        cycle.data[_SHAPE] = shape
        self._cycle_workload(cycle)
        # Set here, not in NormalizeScore: with memoised scores that may see no node at all.
        cycle.data[DEVICE_HINT] = DeviceHint(self, cycle)
        return Status.success()

    def _cycle_workload(self, cycle: CycleContext) -> tuple[int, TargetWorkload]:
        """The workload of this cycle, fixed at its first use (PreScore)."""
        found = cycle.data.get(self.NAME)
        if found is None:
            found = cycle.data[self.NAME] = self._workload(cycle.state)
        return found

    def score_signature(self, cycle: CycleContext) -> Hashable | None:
        # The raw score of a node depends on the pod's shape, the workload and that node's row
        # (free GPU milli per device, free CPU, GPU model) only.
        return (cycle.data[_SHAPE], self._cycle_workload(cycle)[0])

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        """Raw: ``increase << 6 | (device + 1)``, increase in weighted units (lower is better)."""
        shape: Shape = cycle.data[_SHAPE]  # set by PreScore
        workload_id, workload = self._cycle_workload(cycle)
        inv = gpu_inventory(cycle.state)
        rows = np.asarray(nodes, dtype=np.intp)
        free = np.where(inv.devices.usable[rows], inv.devices.free_milli[rows], 0)
        cpu = _free_cpu(cycle.state, rows)
        constrained = any(workload.allowed_models)
        if len(rows) <= _DEDUPE_ABOVE:
            return self._small(cycle, rows, free, cpu, shape, workload_id, workload, constrained)
        if constrained:
            access = workload.model_access(
                [inv.devices.models[row][0] if inv.devices.models[row] else None for row in rows.tolist()]
            )
        if len(rows) > _DEDUPE_ABOVE and not constrained:
            # Nodes in the same state (free milli per device, free CPU) score the same: score
            # each distinct state once. A big cluster has few (identical empty nodes, ...).
            found = _distinct_rows(np.column_stack([free, cpu]))
            if found is not None:
                distinct, inverse = found
                return self._raw(distinct[:, :-1], distinct[:, -1], None, shape, workload)[inverse]
        return self._raw(free, cpu, access if constrained else None, shape, workload)

    def _small(
        self,
        cycle: CycleContext,
        rows: npt.NDArray[np.intp],
        free: npt.NDArray[np.int64],
        cpu: npt.NDArray[np.int64],
        shape: Shape,
        workload_id: int,
        workload: TargetWorkload,
        constrained: bool,
    ) -> npt.NDArray[np.int64]:
        """A few nodes (the usual case: those changed since the memo last saw this shape):
        look each node state up in the extension's content-addressed results first — nodes
        pass through the same states again and again — and score only the new ones."""
        extension: WorkloadExtension = cycle.state.ensure_extension(WorkloadExtension)  # type: ignore[assignment]  # ensure_extension is typed by the extension base class
        results = extension.results
        models = gpu_inventory(cycle.state).devices.models
        workload_key = workload_id or extension.configured_id(self._configured_pairs, self._configured)
        keys = [
            (shape, workload_key, c, models[r][0] if (constrained and models[r]) else None, *f)
            for r, c, f in zip(rows.tolist(), cpu.tolist(), free.tolist(), strict=True)
        ]
        found = [results.get(key) for key in keys]
        missing = [i for i, value in enumerate(found) if value is None]
        if missing:
            computed = self._raw_from_fragments(
                extension.fragments, [keys[i] for i in missing], shape, workload_key, workload
            )
            if len(results) > _RESULTS_KEPT:
                results.clear()
            for i, value in zip(missing, computed, strict=True):
                results[keys[i]] = found[i] = value
        return np.array(found, dtype=np.int64)

    @staticmethod
    def _raw_from_fragments(
        fragments: dict[tuple[object, ...], int],
        keys: list[tuple[object, ...]],
        shape: Shape,
        workload_key: object,
        workload: TargetWorkload,
    ) -> list[int]:
        """:meth:`_raw` for a few node states (``keys`` as built by :meth:`_small`), from the
        weighted fragmentation of whole node states: the increase is F(state after) - F(state
        before), and F of a state (model, free CPU, free milli per device — sorted: the
        measure sums over devices) does not depend on the pod. Nodes pass through the same
        states, so F is mostly looked up; the missing ones are computed in one batch.

        Equal to :meth:`_raw` by construction: :func:`score_placements` computes the after
        state's summary incrementally (one device shrinks, or whole devices empty, and the pod's
        CPU is taken), which is the summary of the after state; the device choice is its rule
        (least increase, then least room left, then lowest index)."""
        if len(fragments) > _RESULTS_KEPT:
            # Emptied before the lookups below, never between them and the reads after: a
            # state found here must still be there when its increase is computed.
            fragments.clear()
        states = [_placements(key, shape, workload_key) for key in keys]
        wanted: dict[tuple[object, ...], None] = {}
        for before, options in states:
            for state in (before, *(option[1] for option in options)):
                if state not in fragments:
                    wanted[state] = None
        if wanted:
            _add_fragmentation(fragments, list(wanted), workload)
        out = []
        for before, options in states:
            if not options:
                out.append(_INCREASE_LIMIT << _DEVICE_BITS)
                continue
            base = fragments[before]
            # Least increase, then least room left on the device (distinct per device value).
            best = min(options, key=lambda option: (fragments[option[1]], option[2]))
            increase = max(-_INCREASE_LIMIT, min(_INCREASE_LIMIT, fragments[best[1]] - base))
            out.append((increase << _DEVICE_BITS) | (best[0] + 1))
        return out

    @staticmethod
    def _raw(
        free: npt.NDArray[np.int64],
        cpu: npt.NDArray[np.int64],
        access: npt.NDArray[np.bool_] | None,
        shape: Shape,
        workload: TargetWorkload,
    ) -> npt.NDArray[np.int64]:
        if access is None:
            access = np.ones((len(free), workload.size), dtype=bool)
        pod = PodRequest(cpu_milli=shape[0], num_gpu=shape[1], gpu_milli=shape[2])
        result = score_placements(free, cpu, access, pod, workload, measure=BERTH_MEASURE)
        increase = np.where(result.fits, np.clip(result.increase, -_INCREASE_LIMIT, _INCREASE_LIMIT), _INCREASE_LIMIT)
        return (increase << _DEVICE_BITS) | (result.device + 1)

    def normalize_score(
        self, cycle: CycleContext, nodes: NodeArray, scores: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        _, workload = self._cycle_workload(cycle)
        per_point = weight_scale(workload, BERTH_MEASURE) * self.args.milli_gpu_per_point  # type: ignore[attr-defined]  # self.args is typed as the base PluginArgs
        # Round half up in integers: floor((2x + d) / 2d); in place, this runs over every node.
        points = scores >> _DEVICE_BITS
        unfit = None if per_point < _UNFIT_CLIPS_BELOW else points >= _INCREASE_LIMIT
        points *= 2
        points += per_point
        points //= 2 * per_point
        np.subtract(MAX_NODE_SCORE // 2, points, out=points)
        # np.clip's fixed cost is several times these two on the few nodes usually asked about.
        np.maximum(points, 0, out=points)
        normalized = np.minimum(points, MAX_NODE_SCORE, out=points)
        # A node the pod does not fit has increase _INCREASE_LIMIT: with a small enough scale its
        # points are already far above 50 and clip to 0, so the explicit test is only needed
        # for a (never configured) huge one.
        return normalized if unfit is None else np.where(unfit, 0, normalized)


class DeviceHint:
    """Cycle data :data:`DEVICE_HINT`: the device column FGD chose for a share on a node (-1:
    none), found for the one node Reserve asks about from that node's raw score (a pure
    function of the cycle's signature and the node's state, so the value scoring saw)."""

    __slots__ = ("plugin", "cycle")

    def __init__(self, plugin: GpuFragmentation, cycle: CycleContext) -> None:
        self.plugin = plugin
        self.cycle = cycle

    def column(self, node: int) -> int:
        """The chosen device column on node slot ``node``, -1 if none."""
        raw = int(self.plugin.score(self.cycle, np.array([node], dtype=np.intp))[0])
        return (raw & ((1 << _DEVICE_BITS) - 1)) - 1


_Option = tuple[int, tuple[object, ...], int]
"""One way to place a pod on a node: (device column or -1, node state after, room left on the
device)."""


def _placements(
    key: tuple[object, ...], shape: Shape, workload_key: object
) -> tuple[tuple[object, ...], list[_Option]]:
    """For a node state as :meth:`GpuFragmentation._small` keys it: the fragmentation key of
    that state and of every state placing a pod of ``shape`` there can lead to (none when it
    does not fit). A state is (workload, model, free CPU, free milli per device sorted)."""
    cpu_need, gpus, share = shape[0], shape[1], shape[2]
    # The key's layout (see above): ints after the workload and the model.
    cpu, model = cast(int, key[2]), key[3]
    free = [0 if f < 0 else (MILLI_PER_GPU if f > MILLI_PER_GPU else f) for f in cast("tuple[int, ...]", key[4:])]
    before = (workload_key, model, cpu, *sorted(free))
    options: list[_Option] = []
    left = cpu - cpu_need
    if cpu >= cpu_need:
        if gpus == 0:
            options.append((-1, (workload_key, model, left, *sorted(free)), 0))
        elif share == MILLI_PER_GPU:
            if free.count(MILLI_PER_GPU) >= gpus:
                after = sorted(free)
                after[len(after) - gpus :] = []
                options.append((-1, (workload_key, model, left, *sorted([0] * gpus + after)), 0))
        else:
            for value in sorted(set(free)):
                if value >= share:
                    after = sorted(free)
                    after[after.index(value)] = value - share
                    options.append((free.index(value), (workload_key, model, left, *sorted(after)), value - share))
    return before, options


def _add_fragmentation(
    fragments: dict[tuple[object, ...], int], todo: list[tuple[object, ...]], workload: TargetWorkload
) -> None:
    """Record the weighted fragmentation of the node states ``todo`` in ``fragments``: a few in
    plain integers, more in one numpy batch (whose fixed cost only pays off then)."""
    if len(todo) <= _PLAIN_UP_TO:
        for state in todo:
            fragments[state] = weighted_fragmentation_one(state[3:], state[2], state[1], workload, BERTH_MEASURE)  # type: ignore[arg-type]  # a node state key holds ints after its model (see _placements)
        return
    width = max(len(state) - 3 for state in todo)
    free_matrix = np.array(
        [list(state[3:]) + [0] * (width + 3 - len(state)) for state in todo], dtype=np.int64
    ).reshape(len(todo), width)
    access = workload.model_access([state[1] for state in todo])  # type: ignore[misc]  # a node state key's model is a str or None
    computed = weighted_fragmentation_batch(
        free_matrix, cast("list[int]", [state[2] for state in todo]), access, workload, BERTH_MEASURE
    ).tolist()
    fragments.update(zip(todo, computed, strict=True))


def _distinct_rows(table: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]] | None:
    """``(distinct, inverse)`` with ``distinct[inverse] == table``, or None when the rows are
    not fewer once deduplicated. Rows are grouped by a 64-bit hash (one sort of integers, far
    cheaper than ``np.unique(axis=0)``), and the grouping is checked row by row, so a hash
    collision only costs the deduplication, never a wrong score."""
    columns = table.shape[1]
    multipliers = _HASH_MULTIPLIERS[:columns] if columns <= len(_HASH_MULTIPLIERS) else None
    if multipliers is None:
        return None
    keys = (table.astype(np.uint64) * multipliers).sum(axis=1, dtype=np.uint64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if len(first) == len(table):
        return None
    distinct = table[first]
    inverse = inverse.reshape(-1)
    if not (distinct[inverse] == table).all():
        return None
    return distinct, inverse


_HASH_MULTIPLIERS = np.array([(0x9E3779B97F4A7C15 * (2 * i + 1)) % (1 << 64) | 1 for i in range(64)], dtype=np.uint64)


def _free_cpu(state: ClusterState, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """Free CPU millicores of node slots: allocatable minus requested, as NodeResourcesFit's
    filter counts them (so the measure's "CPU runs out" is the filter's)."""
    return state.resources.allocatable_of(CPU, rows) - state.resources.requested_of(CPU, rows)
