"""The values GPU accounting trades in: what a pod asks of GPU devices (:class:`GpuRequest`), what
it holds on a node (:class:`GpuAllocation`) and why a node cannot host it (:class:`GpuMisfit`).

Kubernetes counts GPUs (``nvidia.com/gpu: 8``); Berth places pods on *devices*, in thousandths
(:data:`MILLI`) of a device for shares. All values are frozen and hashable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from berth.schemas.cluster import PodInfo

__all__ = [
    "GPU_RESOURCE",
    "MIG_PREFIX",
    "MILLI",
    "BoolArray",
    "GpuAllocation",
    "GpuMisfit",
    "GpuRequest",
    "IntArray",
    "Locality",
]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
MILLI = 1000

Locality = Literal["any", "same-node", "same-socket", "nvlink"]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class GpuRequest:
    """What one pod asks of GPU devices.

    Exactly one shape (or none, for a CPU-only pod): ``whole`` devices (from the
    ``nvidia.com/gpu`` request), a *share* of one device (``milli`` from ``gpu-fraction`` and/or
    ``memory_mib`` from ``gpu-memory``), or MIG slices (``mig``: profile → count). ``locality``
    constrains a multi-device set and is ignored for a single device.
    """

    whole: int = 0
    milli: int = 0
    memory_mib: int = 0
    mig: tuple[tuple[str, int], ...] = ()
    locality: Locality = "any"

    @classmethod
    def of(cls, pod: PodInfo) -> GpuRequest:
        mig = tuple(
            sorted(
                (name[len(MIG_PREFIX) :], amount)
                for name, amount in pod.requests.items()
                if name.startswith(MIG_PREFIX) and amount > 0
            )
        )
        return cls(
            whole=pod.requests.get(GPU_RESOURCE, 0),
            milli=pod.gpu_fraction_milli or 0,
            memory_mib=pod.gpu_memory_mib or 0,
            mig=mig,
            locality=pod.gpu_locality,
        )

    @property
    def is_share(self) -> bool:
        return self.whole == 0 and (self.milli > 0 or self.memory_mib > 0)

    @property
    def wants_gpu(self) -> bool:
        return self.whole > 0 or self.is_share or bool(self.mig)


@dataclass(frozen=True)
class GpuAllocation:
    """Devices a pod holds on one node. ``milli``/``memory_mib`` are per device taken (1000 and
    the whole memory for whole devices); ``mig`` lists (device index, profile, slices)."""

    devices: tuple[int, ...] = ()
    milli: int = 0
    memory_mib: int = 0
    mig: tuple[tuple[int, str, int], ...] = ()


@dataclass(frozen=True)
class GpuMisfit:
    """Why a node cannot host a GPU request: ``kind`` picks the message (see the messages
    module), ``detail`` carries its numbers."""

    kind: Literal["count", "socket", "nvlink", "share", "mig"]
    detail: tuple[int | str, ...] = ()
