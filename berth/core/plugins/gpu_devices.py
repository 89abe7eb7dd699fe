"""GPU device plugins: the device-level Filter/Reserve and the GPU score terms.

Kubernetes' NodeResourcesFit already checks ``nvidia.com/gpu`` *counts* against allocatable.
These plugins add what counts cannot say — which devices:

- :class:`GpuDeviceFit` (PreFilter, Filter, Reserve): whole GPUs take fully free healthy
  devices, honouring ``berth.io/gpu-locality`` (``same-socket``: one NUMA node; ``nvlink``: every
  pair linked); a share (``gpu-fraction`` / ``gpu-memory``) packs onto ONE device with room, the
  most used one that fits; MIG resources take free slices of their profile. Reserve names the
  devices, which become part of the decision.
- :class:`GpuBinPack` (Score): fill partly used GPUs and nodes before touching fresh ones; in a
  cluster with GPUs, pods without GPUs go to nodes without GPUs first and are otherwise packed
  onto the GPU nodes whose CPU and memory are most used.
- :class:`GpuTopologyFitness` (Score): for multi-GPU pods, prefer nodes whose best free set is
  on one NUMA node and fully NVLinked.
- :class:`GpuAvailability` (Score): keep GPUs available — CPU-only pods prefer nodes without
  GPUs; GPU pods prefer nodes with more room left (the spreading counterpart of bin-packing).
- :class:`GpuFragmentation` (Score): FGD's fragmentation gradient, in its own module
  (:mod:`berth.core.plugins.gpu_fragmentation`), re-exported here.

The per-device state is :class:`GpuDeviceExtension`, kept current by the ClusterState; it and
:func:`gpu_inventory` live in :mod:`berth.core.plugins.gpu_extension` (GpuFragmentation reads the
inventory too) and are re-exported here.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import Field

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
    PreScorePlugin,
    ReservePlugin,
    ReserveResult,
    ScorePlugin,
    Status,
)
from berth.core.plugins._allocation import requested_and_allocatable
from berth.core.plugins.gpu_extension import GpuDeviceExtension, gpu_inventory
from berth.core.plugins.gpu_fragmentation import DEVICE_HINT, GpuFragmentation
from berth.core.plugins.gpu_requests import MILLI, GpuMisfit, GpuRequest
from berth.core.plugins.node_resources_fit import ResourceSpec, ScoringStrategy, resource_scores

__all__ = [
    "GpuAvailability",
    "GpuBinPack",
    "GpuBinPackArgs",
    "GpuDeviceExtension",
    "GpuDeviceFit",
    "GpuFragmentation",
    "GpuTopologyFitness",
    "gpu_inventory",
]

_REQUEST = "GpuDeviceFit/request"


def _request(cycle: CycleContext) -> GpuRequest:
    request = cycle.data.get(_REQUEST)
    if request is None:
        request = GpuRequest.of(cycle.pod)
        cycle.data[_REQUEST] = request
    return request


def _status(misfit: GpuMisfit, plugin: str) -> Status:
    """Every GPU misfit can be resolved by freeing devices, so preemption may help."""
    if misfit.kind == "count" or misfit.kind == "mig":
        reason = messages.insufficient(str(misfit.detail[0]))
    elif misfit.kind == "nvlink":
        reason = messages.gpu_no_nvlink_set(int(misfit.detail[0]))
    elif misfit.kind == "socket":
        reason = messages.gpu_no_socket_set(int(misfit.detail[0]))
    else:
        reason = messages.gpu_no_share(int(misfit.detail[0]), int(misfit.detail[1]))
    return Status.unschedulable(reason, plugin=plugin)


class GpuDeviceFit(PreFilterPlugin, FilterPlugin, ReservePlugin):
    """Device-level GPU fit (whole, share, MIG, locality) and device choice at Reserve."""

    NAME: ClassVar[str] = "GpuDeviceFit"
    STATE_EXTENSIONS = (GpuDeviceExtension,)

    def pre_filter(self, cycle: CycleContext) -> tuple[Status, PreFilterResult | None]:
        if not _request(cycle).wants_gpu:
            return Status.skip(), None
        return Status.success(), None

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        codes, misfits = gpu_inventory(cycle.state).filter_codes(_request(cycle), nodes)
        if not (codes >= 0).any():
            return FilterResult.all_pass()
        return FilterResult.from_codes(codes, tuple(_status(m, self.NAME) for m in misfits))

    def reserve(self, cycle: CycleContext, node: int) -> ReserveResult:
        request = _request(cycle)
        if not request.wants_gpu:
            return ReserveResult()
        inv = gpu_inventory(cycle.state)
        allocation = None
        hint = cycle.data.get(DEVICE_HINT)
        if hint is not None and request.is_share:
            # GpuFragmentation scored this node by the device it would take there; use that
            # device when it fits (its measure ignores device memory), else bin-pack as usual.
            column = hint.column(node)
            if column >= 0:
                allocation = inv.shares.at(node, request, column)
        if allocation is None:
            allocation = inv.choose(node, request)
        if allocation is None:  # the filter said yes; only a bug gets here
            return ReserveResult(status=Status.error(f"{self.NAME}: no devices on the chosen node", plugin=self.NAME))
        return ReserveResult(gpu_devices=allocation.devices, gpu_milli=allocation.milli if request.is_share else None)


class _GpuScore(PreScorePlugin, ScorePlugin):
    """Shared skip rule: only pods that want GPUs are scored."""

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        return Status.success() if _request(cycle).wants_gpu else Status.skip()


_NO_GPU = "GpuBinPack/no-gpu"
"""Cycle data: set when GpuBinPack scores a pod that asks for no GPU (see :class:`GpuBinPack`)."""

NO_GPU_PACKING = ScoringStrategy(
    type="MostAllocated", resources=(ResourceSpec(name="cpu"), ResourceSpec(name="memory"))
)
"""How GpuBinPack packs pods without GPUs onto GPU nodes: kube's MostAllocated over the resources
(and weights) of kube's default NodeResourcesFit scoring, cpu and memory 1:1."""


