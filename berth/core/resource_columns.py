"""The resource columns of a :class:`~berth.core.state.ClusterState`: what each node offers and
what placed pods request of it, per resource, in canonical units.

Owned by the state, which calls the mutations as nodes and pods come and go (and stamps the
node versions); plugins read them through ``state.resources``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from berth.core.node_labels import grow_rows
from berth.core.placed_pods import PlacedPod

__all__ = [
    "CPU",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "EPHEMERAL_STORAGE",
    "FIXED_RESOURCES",
    "MEMORY",
    "PODS",
    "ResourceColumns",
]

FIXED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
CPU, MEMORY, EPHEMERAL_STORAGE, PODS = range(4)

DEFAULT_MILLI_CPU_REQUEST = 100
"""kube's ``DefaultMilliCPURequest``: what scoring assumes for a pod that requests no cpu."""
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""kube's ``DefaultMemoryRequest`` (200 MiB), likewise for memory."""


class ResourceColumns:
    """``allocatable`` / ``requested``: int64 ``[capacity, resources]`` (columns 0..3 are cpu,
    memory, ephemeral-storage, pods; extended resources get columns as they appear, which is
    O(capacity) once per resource); ``nonzero_requested``: ``[capacity, 2]`` cpu and memory with
    kube's defaults for pods that request none (used by scoring, as kube's ``NonZeroRequested``).

    The arrays are column-major: plugins read one resource over many nodes, a contiguous
    gather in Fortran order and a strided one in C order. Arrays may be replaced when a column
    or rows are added, so read them from this object rather than keeping them.
    """

    def __init__(self, capacity: int) -> None:
        self._names: list[str] = list(FIXED_RESOURCES)
        self._column: dict[str, int] = {n: i for i, n in enumerate(FIXED_RESOURCES)}
        self.allocatable = np.zeros((capacity, len(FIXED_RESOURCES)), dtype=np.int64, order="F")
        self.requested = np.zeros((capacity, len(FIXED_RESOURCES)), dtype=np.int64, order="F")
        self.nonzero_requested = np.zeros((capacity, 2), dtype=np.int64, order="F")

    @property
    def names(self) -> Sequence[str]:
        """Resource name per column of ``allocatable``/``requested``."""
        return tuple(self._names)

    def column(self, name: str) -> int | None:
        """The column of a resource; None when no node or pod has mentioned it."""
        return self._column.get(name)

    def allocatable_of(self, column: int, nodes: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """Allocatable amounts of one resource column on ``nodes`` (a new array)."""
        return self.allocatable[:, column].take(nodes)

    def requested_of(self, column: int, nodes: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """What placed pods request of one resource column on ``nodes`` (a new array)."""
        return self.requested[:, column].take(nodes)

    def nonzero_requested_of(self, column: int, nodes: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """Like :meth:`requested_of` with kube's non-zero defaults; cpu (0) and memory (1) only."""
        return self.nonzero_requested[:, column].take(nodes)

    def ensure(self, name: str) -> int:
        """The column of a resource, adding a zero column for it if it is new."""
        column = self._column.get(name)
        if column is None:
            column = len(self._names)
            self._names.append(name)
            self._column[name] = column
            zeros = np.zeros((self.allocatable.shape[0], 1), dtype=np.int64)
            self.allocatable = np.asfortranarray(np.hstack([self.allocatable, zeros]))
            self.requested = np.asfortranarray(np.hstack([self.requested, zeros]))
        return column

    def request_columns(self, requests: Mapping[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The columns a pod's non-zero ``requests`` occupy (new resources get a column), by
        resource name, then ``pods`` with 1 whatever the pod says; and the amounts per column."""
        columns: list[int] = []
        amounts: list[int] = []
        for resource, amount in sorted(requests.items()):
            if amount and resource != "pods":
                columns.append(self.ensure(resource))
                amounts.append(amount)
        columns.append(PODS)
        amounts.append(1)
        return tuple(columns), tuple(amounts)

    def grow(self, capacity: int) -> None:
        """Make every array ``capacity`` rows long (new rows zero)."""
        self.allocatable = grow_rows(self.allocatable, capacity, 0)
        self.requested = grow_rows(self.requested, capacity, 0)
        self.nonzero_requested = grow_rows(self.nonzero_requested, capacity, 0)

    def set_allocatable(self, slot: int, allocatable: Mapping[str, int]) -> None:
        """What the node in ``slot`` offers (resources it does not list: 0)."""
        self.allocatable[slot] = 0
        for resource, amount in allocatable.items():
            column = self.ensure(resource)  # may widen the arrays: look up first
            self.allocatable[slot, column] = amount

    def clear(self, slot: int) -> None:
        """The node in ``slot`` left: it offers and holds nothing."""
        self.allocatable[slot] = 0
        self.requested[slot] = 0
        self.nonzero_requested[slot] = 0

    def account(self, slot: int, placed: PlacedPod, sign: int) -> None:
        """Add (``sign`` +1) or take back (-1) what ``placed`` requests on ``slot``."""
        row = self.requested[slot]
        for column, amount in zip(placed.request_columns, placed.request_amounts, strict=True):
            row[column] += sign * amount
        nonzero = self.nonzero_requested[slot]
        nonzero[0] += sign * placed.nonzero_cpu
        nonzero[1] += sign * placed.nonzero_memory
