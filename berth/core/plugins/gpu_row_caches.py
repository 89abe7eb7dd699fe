"""Per-slot arrays derived from each node's own GPU row, recomputed only where rows changed.

Contract: pure and deterministic; a cached value equals ``compute`` over the current state for
every slot, provided every change to a row is reported with :meth:`RowCaches.touch`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from berth.core.plugins.gpu_device_arrays import GpuDeviceArrays
from berth.core.plugins.gpu_requests import IntArray

__all__ = ["RowCaches"]

_MAX_CACHED_KEYS = 128


@dataclass
class _RowCache:
    """A per-slot array derived from one row's state only; ``dirty`` rows must be recomputed."""

    values: IntArray
    dirty: set[int] = field(default_factory=set)


class RowCaches:
    """Per-slot arrays over the slots of ``devices``, one per key."""

    def __init__(self, devices: GpuDeviceArrays) -> None:
        self._devices = devices
        self._caches: dict[tuple[object, ...], _RowCache] = {}

    def per_slot(self, key: tuple[object, ...], compute: Callable[[IntArray], IntArray]) -> IntArray:
        """A per-slot array that depends only on each slot's own row, kept incrementally.

        ``compute(rows)`` must return the values of ``rows`` from the current state. The first
        call computes every slot; later calls recompute only the slots changed since (a
        placement changes one), so a score that is a pure function of a node's own GPU state
        costs O(changed rows) per pod instead of O(nodes). Read-only result: do not modify.
        """
        cache = self._caches.get(key)
        if cache is None:
            if len(self._caches) >= _MAX_CACHED_KEYS:
                self._caches = {}
            cache = _RowCache(np.asarray(compute(np.arange(self._devices.rows)), dtype=np.int64))
            self._caches[key] = cache
        elif cache.dirty:
            rows = np.fromiter(sorted(cache.dirty), dtype=np.intp, count=len(cache.dirty))
            cache.dirty.clear()
            cache.values[rows] = compute(rows)
        return cache.values

    def touch(self, row: int) -> None:
        """Mark ``row`` changed for every per-slot array: its GPU state changed, or something
        outside it that a cached value also reads (free CPU) did."""
        for cache in self._caches.values():
            cache.dirty.add(row)

    def forget(self) -> None:
        """Drop every cached array (the slots were resized or emptied)."""
        self._caches = {}