IDLE_GPU_NODE_PENALTY = MAX_NODE_SCORE // 4
"""GpuBinPack takes this from its packing score of a pod without GPUs on a GPU node whose GPUs are
all idle. Such a node is the only kind that can still take a pod asking for all of a node's GPUs,
and that pod needs the node's CPU too; a node with a GPU in use can never take it, so its CPU is
the cheaper one to fill. A penalty rather than a strict order: packing CPU tightly still matters
most where CPU-only pods dominate, and subtracting keeps the packing order among idle nodes.
A quarter of the score range was the first value tried; the ablation over 10, 25 and 50 is in
bench/gpu_trace/README.md."""


class GpuBinPackArgs(PluginArgs):
    """``pluginConfig`` args of GpuBinPack."""

    pack_pods_without_gpu: bool = Field(
        default=True,
        alias="packPodsWithoutGpu",
        description="In a cluster with GPUs, also bin-pack pods that ask for no GPU (see GpuBinPack)",
    )


class GpuBinPack(_GpuScore):
    """Bin-pack GPU pods: more of the node's GPU capacity in use afterwards scores higher, and a
    share scores higher on a node whose chosen device is already partly used (so fewer devices
    and nodes end up partly used). MIG pods: fuller MIG capacity of their profile scores higher.

    Pods that ask for no GPU, in a cluster that has GPUs, are bin-packed too: a node without GPUs
    scores 100 (whatever CPU or memory the pod takes there can never strand a GPU), a GPU node
    kube's MostAllocated over cpu and memory (:data:`NO_GPU_PACKING`), less on a node whose GPUs
    are all idle (:data:`IDLE_GPU_NODE_PENALTY`). Why: NodeResourcesFit's
    LeastAllocated spreads such pods, so every GPU node loses a little of the CPU (and memory)
    its idle GPUs need; their GPU pods then stop fitting on CPU long before the GPUs are used.
    Packing keeps the headroom of GPU nodes whole, as bin-packing GPU pods keeps GPUs whole;
    GpuFragmentation (weight 10 against this plugin's 2) still keeps them off nodes where the
    CPU they take would strand GPUs. In a cluster without GPUs the plugin skips every pod."""

    NAME: ClassVar[str] = "GpuBinPack"
    Args = GpuBinPackArgs

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        if _request(cycle).wants_gpu:
            return Status.success()
        if self.args.pack_pods_without_gpu and gpu_inventory(cycle.state).devices.node_total.any():  # type: ignore[attr-defined]  # self.args is typed as the base PluginArgs
            cycle.data[_NO_GPU] = True
            return Status.success()
        return Status.skip()

    def score_signature(self, cycle: CycleContext) -> tuple[object, ...] | None:
        # A pod without GPUs: the raw score depends on the pod's requests and the node's row
        # (its requested and allocatable cpu/memory, whether it has GPUs) only.
        if cycle.data.get(_NO_GPU):
            return (_NO_GPU, tuple(sorted(cycle.pod.requests.items())))
        return None

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        # Computed over every slot, then one take: cheaper than gathering each operand.
        inv = gpu_inventory(cycle.state)
        if cycle.data.get(_NO_GPU):
            columns = requested_and_allocatable(
                cycle.state, cycle.pod, nodes, [r.name for r in NO_GPU_PACKING.resources], use_requested=False
            )
            packed = resource_scores(NO_GPU_PACKING, columns, len(nodes))
            rows = np.asarray(nodes, dtype=np.intp)
            total = inv.devices.node_total[rows]
            idle = (total > 0) & (inv.devices.node_free[rows] == total)
            packed = np.where(idle, np.maximum(packed - IDLE_GPU_NODE_PENALTY, 0), packed)
            return np.where(total == 0, MAX_NODE_SCORE, packed)
        request = _request(cycle)
        if request.whole:
            need = request.whole * MILLI

            def whole(rows: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
                total = inv.devices.node_total[rows]
                used = total - inv.devices.node_free[rows]
                score: npt.NDArray[np.int64] = np.minimum(
                    MAX_NODE_SCORE * (used + need) // np.maximum(total, 1), MAX_NODE_SCORE
                )
                return score

            return inv.row_caches.per_slot((self.NAME, request.whole), whole).take(nodes)
        if request.is_share:

            def share(rows: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
                best_col, best_free = inv.shares.choice(request)
                col, free = best_col[rows], best_free[rows]
                if request.milli:
                    take: int | npt.NDArray[np.int64] = request.milli
                else:  # a memory-only share takes its proportion of the chosen device
                    milli, _ = inv.shares.need(request)
                    take = milli[rows, np.maximum(col, 0)]
                total = inv.devices.node_total[rows]
                used = total - inv.devices.node_free[rows]
                node_part = (MAX_NODE_SCORE // 2) * (used + take) // np.maximum(total, 1)
                device_part = (MAX_NODE_SCORE // 2) * np.minimum(MILLI - free + take, MILLI) // MILLI
                return np.where(col >= 0, np.minimum(node_part + device_part, MAX_NODE_SCORE), 0)

            return inv.row_caches.per_slot((self.NAME, "share", request.milli, request.memory_mib), share).take(nodes)
        scores = np.zeros(len(nodes), dtype=np.int64)
        for profile, count in request.mig:
            free = inv.devices.mig_free.get(profile)
            total_p = inv.devices.mig_total.get(profile)
            if free is None or total_p is None:
                continue
            t = total_p.sum(axis=1)[nodes]
            f = free.sum(axis=1)[nodes]
            scores += MAX_NODE_SCORE * (t - f + count) // np.maximum(t, 1)
        return np.minimum(scores // max(1, len(request.mig)), MAX_NODE_SCORE)


class GpuTopologyFitness(_GpuScore):
    """Multi-GPU pods: 0..100 for the device set each node would give (100 = one NUMA node and
    every pair NVLinked). Single-device pods are not scored."""

    NAME: ClassVar[str] = "GpuTopologyFitness"

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        return Status.success() if _request(cycle).whole > 1 else Status.skip()

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        return gpu_inventory(cycle.state).whole_fitness(_request(cycle), np.asarray(nodes))


class GpuAvailability(PreScorePlugin, ScorePlugin):
    """Keep GPU capacity available. CPU-only pods score 100 on nodes without usable GPUs and 0
    on GPU nodes (so GPUs stay free for GPU work); GPU pods score the share of the node's GPU
    capacity still free after placement (spreading, the counterpart of :class:`GpuBinPack`)."""

    NAME: ClassVar[str] = "GpuAvailability"

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        inv = gpu_inventory(cycle.state)
        request = _request(cycle)
        total = inv.devices.total_milli()[nodes]
        if not request.wants_gpu:
            has_gpu = (total > 0) | (inv.devices.device_count[nodes] > 0)
            return np.where(has_gpu, 0, MAX_NODE_SCORE).astype(np.int64)
        free = total - inv.devices.used_milli()[nodes]
        need = request.whole * MILLI if request.whole else request.milli
        score: npt.NDArray[np.int64] = (MAX_NODE_SCORE * np.maximum(free - need, 0) // np.maximum(total, 1)).astype(
            np.int64
        )
        return score
