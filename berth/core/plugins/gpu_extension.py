"""The per-device GPU state of a ClusterState and how plugins reach it.

:class:`GpuDeviceExtension` is the state extension GpuDeviceFit attaches; :func:`gpu_inventory`
gives its :class:`~berth.core.plugins.gpu_inventory.GpuInventory` to any plugin that reads GPU
devices (GpuDeviceFit and the GPU score terms in :mod:`berth.core.plugins.gpu_devices`,
GpuFragmentation in :mod:`berth.core.plugins.gpu_fragmentation`). In a module of its own so that
those plugin modules depend on it rather than on one another.
"""

from __future__ import annotations

from berth.core.placed_pods import PlacedPod
from berth.core.plugins.gpu_inventory import GpuInventory
from berth.core.plugins.gpu_requests import GpuAllocation
from berth.core.state import ClusterState, StateExtension
from berth.schemas.cluster import NodeInfo

__all__ = ["GpuDeviceExtension", "gpu_inventory"]


class GpuDeviceExtension(StateExtension):
    """Per-device GPU state of a ClusterState (a :class:`GpuInventory` over node slots).

    Remembers what every placed pod holds (by UID) so that ``pod_removed`` gives back exactly
    what ``pod_added`` took, and re-applies holdings when a node is replaced in place.
    """

    KEY = "GpuDeviceFit"

    def __init__(self) -> None:
        self.inventory = GpuInventory()
        self.held: dict[str, tuple[int, GpuAllocation]] = {}
        self._by_slot: dict[int, dict[str, GpuAllocation]] = {}
        self._auto: dict[str, tuple[int, GpuAllocation]] = {}
        """Devices this extension chose for bound pods that did not name theirs, kept after the
        pod is removed so that removing and re-adding it (preemption's what-if) restores exactly
        the same devices rather than whatever would be chosen now; forgotten when the pod is
        deleted for good (:meth:`pod_deleted`), so it holds only pods the state may still see."""

    def grow(self, capacity: int) -> None:
        self.inventory.grow(capacity)

    def node_upserted(self, slot: int, node: NodeInfo, previous: NodeInfo | None) -> None:
        self.inventory.set_node(slot, node)
        kept = self._by_slot.get(slot, {})
        for uid, allocation in list(kept.items()):
            # Devices the new description no longer has are dropped from the claim.
            known = set(int(d) for d in self.inventory.devices.dev_index[slot] if d >= 0)
            trimmed = GpuAllocation(
                devices=tuple(d for d in allocation.devices if d in known),
                milli=allocation.milli,
                memory_mib=allocation.memory_mib,
                mig=tuple(m for m in allocation.mig if m[0] in known),
            )
            kept[uid] = trimmed
            self.held[uid] = (slot, trimmed)
            self.inventory.allocate(slot, trimmed)

    def node_removed(self, slot: int, node: NodeInfo) -> None:
        self.inventory.clear_node(slot)
        for uid in self._by_slot.pop(slot, {}):
            self.held.pop(uid, None)

    def pod_added(self, slot: int | None, placed: PlacedPod) -> None:
        if slot is None:
            return
        # Any pod changes the node's free CPU, which fragmentation scores read too.
        self.inventory.row_caches.touch(slot)
        pod = placed.pod
        # An assumed pod carries its devices in the placement; a bound one in its PodInfo.
        devices = placed.gpu_devices or pod.gpu_devices
        remembered = self._auto.get(pod.uid)
        if not devices and remembered is not None and remembered[0] == slot:
            allocation = remembered[1]
        else:
            allocation = self.inventory.allocation_of_bound(slot, pod, devices)
            if not devices:
                self._auto[pod.uid] = (slot, allocation)
        if not (allocation.devices or allocation.mig):
            return
        self.inventory.allocate(slot, allocation)
        self.held[pod.uid] = (slot, allocation)
        self._by_slot.setdefault(slot, {})[pod.uid] = allocation

    def pod_removed(self, slot: int | None, placed: PlacedPod) -> None:
        if slot is not None:
            self.inventory.row_caches.touch(slot)
        entry = self.held.pop(placed.pod.uid, None)
        if entry is None:
            return
        held_slot, allocation = entry
        self._by_slot.get(held_slot, {}).pop(placed.pod.uid, None)
        self.inventory.release(held_slot, allocation)

    def pod_deleted(self, uid: str) -> None:
        self._auto.pop(uid, None)


def gpu_inventory(state: ClusterState) -> GpuInventory:
    """The GPU inventory attached to ``state`` (by :class:`GpuDeviceFit`'s extension)."""
    extension = state.extension(GpuDeviceExtension.KEY)
    if extension is None:
        extension = state.ensure_extension(GpuDeviceExtension)
    return extension.inventory  # type: ignore[attr-defined, no-any-return]  # the GPU extension's inventory, untyped to avoid an import cycle
