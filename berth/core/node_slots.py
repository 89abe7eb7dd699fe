"""Which node is in which slot of a :class:`~berth.core.state.ClusterState`, and the live slots in
node-name order.

A slot is assigned when a node is first seen (the lowest free one) and freed when it is removed;
the scheduler never depends on slot numbers, only on names, so every plugin iterates
:meth:`NodeSlots.order`. Owned by the state, which calls the mutations (``claim``, ``put``,
``release``, ``grow``); plugins read it through ``state.nodes``.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from berth.schemas.cluster import NodeInfo

__all__ = ["NodeSlots"]


class NodeSlots:
    """The node in each slot, the slot of each node name, and the names in ascending order.

    Node names are kept sorted incrementally (a bisect and one list insert/delete per node added
    or removed: O(nodes), no re-sort); the array of :meth:`order` is rebuilt lazily after the node
    set changed.
    """

    def __init__(self, capacity: int) -> None:
        self._slot_by_name: dict[str, int] = {}
        self._nodes: list[NodeInfo | None] = [None] * capacity
        self._free: list[int] = list(range(capacity))  # a heap: lowest slot first
        self._names_sorted: list[str] = []
        self._order_list: list[int] = []
        self._order: npt.NDArray[np.intp] | None = np.empty(0, dtype=np.intp)
        self._order_identity = True
        self.slot_bound = 0
        """One past the highest slot that ever held a node: rows from here on are untouched
        (every slot-indexed array of the state still holds its initial value there)."""

    def __len__(self) -> int:
        return len(self._slot_by_name)

    def order(self) -> npt.NDArray[np.intp]:
        """Live node slots in ascending node-name order. Read-only: callers must not modify it."""
        if self._order is None:
            order = np.array(self._order_list, dtype=np.intp)
            order.flags.writeable = False
            self._order = order
            self._order_identity = bool((order == np.arange(order.size)).all())
        return self._order

    def order_is_identity(self) -> bool:
        """Whether :meth:`order` is ``0..len-1`` (nodes were added in name order and none left):
        arrays over every node in name order are then the leading slot rows."""
        self.order()
        return self._order_identity

    def names(self) -> Sequence[str]:
        """All node names, sorted (a read-only view; do not modify)."""
        return self._names_sorted

    def slot_of(self, name: str) -> int | None:
        return self._slot_by_name.get(name)

    def get(self, name_or_slot: str | int) -> NodeInfo | None:
        """The node of that name, or in that slot; None if there is none."""
        if isinstance(name_or_slot, str):
            slot = self._slot_by_name.get(name_or_slot)
            return None if slot is None else self._nodes[slot]
        return self._nodes[name_or_slot]

    def name_of(self, slot: int) -> str:
        """The name of the node in ``slot``; KeyError if the slot is free."""
        node = self._nodes[slot]
        if node is None:
            raise KeyError(f"slot {slot} holds no node")
        return node.name

    def names_of(self, slots: Iterable[int]) -> list[str]:
        """Names of the nodes in ``slots``, which must all hold nodes."""
        nodes = self._nodes
        return [nodes[s].name for s in slots]  # type: ignore[union-attr]  # the slots given hold nodes

    @property
    def full(self) -> bool:
        """Whether every slot holds a node (:meth:`grow` before the next :meth:`claim`)."""
        return not self._free

    def claim(self, name: str) -> int:
        """Give a new node name the lowest free slot (there must be one: see :attr:`full`)."""
        slot = heapq.heappop(self._free)
        if slot >= self.slot_bound:
            self.slot_bound = slot + 1
        self._slot_by_name[name] = slot
        at = bisect.bisect_left(self._names_sorted, name)
        self._names_sorted.insert(at, name)
        self._order_list.insert(at, slot)
        self._order = None
        return slot

    def put(self, slot: int, node: NodeInfo) -> None:
        """What is known of the node in a claimed ``slot``."""
        self._nodes[slot] = node

    def release(self, name: str) -> int | None:
        """Free the slot of a node name; returns it (None: the name held none)."""
        slot = self._slot_by_name.pop(name, None)
        if slot is None:
            return None
        self._nodes[slot] = None
        heapq.heappush(self._free, slot)
        at = bisect.bisect_left(self._names_sorted, name)
        del self._names_sorted[at]
        del self._order_list[at]
        self._order = None
        return slot

    def grow(self, capacity: int) -> None:
        """Add free slots up to ``capacity``."""
        old = len(self._nodes)
        self._nodes.extend([None] * (capacity - old))
        for slot in range(old, capacity):
            heapq.heappush(self._free, slot)
