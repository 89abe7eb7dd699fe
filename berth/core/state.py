"""ClusterState: the incremental, array-backed snapshot the scheduling core reads.

Nodes live in *slots* (rows of numpy arrays). A slot is assigned when a node is first seen and
freed when it is removed; the scheduler never depends on slot numbers, only on node names —
``state.nodes.order()`` gives the live slots in ascending name order and every plugin iterates
that. The state is one object made of parts, each indexed by slot where it is per node:

- ``state.nodes`` (:class:`~berth.core.node_slots.NodeSlots`): the node in each slot and the name
  order; here, per slot: ``alive``, ``unschedulable`` (cordon), a 64-bit ``name_hash`` for
  tie-breaking and ``node_version`` stamps;
- ``state.resources`` (:class:`~berth.core.resource_columns.ResourceColumns`): allocatable and
  requested amounts per resource column;
- ``state.labels`` (:class:`~berth.core.node_labels.LabelIndex`): per label key an int32 code per
  slot, so label selectors are array comparisons; ``state.taints``
  (:class:`~berth.core.node_labels.TaintIndex`): the taint table;
- ``state.pods`` (:class:`~berth.core.placed_pods.PlacedPodIndex`): placed pods (bound, or
  *assumed* by the scheduler until the binding is observed) and their indexes;
- ``state.policies`` (:class:`~berth.core.policy_store.PolicyStore`): namespaces and policy objects;
- :class:`StateExtension` objects: plugin-owned per-node state (e.g. GPU devices).

Plugins read the parts directly; every mutation goes through the state, which keeps the parts,
the node versions, the extensions and the **snapshot hash** consistent. The hash is the sum
modulo 2**256 of a digest per object (node, placed pod, namespace, policy), so that equal contents
give equal hashes whatever the order of mutations, and reading it is O(1). Every mutation is
O(resources + labels) (adding a new resource or label key is O(capacity)).

Mutations are the only methods that change the state; every other method is a pure query. The
state is not thread-safe: one decision cell owns one state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from berth.core.hashing import DIGEST_MODULUS, canonical_json, digest_hex, name_hash64, object_digest
from berth.core.node_labels import LabelIndex, TaintIndex, grow_rows
from berth.core.node_slots import NodeSlots
from berth.core.placed_pods import PlacedPod, PlacedPodIndex, placement_digest
from berth.core.policy_store import PolicyStore
from berth.core.resource_columns import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, ResourceColumns
from berth.schemas._base import FrozenModel
from berth.schemas.cluster import NodeInfo, PodInfo

__all__ = ["ClusterState", "StateExtension"]

_INITIAL_CAPACITY = 64


class StateExtension:
    """Plugin-owned per-node state kept inside a ClusterState (e.g. GPU device arrays).

    The state calls the hooks on every mutation, after updating its own arrays. Arrays indexed by
    node slot must have at least ``capacity`` rows (see :meth:`grow`). Hooks must be exact
    inverses where that makes sense (``pod_added``/``pod_removed``), so that removing and re-adding
    pods during preemption restores the extension exactly. Extensions are derived state: they do
    not contribute to the snapshot hash.
    """

    KEY: ClassVar[str]
    """Unique key, by convention the owning plugin's NAME."""

    def grow(self, capacity: int) -> None:
        """Make slot-indexed arrays at least ``capacity`` rows long (new rows empty)."""

    def node_upserted(self, slot: int, node: NodeInfo, previous: NodeInfo | None) -> None:
        """A node was added (``previous`` None) or replaced in ``slot``."""

    def node_removed(self, slot: int, node: NodeInfo) -> None:
        """A node left ``slot``; the slot may be reused later. Pods placed on it stay known to
        the state (reported again through ``pod_added`` if the node comes back)."""

    def pod_added(self, slot: int | None, placed: PlacedPod) -> None:
        """A pod now holds capacity on node slot ``slot`` (None: its node is not known yet)."""

    def pod_removed(self, slot: int | None, placed: PlacedPod) -> None:
        """A pod released what it held."""

    def pod_deleted(self, uid: str) -> None:
        """The pod is gone for good (:meth:`ClusterState.delete_pod`): it will not be re-added,
        so nothing kept to restore it needs keeping."""


