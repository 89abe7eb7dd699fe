"""Fractional-GPU shares: which device of each node a share of one shape would take.

A share asks for ``milli`` thousandths of one device and/or ``memory_mib`` of its memory; each
implies its part of the other, so shares of both kinds can share a device. Bin-packing gives a
share the most used device that fits, lowest index among equals.

Contract: pure and deterministic. Answers are cached per share shape and kept incrementally: the
owner of the device arrays must report every changed row with :meth:`ShareIndex.touch`, and
call :meth:`~ShareIndex.forget_needs` when device memory may have changed (a node was described).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from berth.core.plugins.gpu_device_arrays import GpuDeviceArrays
from berth.core.plugins.gpu_requests import MILLI, BoolArray, GpuAllocation, GpuRequest, IntArray

__all__ = ["ShareIndex", "ShareSummary"]

_MAX_CACHED_SHAPES = 64
_FEW_ROWS = 8  # at or below: work on the picked rows; above: on the whole matrix


@dataclass
class ShareSummary:
    """Per node, for one share shape: the column bin-packing picks (-1: none fits) and that
    device's free milli; ``dirty`` rows must be recomputed."""

    best_col: IntArray
    best_free: IntArray
    dirty: set[int] = field(default_factory=set)


class ShareIndex:
    """Share answers over the node slots of ``devices``."""

    def __init__(self, devices: GpuDeviceArrays, needs: dict[tuple[int, int], tuple[IntArray, IntArray]] | None = None):
        self._devices = devices
        self._needs: dict[tuple[int, int], tuple[IntArray, IntArray]] = dict(needs or {})
        self._summaries: dict[tuple[int, int], ShareSummary] = {}

    def copy_for(self, devices: GpuDeviceArrays) -> ShareIndex:
        """An index over ``devices`` (a copy of this one's arrays) that reuses the per-device
        needs, which depend only on device memory; summaries are rebuilt on first use."""
        return ShareIndex(devices, self._needs)

    def touch(self, row: int) -> None:
        """Mark ``row`` changed for every cached share shape."""
        for summary in self._summaries.values():
            summary.dirty.add(row)

    def forget_summaries(self) -> None:
        self._summaries = {}

    def forget_needs(self) -> None:
        self._needs = {}

    def need(self, request: GpuRequest) -> tuple[IntArray, IntArray]:
        """[node, device] (milli, MiB) the share takes from each device: a fraction implies its
        part of the memory and a memory size its part of the compute (MILLI + 1, never
        fitting, where the device's memory is unknown)."""
        key = (request.milli, request.memory_mib)
        if key in self._needs:
            return self._needs[key]
        total = self._devices.mem_total
        if request.milli:
            milli = np.full(total.shape, request.milli, dtype=np.int64)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                milli = np.where(total > 0, -((-request.memory_mib * MILLI) // np.maximum(total, 1)), MILLI + 1)
        memory = (
            np.full(total.shape, request.memory_mib, dtype=np.int64)
            if request.memory_mib
            else (total * request.milli) // MILLI
        )
        # Device memory never changes, so a share's per-device need is computed once per shape.
        self._needs[key] = (milli, memory)
        return milli, memory

    def fits(self, request: GpuRequest, rows: IntArray | None = None) -> BoolArray:
        """[rows, devices]: which devices can take the share."""
        devices = self._devices
        milli, memory = self.need(request)
        if rows is not None and len(rows) <= _FEW_ROWS:
            return (
                devices.usable[rows]
                & (devices.free_milli[rows] >= milli[rows])
                & (devices.mem_free[rows] >= memory[rows])
            )
        # Whole-matrix comparisons then a row pick: fancy-indexing three [N, D] operands first
        # costs ten times more than comparing everything.
        fits = devices.usable & (devices.free_milli >= milli) & (devices.mem_free >= memory)
        return fits if rows is None else fits[rows]

    def summary(self, request: GpuRequest) -> ShareSummary:
        """Per node, for one share shape: does any device fit, and which one bin-packing picks.

        Kept incrementally: a placement changes one node, so only the rows that changed since
        the last use of this shape are recomputed (a handful), not the whole [nodes, devices]
        matrix — which is what makes per-pod cost independent of the cluster size."""
        devices = self._devices
        key = (request.milli, request.memory_mib)
        summary = self._summaries.get(key)
        if summary is None:
            if len(self._summaries) >= _MAX_CACHED_SHAPES:  # many distinct shapes: start over rather than grow
                self._summaries = {}
            fits = self.fits(request)
            masked = np.where(fits, devices.free_milli, np.iinfo(np.int64).max)
            col = np.argmin(masked, axis=1) if devices.width else np.zeros(len(fits), dtype=np.int64)
            best = np.where(fits.any(axis=1), col, -1)
            summary = ShareSummary(best, devices.free_at(np.arange(len(best)), best))
            self._summaries[key] = summary
        elif summary.dirty:
            if len(summary.dirty) <= 16:
                self._update_few(summary, request)
            else:
                milli, memory = self.need(request)
                rows = np.fromiter(sorted(summary.dirty), dtype=np.intp, count=len(summary.dirty))
                fits = (
                    devices.usable[rows]
                    & (devices.free_milli[rows] >= milli[rows])
                    & (devices.mem_free[rows] >= memory[rows])
                )
                masked = np.where(fits, devices.free_milli[rows], np.iinfo(np.int64).max)
                col = np.argmin(masked, axis=1) if devices.width else np.zeros(len(rows), dtype=np.int64)
                best = np.where(fits.any(axis=1), col, -1)
                summary.best_col[rows] = best
                summary.best_free[rows] = devices.free_at(rows, best)
            summary.dirty.clear()
        return summary

    def _update_few(self, summary: ShareSummary, request: GpuRequest) -> None:
        # A few changed nodes: plain Python over their devices beats numpy's overhead.
        devices = self._devices
        milli, memory = self.need(request)
        for row in summary.dirty:
            free = devices.free_milli[row].tolist()
            mem = devices.mem_free[row].tolist()
            use = devices.usable[row].tolist()
            need = milli[row].tolist()
            need_mem = memory[row].tolist()
            best_col, best_free = -1, 0
            for c in range(devices.width):
                if use[c] and free[c] >= need[c] and mem[c] >= need_mem[c] and (best_col < 0 or free[c] < best_free):
                    best_col, best_free = c, free[c]
            summary.best_col[row] = best_col
            summary.best_free[row] = best_free

    def choice(self, request: GpuRequest) -> tuple[IntArray, IntArray]:
        """Per slot: the column bin-packing gives the share (-1: none fits) and that device's
        free milli now. Read-only views of cached arrays: do not modify."""
        summary = self.summary(request)
        return summary.best_col, summary.best_free

    def device(self, request: GpuRequest, rows: IntArray | None = None) -> IntArray:
        """Column each node would give the share: the most used device that fits (bin-packing),
        lowest index among equals; -1 where none fits."""
        if rows is not None and len(rows) <= _FEW_ROWS:
            fits = self.fits(request, rows)
            free = self._devices.free_milli[rows]
            key = np.where(fits, free, np.iinfo(np.int64).max)
            col = np.argmin(key, axis=1) if self._devices.width else np.zeros(len(key), dtype=np.int64)
            return np.where(fits.any(axis=1), col, -1)
        best = self.summary(request).best_col
        return best.copy() if rows is None else best[rows]

    def allocation(self, row: int, col: int, request: GpuRequest) -> GpuAllocation:
        """The share ``request`` as held on column ``col`` of node ``row`` (whether it fits or not)."""
        milli, memory = self.need(request)
        return GpuAllocation(
            devices=(int(self._devices.dev_index[row, col]),),
            milli=int(milli[row, col]),
            memory_mib=int(memory[row, col]),
        )

    def at(self, row: int, request: GpuRequest, col: int) -> GpuAllocation | None:
        """The share ``request`` taken from column ``col`` of node ``row``, or None if that
        device cannot take it (unusable, or too little free compute or memory)."""
        if not request.is_share or not 0 <= col < self._devices.width:
            return None
        if not self.fits(request, np.array([row], dtype=np.intp))[0, col]:
            return None
        return self.allocation(row, col, request)
