"""Per-device GPU accounting over all nodes at once: the state behind Berth's GPU plugins.

Kubernetes counts GPUs (``nvidia.com/gpu: 8``); Berth places pods on *devices*. A
:class:`GpuInventory` is composed of parts, each usable on its own:

- ``inventory.devices`` (:class:`~berth.core.plugins.gpu_device_arrays.GpuDeviceArrays`): per node
  slot and device, what is free (compute in milli, memory, MIG slices), and per node the whole
  free devices (``full_mask``, ``full_count``) and milli totals;
- ``inventory.topologies`` (:class:`~berth.core.plugins.gpu_topology.TopologyCatalog`): the
  distinct device layouts and their memoised whole-GPU choices, as dense lookup tables;
- ``inventory.shares`` (:class:`~berth.core.plugins.gpu_shares.ShareIndex`): which device each
  node would give a fractional share, per share shape;
- ``inventory.row_caches`` (:class:`~berth.core.plugins.gpu_row_caches.RowCaches`): per-slot
  values derived from a node's own row, recomputed only where rows changed;
- MIG slices are chosen by :mod:`berth.core.plugins.gpu_mig`.

The inventory answers the questions that span parts (fits, choose, the devices of a bound pod)
and is the only one that changes them, so the cached parts learn of every changed row.

Contract: pure and deterministic. Methods that change state (:meth:`GpuInventory.allocate`,
:meth:`~GpuInventory.release`) mutate this object in place and are exact inverses of each other,
which is what gang scheduling's roll-back relies on; :meth:`~GpuInventory.copy` gives an
independent inventory. Misfits are values (:class:`~berth.core.plugins.gpu_requests.GpuMisfit`),
never exceptions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from berth.core.plugins.gpu_device_arrays import GpuDeviceArrays
from berth.core.plugins.gpu_mig import mig_filter, mig_pieces
from berth.core.plugins.gpu_requests import (
    GPU_RESOURCE,
    MILLI,
    BoolArray,
    GpuAllocation,
    GpuMisfit,
    GpuRequest,
    IntArray,
)
from berth.core.plugins.gpu_row_caches import RowCaches
from berth.core.plugins.gpu_shares import ShareIndex
from berth.core.plugins.gpu_topology import TopologyCatalog
from berth.schemas.cluster import NodeInfo, PodInfo

__all__ = ["GpuInventory"]

_PER_SLOT_LOOKUP_MIN_ROWS = 64  # above: keep whole-GPU answers per slot; at or below: look them up


class GpuInventory:
    """Free GPU capacity of every node slot, per device.

    Rows are node *slots* (as the ClusterState assigns them; a slot may be empty), columns the
    node's devices in index order. Build incrementally with :meth:`grow`, :meth:`set_node`,
    :meth:`clear_node`, or at once with :meth:`of`. Read the arrays from :attr:`devices`.
    """

    def __init__(self) -> None:
        self.devices = GpuDeviceArrays()
        self.topologies = TopologyCatalog()
        self.shares = ShareIndex(self.devices)
        self.row_caches = RowCaches(self.devices)

    # --- construction --------------------------------------------------------------------------

    @classmethod
    def of(cls, nodes: Sequence[NodeInfo]) -> GpuInventory:
        """An inventory with ``nodes`` in slots 0.. (in the given order), nothing allocated."""
        inv = cls()
        inv.grow(len(nodes), max((len(node.gpus) for node in nodes), default=0))
        for slot, node in enumerate(nodes):
            inv.set_node(slot, node)
        return inv

    def grow(self, capacity: int, width: int | None = None) -> None:
        """Make room for ``capacity`` slots and ``width`` devices per node (never shrinks)."""
        if not self.devices.grow(capacity, width):
            return
        self.shares.forget_summaries()
        self.row_caches.forget()
        # Lookup tables are sized by 2**width and shares' needs by the matrix shape.
        self.topologies.widen(self.devices.width)
        self.shares.forget_needs()

    def set_node(self, slot: int, node: NodeInfo) -> None:
        """Describe ``node`` in ``slot`` with all its devices free (re-apply holdings after)."""
        self.grow(slot + 1, len(node.gpus))
        self.clear_node(slot)
        self.devices.set_node(slot, node, self.topologies.id_of(node))
        self.shares.forget_needs()
        self._changed(slot)

    def clear_node(self, slot: int) -> None:
        """Empty ``slot`` (the node left): no devices, nothing free."""
        if slot >= self.devices.rows:
            return
        self.devices.clear_node(slot)
        self.shares.forget_needs()
        self.shares.forget_summaries()
        self.row_caches.forget()

    def copy(self) -> GpuInventory:
        """An independent inventory (the memoised choices of a topology are shared: they never change)."""
        other = GpuInventory()
        other.devices = self.devices.copy()
        other.topologies = self.topologies.copy()
        other.shares = self.shares.copy_for(other.devices)
        other.row_caches = RowCaches(other.devices)
        return other

    def _changed(self, row: int) -> None:
        self.devices.summarise(row)
        self.shares.touch(row)
        self.row_caches.touch(row)

    # --- filtering -------------------------------------------------------------------------------

    def _whole_lookup(self, rows: IntArray, count: int, locality: str) -> tuple[BoolArray, IntArray]:
        """Per row: can it give ``count`` whole devices for ``locality``, and the fitness of the set."""
        devices = self.devices
        if len(rows) > _PER_SLOT_LOOKUP_MIN_ROWS:
            # Feasibility and fitness of a node's best set depend only on its own row.
            def compute(sub: IntArray) -> IntArray:
                ok, fit = self.topologies.lookup(devices.topo_id[sub], devices.full_mask[sub], count, locality)
                return np.where(ok, fit, -1)

            values = self.row_caches.per_slot(("whole", count, locality), compute).take(rows)
            return values >= 0, np.maximum(values, 0)
        return self.topologies.lookup(devices.topo_id[rows], devices.full_mask[rows], count, locality)

    def filter_codes(self, request: GpuRequest, rows: IntArray) -> tuple[IntArray, list[GpuMisfit]]:
        """Per row of ``rows``: -1 if it fits, else the index of its reason in the returned list.

        The same answer as :meth:`filter`, in the shape a Filter plugin returns, and kept per
        slot between pods (only changed nodes are recomputed) for whole GPUs and shares."""
        if request.whole:
            misfits = [GpuMisfit("count", (GPU_RESOURCE,))]
            if request.whole > 1 and request.locality in ("same-socket", "nvlink"):
                kind: Literal["socket", "nvlink"] = "socket" if request.locality == "same-socket" else "nvlink"
                misfits.append(GpuMisfit(kind, (request.whole,)))

            def compute(sub: IntArray) -> IntArray:
                fits, failures = self.filter(request, sub)
                codes = np.full(len(sub), -1, dtype=np.int64)
                for index, (_, mask) in enumerate(failures):
                    codes[mask] = index
                return codes

            return self.row_caches.per_slot(("filter", request.whole, request.locality), compute).take(rows), misfits
        if request.is_share:
            best_col, _ = self.shares.choice(request)
            codes = np.where(best_col.take(rows) >= 0, -1, 0)
            return codes, [GpuMisfit("share", (request.milli, request.memory_mib))]
        fits, failures = self.filter(request, rows)
        codes = np.full(len(rows), -1, dtype=np.int64)
        for index, (_, mask) in enumerate(failures):
            codes[mask] = index
        return codes, [misfit for misfit, _ in failures]

    def filter(
        self, request: GpuRequest, rows: IntArray | None = None
    ) -> tuple[BoolArray, list[tuple[GpuMisfit, BoolArray]]]:
        """Which of ``rows`` (default: all nodes, in order) can host ``request``.

        Returns ``(fits, failures)``: ``failures`` pairs each reason with the rows it explains
        (disjoint masks over ``rows``; every row that does not fit is in exactly one), so a caller
        can count nodes per reason for a kube-style message without a Python loop over nodes.
        """
        rows = np.arange(self.devices.rows) if rows is None else rows
        if not request.wants_gpu:
            return np.ones(len(rows), dtype=bool), []
        if request.whole:
            count_ok = self.devices.full_count[rows] >= request.whole
            failures = [(GpuMisfit("count", (GPU_RESOURCE,)), ~count_ok)]
            if request.whole == 1 or request.locality in ("any", "same-node"):
                return count_ok, failures
            feasible, _ = self._whole_lookup(rows, request.whole, request.locality)
            feasible &= count_ok
            # Enough free devices, but not in the places the locality asks for.
            kind: Literal["socket", "nvlink"] = "socket" if request.locality == "same-socket" else "nvlink"
            failures.append((GpuMisfit(kind, (request.whole,)), count_ok & ~feasible))
            return feasible, failures
        if request.is_share:
            fits = self.shares.summary(request).best_col[rows] >= 0
            return fits, [(GpuMisfit("share", (request.milli, request.memory_mib)), ~fits)]
        return mig_filter(self.devices, request, rows)

    # --- scoring inputs ------------------------------------------------------------------------

    def whole_fitness(self, request: GpuRequest, rows: IntArray) -> IntArray:
        """0..100 topology fitness of the device set each row would give a whole-GPU request."""
        _, fitness = self._whole_lookup(rows, request.whole, request.locality)
        return fitness

    # --- choosing and holding devices ----------------------------------------------------------

    def choose(self, row: int, request: GpuRequest) -> GpuAllocation | None:
        """The devices node ``row`` would give ``request``, or None if it cannot."""
        if not request.wants_gpu:
            return GpuAllocation()
        devices = self.devices
        if request.whole:
            cols = self.topologies.choose(
                int(devices.topo_id[row]),
                int(devices.full_mask[row]),
                request.whole,
                request.locality if request.whole > 1 else "any",
            )
            if cols is None:
                return None
            chosen = tuple(int(devices.dev_index[row, c]) for c in cols)
            return GpuAllocation(devices=tuple(sorted(chosen)), milli=MILLI)
        if request.is_share:
            col = int(self.shares.choice(request)[0][row])
            return None if col < 0 else self.shares.allocation(row, col, request)
        pieces = mig_pieces(devices, row, request, range(devices.width))
        if pieces is None:
            return None
        return GpuAllocation(devices=tuple(sorted({d for d, _, _ in pieces})), mig=pieces)

    def allocate(self, row: int, allocation: GpuAllocation) -> None:
        """Hold ``allocation`` on node ``row`` (in place)."""
        self.devices.apply(row, allocation, 1)
        self._changed(row)

    def release(self, row: int, allocation: GpuAllocation) -> None:
        """Give ``allocation`` back (the exact inverse of :meth:`allocate` for a fitting claim)."""
        self.devices.apply(row, allocation, -1)
        self._changed(row)

    def allocation_of_bound(self, row: int, pod: PodInfo, devices: Sequence[int] | None = None) -> GpuAllocation:
        """What a pod already bound to node ``row`` holds.

        Uses ``devices`` (default: the pod's recorded ``berth.io/gpu-devices``) when given;
        otherwise assigns devices deterministically, as :meth:`choose` would now, so that
        replaying the same bound pods in the same order always yields the same layout. A
        recorded device the node does not have is dropped (the node changed under the pod); an
        over-committed claim is kept. MIG slices are spread over the recorded devices the way
        :meth:`choose` fills them (fullest first), so a decision replays to the same slices.
        """
        request = GpuRequest.of(pod)
        if not request.wants_gpu:
            return GpuAllocation()
        arrays = self.devices
        known = arrays.dev_index[row].tolist()
        recorded = tuple(sorted(d for d in (pod.gpu_devices if devices is None else devices) if d in known))
        if recorded:
            if request.whole:
                return GpuAllocation(devices=recorded, milli=MILLI)
            if request.is_share:
                return self.shares.allocation(row, arrays.column(row, recorded[0]), request)
            allowed = [arrays.column(row, d) for d in recorded]
            pieces = mig_pieces(arrays, row, request, allowed)
            return GpuAllocation(devices=recorded, mig=pieces or ())
        chosen = self.choose(row, request)
        if chosen is not None:
            return chosen
        # Over-committed node: still record the claim on the lowest-indexed devices.
        usable = [int(arrays.dev_index[row, c]) for c in range(arrays.width) if arrays.usable[row, c]]
        if request.whole:
            return GpuAllocation(devices=tuple(usable[: request.whole]), milli=MILLI)
        if request.is_share and usable:
            return self.shares.allocation(row, arrays.column(row, usable[0]), request)
        return GpuAllocation()
