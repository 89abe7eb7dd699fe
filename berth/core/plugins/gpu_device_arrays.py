"""Per-device GPU arrays over all node slots: what each device of each node has free.

Rows are node *slots* (as the ClusterState assigns them; a slot may be empty), columns the node's
devices in index order, padded on the right:

- ``free_milli``: thousandths of the device nobody holds; 0 for padding, unhealthy devices and
  MIG-partitioned devices (those serve only MIG slices), so "fits" is a plain comparison;
- ``mem_free`` / ``mem_total``: device memory in MiB (0 when the node did not say);
- ``mig_free[profile]`` / ``mig_total[profile]``: free and total MIG slices of that profile per device;
- per node: ``full_mask`` (bit c set = column c is a healthy whole device nobody touches),
  ``full_count``, ``node_total`` / ``node_free`` (milli of the healthy whole devices, all and
  free), ``device_count``, ``models`` and ``topo_id`` (the node's layout in a
  :class:`~berth.core.plugins.gpu_topology.TopologyCatalog`).

Contract: pure and deterministic; :meth:`GpuDeviceArrays.apply` with sign +1 and -1 are exact
inverses for a claim that fits. The per-node summaries are current only after
:meth:`~GpuDeviceArrays.summarise` of the changed row; the owner calls it.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

from berth.core.plugins.gpu_requests import MILLI, BoolArray, GpuAllocation, IntArray
from berth.schemas.cluster import NodeInfo

__all__ = ["GpuDeviceArrays"]

_Item = TypeVar("_Item", bound=np.generic)


class GpuDeviceArrays:
    """Free and total capacity of every device of every node slot, and per-node summaries."""

    def __init__(self) -> None:
        self.node_names: list[str | None] = []
        self.width = 0
        self.dev_index: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.free_milli: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.mem_free: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.mem_total: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.usable: BoolArray = np.zeros((0, 0), dtype=bool)
        self.models: list[tuple[str, ...]] = []
        self.mig_free: dict[str, IntArray] = {}
        self.mig_total: dict[str, IntArray] = {}
        self.full_mask: IntArray = np.zeros(0, dtype=np.int64)
        self.full_count: IntArray = np.zeros(0, dtype=np.int64)
        self.node_total: IntArray = np.zeros(0, dtype=np.int64)
        self.node_free: IntArray = np.zeros(0, dtype=np.int64)
        self.topo_id: IntArray = np.zeros(0, dtype=np.int64)
        self.device_count: IntArray = np.zeros(0, dtype=np.int64)

    @property
    def rows(self) -> int:
        """Node slots the arrays hold (live or empty)."""
        return len(self.node_names)

    def grow(self, capacity: int, width: int | None = None) -> bool:
        """Make room for ``capacity`` slots and ``width`` devices per node (never shrinks);
        True when the shape changed."""
        rows = max(capacity, len(self.node_names))
        cols = max(width or 0, self.width)
        if rows == len(self.node_names) and cols == self.width:
            return False

        def resized(array: npt.NDArray[_Item], fill: int | bool) -> npt.NDArray[_Item]:
            out: npt.NDArray[_Item] = np.full((rows, cols), fill, dtype=array.dtype)
            out[: array.shape[0], : array.shape[1]] = array
            return out

        self.dev_index = resized(self.dev_index, -1)
        self.free_milli = resized(self.free_milli, 0)
        self.mem_free = resized(self.mem_free, 0)
        self.mem_total = resized(self.mem_total, 0)
        self.usable = resized(self.usable, False)
        self.mig_free = {p: resized(a, 0) for p, a in self.mig_free.items()}
        self.mig_total = {p: resized(a, 0) for p, a in self.mig_total.items()}
        extra = rows - len(self.node_names)
        self.full_mask = np.concatenate([self.full_mask, np.zeros(extra, dtype=np.int64)])
        self.full_count = np.concatenate([self.full_count, np.zeros(extra, dtype=np.int64)])
        self.node_total = np.concatenate([self.node_total, np.zeros(extra, dtype=np.int64)])
        self.node_free = np.concatenate([self.node_free, np.zeros(extra, dtype=np.int64)])
        self.topo_id = np.concatenate([self.topo_id, np.zeros(extra, dtype=np.int64)])
        self.device_count = np.concatenate([self.device_count, np.zeros(extra, dtype=np.int64)])
        self.node_names += [None] * extra
        self.models += [()] * extra
        self.width = cols
        return True

    def set_node(self, slot: int, node: NodeInfo, topo_id: int) -> None:
        """Describe ``node`` in the empty ``slot`` (wide enough for its devices) with all devices
        free; the summaries of the row are left for :meth:`summarise`."""
        self.node_names[slot] = node.name
        self.device_count[slot] = len(node.gpus)
        self.models[slot] = tuple(device.model for device in node.gpus)
        for c, device in enumerate(node.gpus):
            self.dev_index[slot, c] = device.index
            self.mem_total[slot, c] = device.memory_mib
            self.mem_free[slot, c] = device.memory_mib
            whole = device.healthy and not device.mig
            self.usable[slot, c] = whole
            self.free_milli[slot, c] = MILLI if whole else 0
            if device.healthy:
                for piece in device.mig:
                    if piece.profile not in self.mig_free:
                        self.mig_free[piece.profile] = np.zeros(self.free_milli.shape, dtype=np.int64)
                        self.mig_total[piece.profile] = np.zeros(self.free_milli.shape, dtype=np.int64)
                    self.mig_free[piece.profile][slot, c] += piece.count
                    self.mig_total[piece.profile][slot, c] += piece.count
        self.topo_id[slot] = topo_id

    def clear_node(self, slot: int) -> None:
        """Empty ``slot`` (an existing row): no devices, nothing free."""
        self.node_names[slot] = None
        self.device_count[slot] = 0
        self.models[slot] = ()
        for array, fill in ((self.dev_index, -1), (self.free_milli, 0), (self.mem_free, 0), (self.mem_total, 0)):
            array[slot] = fill
        self.usable[slot] = False
        for array in (*self.mig_free.values(), *self.mig_total.values()):
            array[slot] = 0
        self.topo_id[slot] = 0
        self.full_mask[slot] = 0
        self.full_count[slot] = 0
        self.node_total[slot] = 0
        self.node_free[slot] = 0

    def copy(self) -> GpuDeviceArrays:
        """Independent arrays with the same contents."""
        other = GpuDeviceArrays()
        other.node_names = list(self.node_names)
        other.width = self.width
        other.dev_index = self.dev_index.copy()
        other.free_milli = self.free_milli.copy()
        other.mem_free = self.mem_free.copy()
        other.mem_total = self.mem_total.copy()
        other.usable = self.usable.copy()
        other.models = list(self.models)
        other.mig_free = {p: a.copy() for p, a in self.mig_free.items()}
        other.mig_total = {p: a.copy() for p, a in self.mig_total.items()}
        other.full_mask = self.full_mask.copy()
        other.full_count = self.full_count.copy()
        other.node_total = self.node_total.copy()
        other.node_free = self.node_free.copy()
        other.topo_id = self.topo_id.copy()
        other.device_count = self.device_count.copy()
        return other

    def summarise(self, row: int) -> None:
        """Recompute the per-node summaries of ``row`` from its devices."""
        # Plain Python over one row (a handful of devices) beats numpy's per-call overhead.
        mask = count = total = free = 0
        for c, (milli, ok) in enumerate(zip(self.free_milli[row].tolist(), self.usable[row].tolist(), strict=True)):
            if ok:
                total += MILLI
                free += milli
                if milli == MILLI:
                    mask |= 1 << c
                    count += 1
        self.full_mask[row] = mask
        self.full_count[row] = count
        self.node_total[row] = total
        self.node_free[row] = free

    def column(self, row: int, device: int) -> int:
        """The column of device index ``device`` on node ``row``; KeyError if it has none."""
        if 0 <= device < self.width and self.dev_index[row, device] == device:
            return device  # the usual layout: device i in column i
        hits = np.flatnonzero(self.dev_index[row] == device)
        if not len(hits):
            raise KeyError(f"node {self.node_names[row]} has no GPU device {device}")
        return int(hits[0])

    def apply(self, row: int, allocation: GpuAllocation, sign: int) -> None:
        """Take (``sign`` 1) or give back (-1) ``allocation`` on node ``row``, clamped to what the
        devices have; the row's summaries are left for :meth:`summarise`."""
        for piece_device, profile, count in allocation.mig:
            c = self.column(row, piece_device)
            self.mig_free[profile][row, c] = max(0, int(self.mig_free[profile][row, c]) - sign * count)
        if allocation.milli or allocation.memory_mib:
            for device in allocation.devices:
                c = self.column(row, device)
                if not self.usable[row, c]:
                    continue
                memory = (
                    int(self.mem_total[row, c])
                    if allocation.milli == MILLI and not allocation.memory_mib
                    else allocation.memory_mib
                )
                # Clamp: a bound pod's claim is a fact even if the cluster is over-committed.
                self.free_milli[row, c] = min(MILLI, max(0, int(self.free_milli[row, c]) - sign * allocation.milli))
                self.mem_free[row, c] = min(
                    int(self.mem_total[row, c]), max(0, int(self.mem_free[row, c]) - sign * memory)
                )

    def free_at(self, rows: IntArray, cols: IntArray) -> IntArray:
        """Free milli of column ``cols[i]`` of node ``rows[i]`` (0 where the column is -1)."""
        if not self.width:
            return np.zeros(len(rows), dtype=np.int64)
        return np.where(cols >= 0, self.free_milli[rows, np.maximum(cols, 0)], 0)

    def total_milli(self) -> IntArray:
        """Per node: milli of its healthy, whole (non-MIG) devices (kept current, O(1))."""
        return self.node_total

    def used_milli(self) -> IntArray:
        """Per node: milli of those devices held by pods."""
        return self.node_total - self.node_free

    def describe(self, row: int) -> dict[int, dict[str, int]]:
        """Per device index: free milli and MiB, and free MIG slices (for tests and explain)."""
        out: dict[int, dict[str, int]] = {}
        for c in range(int(self.device_count[row])):
            entry = {"free_milli": int(self.free_milli[row, c]), "mem_free": int(self.mem_free[row, c])}
            for profile, free in sorted(self.mig_free.items()):
                if free[row, c]:
                    entry[profile] = int(free[row, c])
            out[int(self.dev_index[row, c])] = entry
        return out
