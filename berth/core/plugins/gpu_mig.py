"""MIG slices: which nodes have enough free slices of each profile, and which devices give them.

Contract: pure and deterministic; reads the device arrays, never changes them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from berth.core.plugins.gpu_device_arrays import GpuDeviceArrays
from berth.core.plugins.gpu_requests import MIG_PREFIX, BoolArray, GpuMisfit, GpuRequest, IntArray

__all__ = ["mig_filter", "mig_pieces"]


def mig_filter(
    devices: GpuDeviceArrays, request: GpuRequest, rows: IntArray
) -> tuple[BoolArray, list[tuple[GpuMisfit, BoolArray]]]:
    """Which of ``rows`` have enough free slices of every profile ``request.mig`` asks for, and
    per profile the rows it is the first missing one of (disjoint masks over ``rows``)."""
    fits = np.ones(len(rows), dtype=bool)
    failures = []
    for profile, count in request.mig:
        free = devices.mig_free.get(profile)
        ok = (free.sum(axis=1)[rows] >= count) if free is not None else np.zeros(len(rows), dtype=bool)
        failures.append((GpuMisfit("mig", (f"{MIG_PREFIX}{profile}",)), fits & ~ok))
        fits = fits & ok
    return fits, failures


def mig_pieces(
    devices: GpuDeviceArrays, row: int, request: GpuRequest, columns: Iterable[int]
) -> tuple[tuple[int, str, int], ...] | None:
    """Slices for ``request.mig`` from ``columns`` of node ``row``, as sorted (device index,
    profile, slices): the device with the fewest free slices of the profile first (bin-packing),
    lowest index among equals; a slice never spans devices. None when the columns do not have
    enough."""
    columns = list(columns)
    pieces: list[tuple[int, str, int]] = []
    for profile, count in request.mig:
        free = devices.mig_free.get(profile)
        if free is None:
            return None
        order = sorted((int(free[row, c]), c) for c in columns if free[row, c] > 0)
        need = count
        for have, c in order:
            take = min(have, need)
            pieces.append((int(devices.dev_index[row, c]), profile, take))
            need -= take
            if need == 0:
                break
        if need:
            return None
    return tuple(sorted(pieces))