class ClusterState:
    """The cluster as the scheduler sees it; see the module docstring for the layout.

    Mutations: :meth:`upsert_node`, :meth:`remove_node`, :meth:`upsert_namespace`,
    :meth:`remove_namespace`, :meth:`upsert_bound_pod`, :meth:`assume`, :meth:`forget`,
    :meth:`remove_pod`, :meth:`delete_pod`, :meth:`observe_pod`, :meth:`upsert_policy`,
    :meth:`remove_policy`, :meth:`attach`. All are idempotent: applying the same call twice
    leaves the same state. The parts (``nodes``, ``resources``, ``labels``, ``taints``, ``pods``,
    ``policies``) are for reading; only the state mutates them.
    """

    def __init__(self, extensions: Iterable[StateExtension] = ()) -> None:
        self._capacity = _INITIAL_CAPACITY
        self._init_nodes()
        self.resources = ResourceColumns(self._capacity)
        self.labels = LabelIndex(self._capacity)
        self.taints = TaintIndex(self._capacity)
        self.pods = PlacedPodIndex()
        self.policies = PolicyStore()
        self._pod_json_cache: dict[str, tuple[PodInfo, bytes]] = {}
        self._digest = 0
        self._extensions: dict[str, StateExtension] = {}
        for extension in extensions:
            self.attach(extension)

    def _init_nodes(self) -> None:
        """The empty node table: slots, name order, per-slot flags and versions."""
        self.nodes = NodeSlots(self._capacity)
        self._node_digest: dict[str, int] = {}
        self.alive = np.zeros(self._capacity, dtype=bool)
        self.unschedulable = np.zeros(self._capacity, dtype=bool)
        self.unschedulable_nodes = 0
        self.name_hash = np.zeros(self._capacity, dtype=np.uint64)
        self.node_version = np.zeros(self._capacity, dtype=np.int64)
        """Per slot, a stamp that changes whenever anything about the node or what is placed on
        it changes (strictly increasing over the state's life, never reused). Lets derived data
        (e.g. the framework's score memo) recompute only the nodes that changed."""
        self._version_clock = 0

    # ------------------------------------------------------------------ snapshot hash

    def snapshot_hash(self) -> str:
        """64 hex digits; equal contents ⇒ equal hash, whatever the order of mutations. O(1)."""
        return digest_hex(self._digest)

    def _add_digest(self, digest: int) -> None:
        self._digest = (self._digest + digest) % DIGEST_MODULUS

    # ------------------------------------------------------------------ capacity

    @property
    def capacity(self) -> int:
        """Rows of every slot-indexed array (≥ number of nodes)."""
        return self._capacity

    def _grow(self) -> None:
        new = self._capacity * 2
        self.alive = grow_rows(self.alive, new, False)
        self.unschedulable = grow_rows(self.unschedulable, new, False)
        self.name_hash = grow_rows(self.name_hash, new, 0)
        self.node_version = grow_rows(self.node_version, new, 0)
        self.resources.grow(new)
        self.labels.grow(new)
        self.taints.grow(new)
        self.nodes.grow(new)
        self._capacity = new
        for extension in self._extensions.values():
            extension.grow(new)

    # ------------------------------------------------------------------ queries across parts

    def namespaces(self) -> Sequence[str]:
        """Namespaces known from namespace objects or placed pods, sorted."""
        return sorted(self.policies.namespace_names() | self.pods.namespace_names())

    # ------------------------------------------------------------------ node mutations

    def upsert_node(self, node: NodeInfo) -> None:
        """Add a node or replace what is known about it (labels, taints, cordon, allocatable,
        GPUs). Pods already placed on a node of that name (e.g. observed before the node) are
        accounted to it."""
        slot = self.nodes.slot_of(node.name)
        previous = None if slot is None else self.nodes.get(slot)
        if previous is not None and previous == node:
            return
        if slot is None:
            if self.nodes.full:
                self._grow()
            slot = self.nodes.claim(node.name)
            self.alive[slot] = True
            self.name_hash[slot] = name_hash64(node.name)
        else:
            self._add_digest(-self._node_digest[node.name])
            self._unindex_node(slot, previous)  # type: ignore[arg-type]  # an occupied slot's previous node
        self.nodes.put(slot, node)
        digest = object_digest("node", node)
        self._node_digest[node.name] = digest
        self._add_digest(digest)
        self.resources.set_allocatable(slot, node.allocatable)
        self.labels.index(slot, node.labels)
        if node.unschedulable:
            self.unschedulable[slot] = True
            self.unschedulable_nodes += 1
        self.taints.index(slot, node.taints)
        self._touch(slot)
        for extension in self._extensions.values():
            extension.node_upserted(slot, node, previous)
        if previous is None:
            for placed in self.pods.on_node(node.name):
                self._account(slot, placed, +1)
                for extension in self._extensions.values():
                    extension.pod_added(slot, placed)

    def remove_node(self, name: str) -> None:
        """Forget a node. Pods placed on it stay known (they hold nothing until it returns);
        unknown names are ignored."""
        node = self.nodes.get(name)
        if node is None:
            return
        slot = self.nodes.release(name)
        assert slot is not None
        self._add_digest(-self._node_digest.pop(name))
        self._unindex_node(slot, node)
        self.alive[slot] = False
        self.name_hash[slot] = 0
        self.resources.clear(slot)
        self._touch(slot)
        for extension in self._extensions.values():
            extension.node_removed(slot, node)

    def _unindex_node(self, slot: int, node: NodeInfo) -> None:
        self.labels.unindex(slot, node.labels)
        if node.unschedulable:
            self.unschedulable[slot] = False
            self.unschedulable_nodes -= 1
        self.taints.unindex(slot, node.taints)

    def _touch(self, slot: int) -> None:
        self._version_clock += 1
        self.node_version[slot] = self._version_clock

    def _account(self, slot: int, placed: PlacedPod, sign: int) -> None:
        self._touch(slot)
        self.resources.account(slot, placed, sign)

    # ------------------------------------------------------------------ namespaces, policies

    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """Namespace labels, for ``namespaceSelector`` in pod affinity terms."""
        self._add_digest(self.policies.upsert_namespace(name, labels))

    def remove_namespace(self, name: str) -> None:
        self._add_digest(self.policies.remove_namespace(name))

    def upsert_policy(self, kind: str, namespace: str, name: str, obj: FrozenModel) -> None:
        """Keep a policy object (PodGroup, PriorityClass, ResourceQuota, ...) in the snapshot so
        that it is part of the snapshot hash; the core's own plugins do not read policies."""
        self._add_digest(self.policies.upsert_policy(kind, namespace, name, obj))

    def remove_policy(self, kind: str, namespace: str, name: str) -> None:
        self._add_digest(self.policies.remove_policy(kind, namespace, name))

    # ------------------------------------------------------------------ pod mutations

    def upsert_bound_pod(self, pod: PodInfo) -> None:
        """A pod observed bound to ``pod.node_name`` (devices ``pod.gpu_devices``). Replaces
        an assumed or earlier placement of the same UID."""
        if not pod.node_name:
            raise ValueError(f"pod {pod.key} is not bound (node_name is empty); use assume()")
        self._place(pod, pod.node_name, pod.gpu_devices, None, assumed=False)

    def assume(self, pod: PodInfo, node: str, gpu_devices: Sequence[int] = (), gpu_milli: int | None = None) -> None:
        """Record the scheduler's own decision: the pod holds capacity on ``node`` until the
        binding is observed (:meth:`upsert_bound_pod`) or the assumption is dropped
        (:meth:`forget`). Replaces an earlier placement of the same UID."""
        self._place(pod, node, tuple(sorted(gpu_devices)), gpu_milli, assumed=True)

    def forget(self, uid: str) -> bool:
        """Drop an assumed placement (binding failed). Bound pods are left alone; returns
        whether something was dropped."""
        placed = self.pods.get(uid)
        if placed is None or not placed.assumed:
            return False
        self._release(placed)
        return True

    def remove_pod(self, uid: str) -> None:
        """Release whatever the pod holds, bound or assumed. Unknown UIDs are ignored."""
        placed = self.pods.get(uid)
        if placed is not None:
            self._release(placed)

    def delete_pod(self, uid: str) -> None:
        """The pod is gone for good: release what it holds (as :meth:`remove_pod`) and let the
        extensions forget what they keep to restore it after a what-if removal."""
        self.remove_pod(uid)
        for extension in self._extensions.values():
            extension.pod_deleted(uid)

    def observe_pod(self, pod: PodInfo) -> None:
        """Fold a pod-observed event: bound and not finished → holds capacity; finished
        (Succeeded/Failed) → releases it, as kube-scheduler's cache drops terminal pods;
        pending → no change (an assumption of ours stays until bound or forgotten)."""
        if pod.phase in ("Succeeded", "Failed"):
            self.remove_pod(pod.uid)
        elif pod.node_name:
            self.upsert_bound_pod(pod)

    def _place(
        self, pod: PodInfo, node: str, gpu_devices: tuple[int, ...], gpu_milli: int | None, *, assumed: bool
    ) -> None:
        existing = self.pods.get(pod.uid)
        if existing is not None:
            if (
                existing.pod == pod
                and existing.node_name == node
                and existing.assumed == assumed
                and existing.gpu_devices == gpu_devices
                and existing.gpu_milli == gpu_milli
            ):
                return
            self._release(existing)
        columns, amounts = self.resources.request_columns(pod.requests)
        placed = PlacedPod(
            pod=pod,
            node_name=node,
            gpu_devices=gpu_devices,
            gpu_milli=gpu_milli,
            assumed=assumed,
            request_columns=columns,
            request_amounts=amounts,
            nonzero_cpu=pod.requests.get("cpu") or DEFAULT_MILLI_CPU_REQUEST,
            nonzero_memory=pod.requests.get("memory") or DEFAULT_MEMORY_REQUEST,
            digest=placement_digest(self.pod_json(pod), node, gpu_devices, gpu_milli),
        )
        self.pods.add(placed)
        self._add_digest(placed.digest)
        slot = self.nodes.slot_of(node)
        if slot is not None:
            self._account(slot, placed, +1)
        for extension in self._extensions.values():
            extension.pod_added(slot, placed)

    def _release(self, placed: PlacedPod) -> None:
        self.pods.remove(placed)
        self._add_digest(-placed.digest)
        slot = self.nodes.slot_of(placed.node_name)
        if slot is not None:
            self._account(slot, placed, -1)
        for extension in self._extensions.values():
            extension.pod_removed(slot, placed)

    def pod_json(self, pod: PodInfo) -> bytes:
        """Canonical JSON of a pod, remembered for the last few pod objects (by identity) so
        that scheduling a pod and then assuming it serialises it once. Pure cache."""
        cached = self._pod_json_cache.get(pod.uid)
        if cached is not None and cached[0] is pod:
            return cached[1]
        data = canonical_json(pod)
        self._pod_json_cache[pod.uid] = (pod, data)
        if len(self._pod_json_cache) > 16:
            del self._pod_json_cache[next(iter(self._pod_json_cache))]
        return data

    # ------------------------------------------------------------------ extensions

    def attach(self, extension: StateExtension) -> None:
        """Attach a plugin-owned extension and replay the current nodes and pods into it
        (nodes in name order, then pods by UID). Attaching a second extension with the same
        KEY is an error; see :meth:`ensure_extension` for get-or-attach."""
        if extension.KEY in self._extensions:
            raise ValueError(f"state extension {extension.KEY!r} is already attached")
        extension.grow(self._capacity)
        for name in self.nodes.names():
            slot = self.nodes.slot_of(name)
            extension.node_upserted(slot, self.nodes.get(name), None)  # type: ignore[arg-type]  # names() hold nodes
        for placed in self.pods:
            extension.pod_added(self.nodes.slot_of(placed.node_name), placed)
        self._extensions[extension.KEY] = extension

    def __getstate__(self) -> dict[str, Any]:
        """What a pickled state keeps: everything but its extensions, which are derived (plugin
        caches and indexes rebuilt by replaying the nodes and pods when attached again)."""
        kept = dict(self.__dict__)
        kept["_extensions"] = {}
        return kept

    def ensure_extension(self, factory: type[StateExtension]) -> StateExtension:
        """The attached extension with ``factory.KEY``, attaching ``factory()`` if missing."""
        existing = self._extensions.get(factory.KEY)
        if existing is None:
            existing = factory()
            self.attach(existing)
        return existing

    def extension(self, key: str) -> StateExtension | None:
        return self._extensions.get(key)
