"""ClusterState: the incremental, array-backed snapshot the scheduling core reads.

Nodes live in *slots* (rows of numpy arrays). A slot is assigned when a node is first seen and
freed when it is removed; the scheduler never depends on slot numbers, only on node names —
:meth:`ClusterState.order` gives the live slots in ascending name order and every plugin iterates
that. Per slot the state keeps:

- ``allocatable`` / ``requested``: int64 ``[capacity, resources]`` in canonical units (columns 0..3
  are cpu, memory, ephemeral-storage, pods; extended resources get columns as they appear);
  ``nonzero_requested``: cpu and memory with kube's defaults for pods that request none (used by
  scoring, as kube's ``NonZeroRequested``);
- a label index: per label key, an int32 code per slot (0 = key absent), with the value ↔ code
  tables, so label selectors are array comparisons;
- a taint table: per slot the ids of its taints in the node's own order (-1 padded);
- ``unschedulable`` (cordon), and a 64-bit name hash for tie-breaking.

Placed pods (bound, or *assumed* by the scheduler until the binding is observed) are indexed by
namespace and by (namespace, label key, value), with separate sets of pods that carry inter-pod
(anti-)affinity terms, so that a pod without such constraints pays nothing for them.

Every mutation is O(resources + labels) (adding a new resource or label key is O(capacity)), and
updates the **snapshot hash**: the sum modulo 2**256 of a digest per object (node, placed pod,
namespace, policy), so that equal contents give equal hashes whatever the order of mutations, and
reading it is O(1).

Mutations are the only methods that change the state; every other method is a pure query. The
state is not thread-safe: one decision cell owns one state.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from berth.core.hashing import (
    DIGEST_MODULUS,
    canonical_json,
    digest_hex,
    name_hash64,
    object_digest,
    object_digest_of_bytes,
)
from berth.core.labels import CompiledSelector
from berth.schemas._base import FrozenModel
from berth.schemas.cluster import NodeInfo, PodInfo, Taint

__all__ = [
    "CPU",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "EPHEMERAL_STORAGE",
    "FIXED_RESOURCES",
    "MEMORY",
    "PODS",
    "ClusterState",
    "PlacedPod",
    "StateExtension",
]

FIXED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
CPU, MEMORY, EPHEMERAL_STORAGE, PODS = range(4)

DEFAULT_MILLI_CPU_REQUEST = 100
"""kube's ``DefaultMilliCPURequest``: what scoring assumes for a pod that requests no cpu."""
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""kube's ``DefaultMemoryRequest`` (200 MiB), likewise for memory."""

_INITIAL_CAPACITY = 64


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """A pod holding capacity on a node: bound (observed) or assumed (decided, not yet bound).

    ``request_columns``/``request_amounts``: its canonical requests per resource column of the
    state, including one ``pods``; ``nonzero_cpu``/``nonzero_memory``: requests with kube's
    non-zero defaults.
    """

    pod: PodInfo
    node_name: str
    gpu_devices: tuple[int, ...]
    gpu_milli: int | None
    assumed: bool
    request_columns: tuple[int, ...]
    request_amounts: tuple[int, ...]
    nonzero_cpu: int
    nonzero_memory: int
    digest: int

    @property
    def uid(self) -> str:
        return self.pod.uid

    @property
    def namespace(self) -> str:
        return self.pod.namespace

    @property
    def labels(self) -> Mapping[str, str]:
        return self.pod.labels


def has_affinity_terms(pod: PodInfo) -> bool:
    """kube's ``PodsWithAffinity``: the pod has any pod affinity or anti-affinity term."""
    affinity = pod.affinity
    if affinity is None:
        return False
    for group in (affinity.pod_affinity, affinity.pod_anti_affinity):
        if group is not None and (group.required or group.preferred):
            return True
    return False


def has_required_anti_affinity(pod: PodInfo) -> bool:
    """kube's ``PodsWithRequiredAntiAffinity``."""
    affinity = pod.affinity
    return bool(affinity and affinity.pod_anti_affinity and affinity.pod_anti_affinity.required)


def _is_hard_taint(taint: Taint) -> bool:
    return taint.effect in ("NoSchedule", "NoExecute")


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
    :meth:`remove_pod`, :meth:`observe_pod`, :meth:`upsert_policy`, :meth:`remove_policy`,
    :meth:`attach`. All are idempotent: applying the same call twice leaves the same state.
    """

    def __init__(self, extensions: Iterable[StateExtension] = ()) -> None:
        self._capacity = _INITIAL_CAPACITY
        self._init_nodes()
        self._init_resources()
        self._init_labels_and_taints()
        self._init_pods()
        # --- namespaces and policies
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._namespace_digest: dict[str, int] = {}
        self._policies: dict[tuple[str, str, str], FrozenModel] = {}
        self._policy_digest: dict[tuple[str, str, str], int] = {}
        # --- snapshot hash and extensions
        self._digest = 0
        self._extensions: dict[str, StateExtension] = {}
        for extension in extensions:
            self.attach(extension)

    def _init_nodes(self) -> None:
        """The empty node table: slots, name order, per-slot flags and versions."""
        self._slot_by_name: dict[str, int] = {}
        self._nodes: list[NodeInfo | None] = [None] * self._capacity
        self._free_slots: list[int] = list(range(self._capacity))  # a heap: lowest slot first
        # Node names in ascending order and their slots, kept sorted incrementally (a bisect
        # and one array insert/delete per node added or removed: O(nodes), no re-sort).
        self._names_sorted: list[str] = []
        self._order_list: list[int] = []
        self._order: npt.NDArray[np.intp] | None = np.empty(0, dtype=np.intp)
        self._order_identity = True
        self._node_digest: dict[str, int] = {}
        self.alive = np.zeros(self._capacity, dtype=bool)
        self.unschedulable = np.zeros(self._capacity, dtype=bool)
        self.name_hash = np.zeros(self._capacity, dtype=np.uint64)
        self.node_version = np.zeros(self._capacity, dtype=np.int64)
        """Per slot, a stamp that changes whenever anything about the node or what is placed on
        it changes (strictly increasing over the state's life, never reused). Lets derived data
        (e.g. the framework's score memo) recompute only the nodes that changed."""
        self._version_clock = 0
        self.slot_bound = 0
        """One past the highest slot that ever held a node: rows from here on are untouched
        (every slot-indexed array still holds its initial value there)."""

    def _init_resources(self) -> None:
        """The fixed resource columns and the empty allocatable/requested arrays."""
        self._resource_names: list[str] = list(FIXED_RESOURCES)
        self._resource_column: dict[str, int] = {n: i for i, n in enumerate(FIXED_RESOURCES)}
        # Column-major: plugins read one resource over many nodes (``column(...)``), which is
        # a contiguous gather in Fortran order and a strided one in C order.
        self.allocatable = np.zeros((self._capacity, len(FIXED_RESOURCES)), dtype=np.int64, order="F")
        self.requested = np.zeros((self._capacity, len(FIXED_RESOURCES)), dtype=np.int64, order="F")
        self.nonzero_requested = np.zeros((self._capacity, 2), dtype=np.int64, order="F")

    def _init_labels_and_taints(self) -> None:
        """The empty label index and taint table."""
        self._label_codes: dict[str, npt.NDArray[np.int32]] = {}
        self._label_value_code: dict[str, dict[str, int]] = {}
        self._label_values: dict[str, list[str]] = {}
        self._label_ints: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]] = {}
        self._absent_codes = np.zeros(self._capacity, dtype=np.int32)
        self._absent_codes.flags.writeable = False
        self._taint_id: dict[tuple[str, str, str], int] = {}
        self._taints: list[Taint] = []
        self.taint_table = np.full((self._capacity, 0), -1, dtype=np.int32)
        self.hard_taint_nodes = 0
        """How many live nodes have a NoSchedule/NoExecute taint (0: TaintToleration's Filter
        has nothing to do)."""
        self.soft_taint_nodes = 0
        """How many live nodes have a PreferNoSchedule taint."""
        self.unschedulable_nodes = 0

    def _init_pods(self) -> None:
        """The empty indexes of placed pods."""
        self._pods: dict[str, PlacedPod] = {}
        self._pods_by_node: dict[str, set[str]] = {}
        self._pods_by_namespace: dict[str, set[str]] = {}
        self._pods_by_label: dict[tuple[str, str], dict[str, set[str]]] = {}
        self._pods_with_affinity: set[str] = set()
        self._pods_with_required_anti_affinity: set[str] = set()
        self._pod_json_cache: dict[str, tuple[PodInfo, bytes]] = {}
        self._priority_counts: dict[int, int] = {}
        """Placed pods per priority: lets preemption see at once that nothing is below a pod."""

    # ------------------------------------------------------------------ snapshot hash

    def snapshot_hash(self) -> str:
        """64 hex digits; equal contents ⇒ equal hash, whatever the order of mutations. O(1)."""
        return digest_hex(self._digest)

    def _add_digest(self, digest: int) -> None:
        self._digest = (self._digest + digest) % DIGEST_MODULUS

    def _sub_digest(self, digest: int) -> None:
        self._digest = (self._digest - digest) % DIGEST_MODULUS

    # ------------------------------------------------------------------ capacity

    @property
    def capacity(self) -> int:
        """Rows of every slot-indexed array (≥ number of nodes)."""
        return self._capacity

    def _grow(self) -> None:
        old, new = self._capacity, self._capacity * 2

        def grow_rows(array: npt.NDArray[Any], fill: Any) -> npt.NDArray[Any]:
            order: Literal["F", "C"] = "F" if array.flags.f_contiguous and array.ndim > 1 else "C"
            grown: npt.NDArray[Any] = np.full((new, *array.shape[1:]), fill, dtype=array.dtype, order=order)
            grown[:old] = array
            return grown

        self.alive = grow_rows(self.alive, False)
        self.unschedulable = grow_rows(self.unschedulable, False)
        self.name_hash = grow_rows(self.name_hash, 0)
        self.node_version = grow_rows(self.node_version, 0)
        self.allocatable = grow_rows(self.allocatable, 0)
        self.requested = grow_rows(self.requested, 0)
        self.nonzero_requested = grow_rows(self.nonzero_requested, 0)
        self.taint_table = grow_rows(self.taint_table, -1)
        for key, codes in self._label_codes.items():
            self._label_codes[key] = grow_rows(codes, 0)
        self._absent_codes = np.zeros(new, dtype=np.int32)
        self._absent_codes.flags.writeable = False
        self._nodes.extend([None] * (new - old))
        for slot in range(old, new):
            heapq.heappush(self._free_slots, slot)
        self._capacity = new
        for extension in self._extensions.values():
            extension.grow(new)

    # ------------------------------------------------------------------ resources

    @property
    def resource_names(self) -> Sequence[str]:
        """Resource name per column of ``allocatable``/``requested``."""
        return tuple(self._resource_names)

    def resource_column(self, name: str) -> int | None:
        return self._resource_column.get(name)

    def allocatable_of(self, column: int, nodes: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """Allocatable amounts of one resource column on ``nodes`` (a new array)."""
        return self.allocatable[:, column].take(nodes)

    def requested_of(self, column: int, nodes: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """What placed pods request of one resource column on ``nodes`` (a new array)."""
        return self.requested[:, column].take(nodes)

    def nonzero_requested_of(self, column: int, nodes: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
        """Like :meth:`requested_of` with kube's non-zero defaults; cpu (0) and memory (1) only."""
        return self.nonzero_requested[:, column].take(nodes)

    def _ensure_resource(self, name: str) -> int:
        column = self._resource_column.get(name)
        if column is None:
            column = len(self._resource_names)
            self._resource_names.append(name)
            self._resource_column[name] = column
            zeros = np.zeros((self._capacity, 1), dtype=np.int64)
            self.allocatable = np.asfortranarray(np.hstack([self.allocatable, zeros]))
            self.requested = np.asfortranarray(np.hstack([self.requested, zeros]))
        return column

    # ------------------------------------------------------------------ node queries

    def __len__(self) -> int:
        return len(self._slot_by_name)

    @property
    def node_count(self) -> int:
        return len(self._slot_by_name)

    def order(self) -> npt.NDArray[np.intp]:
        """Live node slots in ascending node-name order (rebuilt from the sorted list after the
        node set changed). Read-only: callers must not modify it."""
        if self._order is None:
            order = np.array(self._order_list, dtype=np.intp)
            order.flags.writeable = False
            self._order = order
            self._order_identity = bool((order == np.arange(order.size)).all())
        return self._order

    def order_is_identity(self) -> bool:
        """Whether :meth:`order` is ``0..node_count-1`` (nodes were added in name order and
        none left): arrays over every node in name order are then the leading slot rows."""
        self.order()
        return self._order_identity

    def node_names(self) -> Sequence[str]:
        """All node names, sorted (a read-only view; do not modify)."""
        return self._names_sorted

    def slot_of(self, name: str) -> int | None:
        return self._slot_by_name.get(name)

    def node(self, name_or_slot: str | int) -> NodeInfo | None:
        if isinstance(name_or_slot, str):
            slot = self._slot_by_name.get(name_or_slot)
            return None if slot is None else self._nodes[slot]
        return self._nodes[name_or_slot]

    def name_of(self, slot: int) -> str:
        node = self._nodes[slot]
        if node is None:
            raise KeyError(f"slot {slot} holds no node")
        return node.name

    def names_of(self, slots: Iterable[int]) -> list[str]:
        nodes = self._nodes
        return [nodes[s].name for s in slots]  # type: ignore[union-attr]  # the slots given hold nodes

    # ------------------------------------------------------------------ label index queries

    def label_codes(self, key: str) -> npt.NDArray[np.int32]:
        """Per slot, the code of the node's value for ``key`` (0: the node lacks the key).
        Read-only view; codes are only compared for equality."""
        return self._label_codes.get(key, self._absent_codes)

    def label_value_code(self, key: str, value: str) -> int:
        """The code of ``value`` under ``key``; -1 (never a node's code) when no node has it."""
        return self._label_value_code.get(key, {}).get(value, -1)

    def label_value_codes(self, key: str, values: Iterable[str]) -> npt.NDArray[np.int32]:
        table = self._label_value_code.get(key, {})
        return np.array(sorted({table[v] for v in values if v in table}), dtype=np.int32)

    def label_value(self, key: str, code: int) -> str | None:
        """Inverse of the code table (None for code 0)."""
        return None if code <= 0 else self._label_values[key][code - 1]

    def label_domain_count(self, key: str) -> int:
        """Number of codes in use so far for ``key`` (an upper bound of distinct values + 1)."""
        return len(self._label_values.get(key, ())) + 1

    def label_int_values(self, key: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """For ``Gt``/``Lt``: per code, the value parsed as int64 and whether it parsed."""
        values = self._label_values.get(key, [])
        cached = self._label_ints.get(key)
        if cached is not None and cached[0].shape[0] == len(values) + 1:
            return cached
        numbers = np.zeros(len(values) + 1, dtype=np.int64)
        valid = np.zeros(len(values) + 1, dtype=bool)
        for code, text in enumerate(values, start=1):
            parsed = _parse_int64(text)
            if parsed is not None:
                numbers[code], valid[code] = parsed, True
        self._label_ints[key] = (numbers, valid)
        return numbers, valid

    def _label_code_for(self, key: str, value: str) -> int:
        table = self._label_value_code.get(key)
        if table is None:
            table = self._label_value_code[key] = {}
            self._label_values[key] = []
            self._label_codes[key] = np.zeros(self._capacity, dtype=np.int32)
        code = table.get(value)
        if code is None:
            self._label_values[key].append(value)
            code = table[value] = len(self._label_values[key])
        return code

    # ------------------------------------------------------------------ taint queries

    @property
    def taints(self) -> Sequence[Taint]:
        """Distinct taints seen so far; ``taint_table`` holds indices into this list."""
        return tuple(self._taints)

    # ------------------------------------------------------------------ node mutations

    def upsert_node(self, node: NodeInfo) -> None:
        """Add a node or replace what is known about it (labels, taints, cordon, allocatable,
        GPUs). Pods already placed on a node of that name (e.g. observed before the node) are
        accounted to it."""
        slot = self._slot_by_name.get(node.name)
        previous = None if slot is None else self._nodes[slot]
        if previous is not None and previous == node:
            return
        if slot is None:
            if not self._free_slots:
                self._grow()
            slot = heapq.heappop(self._free_slots)
            if slot >= self.slot_bound:
                self.slot_bound = slot + 1
            self._slot_by_name[node.name] = slot
            at = bisect.bisect_left(self._names_sorted, node.name)
            self._names_sorted.insert(at, node.name)
            self._order_list.insert(at, slot)
            self._order = None
            self.alive[slot] = True
            self.name_hash[slot] = name_hash64(node.name)
        else:
            self._sub_digest(self._node_digest[node.name])
            self._unindex_node(slot, previous)  # type: ignore[arg-type]  # an occupied slot's previous node
        self._nodes[slot] = node
        digest = object_digest("node", node)
        self._node_digest[node.name] = digest
        self._add_digest(digest)
        self._index_node(slot, node)
        self._touch(slot)
        for extension in self._extensions.values():
            extension.node_upserted(slot, node, previous)
        if previous is None:
            for uid in sorted(self._pods_by_node.get(node.name, ())):
                placed = self._pods[uid]
                self._account(slot, placed, +1)
                for extension in self._extensions.values():
                    extension.pod_added(slot, placed)

    def remove_node(self, name: str) -> None:
        """Forget a node. Pods placed on it stay known (they hold nothing until it returns);
        unknown names are ignored."""
        slot = self._slot_by_name.pop(name, None)
        if slot is None:
            return
        node = self._nodes[slot]
        assert node is not None
        self._sub_digest(self._node_digest.pop(name))
        self._unindex_node(slot, node)
        self._nodes[slot] = None
        self.alive[slot] = False
        self.name_hash[slot] = 0
        self.requested[slot] = 0
        self.nonzero_requested[slot] = 0
        heapq.heappush(self._free_slots, slot)
        at = bisect.bisect_left(self._names_sorted, name)
        del self._names_sorted[at]
        del self._order_list[at]
        self._order = None
        self._touch(slot)
        for extension in self._extensions.values():
            extension.node_removed(slot, node)

    def _index_node(self, slot: int, node: NodeInfo) -> None:
        self.allocatable[slot] = 0
        for resource, amount in node.allocatable.items():
            column = self._ensure_resource(resource)  # may widen the arrays: look up first
            self.allocatable[slot, column] = amount
        for key, value in node.labels.items():
            code = self._label_code_for(key, value)
            self._label_codes[key][slot] = code
        if node.unschedulable:
            self.unschedulable[slot] = True
            self.unschedulable_nodes += 1
        ids = [self._taint_id_for(t) for t in node.taints]
        if len(ids) > self.taint_table.shape[1]:
            extra = np.full((self._capacity, len(ids) - self.taint_table.shape[1]), -1, dtype=np.int32)
            self.taint_table = np.hstack([self.taint_table, extra])
        self.taint_table[slot] = -1
        self.taint_table[slot, : len(ids)] = ids
        if any(_is_hard_taint(t) for t in node.taints):
            self.hard_taint_nodes += 1
        if any(t.effect == "PreferNoSchedule" for t in node.taints):
            self.soft_taint_nodes += 1

    def _unindex_node(self, slot: int, node: NodeInfo) -> None:
        self.allocatable[slot] = 0
        for key in node.labels:
            self._label_codes[key][slot] = 0
        if node.unschedulable:
            self.unschedulable[slot] = False
            self.unschedulable_nodes -= 1
        self.taint_table[slot] = -1
        if any(_is_hard_taint(t) for t in node.taints):
            self.hard_taint_nodes -= 1
        if any(t.effect == "PreferNoSchedule" for t in node.taints):
            self.soft_taint_nodes -= 1

    def _taint_id_for(self, taint: Taint) -> int:
        key = (taint.key, taint.value, taint.effect)
        taint_id = self._taint_id.get(key)
        if taint_id is None:
            taint_id = self._taint_id[key] = len(self._taints)
            self._taints.append(taint)
        return taint_id

    # ------------------------------------------------------------------ namespaces, policies

    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """Namespace labels, for ``namespaceSelector`` in pod affinity terms."""
        labels = dict(labels)
        if self._namespaces.get(name) == labels:
            return
        self.remove_namespace(name)
        self._namespaces[name] = labels
        digest = object_digest("namespace", {"name": name, "labels": labels})
        self._namespace_digest[name] = digest
        self._add_digest(digest)

    def remove_namespace(self, name: str) -> None:
        if name in self._namespaces:
            del self._namespaces[name]
            self._sub_digest(self._namespace_digest.pop(name))

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        """Labels of a namespace; a namespace never observed has none."""
        return self._namespaces.get(name, {})

    def namespaces(self) -> Sequence[str]:
        """Namespaces known from namespace objects or placed pods, sorted."""
        return sorted(set(self._namespaces) | set(self._pods_by_namespace))

    def upsert_policy(self, kind: str, namespace: str, name: str, obj: FrozenModel) -> None:
        """Keep a policy object (PodGroup, PriorityClass, ResourceQuota, ...) in the snapshot so
        that it is part of the snapshot hash; the core's own plugins do not read policies."""
        key = (kind, namespace, name)
        if self._policies.get(key) == obj:
            return
        self.remove_policy(kind, namespace, name)
        self._policies[key] = obj
        digest = object_digest("policy", {"kind": kind, "namespace": namespace, "name": name, "object": obj})
        self._policy_digest[key] = digest
        self._add_digest(digest)

    def remove_policy(self, kind: str, namespace: str, name: str) -> None:
        key = (kind, namespace, name)
        if key in self._policies:
            del self._policies[key]
            self._sub_digest(self._policy_digest.pop(key))

    def policy(self, kind: str, namespace: str, name: str) -> FrozenModel | None:
        return self._policies.get((kind, namespace, name))

    def policies(self, kind: str) -> list[tuple[str, str, FrozenModel]]:
        """``(namespace, name, object)`` of every policy of ``kind``, sorted."""
        return [
            (ns, name, obj)
            for (k, ns, name), obj in sorted(self._policies.items(), key=lambda item: item[0])
            if k == kind
        ]

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
        placed = self._pods.get(uid)
        if placed is None or not placed.assumed:
            return False
        self._release(placed)
        return True

    def remove_pod(self, uid: str) -> None:
        """Release whatever the pod holds, bound or assumed. Unknown UIDs are ignored."""
        placed = self._pods.get(uid)
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
        existing = self._pods.get(pod.uid)
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
        columns: list[int] = []
        amounts: list[int] = []
        for resource, amount in sorted(pod.requests.items()):
            if amount and resource != "pods":
                columns.append(self._ensure_resource(resource))
                amounts.append(amount)
        columns.append(PODS)
        amounts.append(1)
        digest = _pod_digest(self.pod_json(pod), node, gpu_devices, gpu_milli)
        placed = PlacedPod(
            pod=pod,
            node_name=node,
            gpu_devices=gpu_devices,
            gpu_milli=gpu_milli,
            assumed=assumed,
            request_columns=tuple(columns),
            request_amounts=tuple(amounts),
            nonzero_cpu=pod.requests.get("cpu") or DEFAULT_MILLI_CPU_REQUEST,
            nonzero_memory=pod.requests.get("memory") or DEFAULT_MEMORY_REQUEST,
            digest=digest,
        )
        uid = pod.uid
        self._pods[uid] = placed
        self._priority_counts[pod.priority] = self._priority_counts.get(pod.priority, 0) + 1
        self._pods_by_node.setdefault(node, set()).add(uid)
        self._pods_by_namespace.setdefault(pod.namespace, set()).add(uid)
        for key, value in pod.labels.items():
            self._pods_by_label.setdefault((pod.namespace, key), {}).setdefault(value, set()).add(uid)
        if has_affinity_terms(pod):
            self._pods_with_affinity.add(uid)
        if has_required_anti_affinity(pod):
            self._pods_with_required_anti_affinity.add(uid)
        self._add_digest(digest)
        slot = self._slot_by_name.get(node)
        if slot is not None:
            self._account(slot, placed, +1)
        for extension in self._extensions.values():
            extension.pod_added(slot, placed)

    def _release(self, placed: PlacedPod) -> None:
        uid, pod = placed.uid, placed.pod
        del self._pods[uid]
        left = self._priority_counts[pod.priority] - 1
        if left:
            self._priority_counts[pod.priority] = left
        else:
            del self._priority_counts[pod.priority]
        _discard(self._pods_by_node, placed.node_name, uid)
        _discard(self._pods_by_namespace, pod.namespace, uid)
        for key, value in pod.labels.items():
            values = self._pods_by_label.get((pod.namespace, key))
            if values is not None:
                _discard(values, value, uid)
                if not values:
                    del self._pods_by_label[(pod.namespace, key)]
        self._pods_with_affinity.discard(uid)
        self._pods_with_required_anti_affinity.discard(uid)
        self._sub_digest(placed.digest)
        slot = self._slot_by_name.get(placed.node_name)
        if slot is not None:
            self._account(slot, placed, -1)
        for extension in self._extensions.values():
            extension.pod_removed(slot, placed)

    def _touch(self, slot: int) -> None:
        self._version_clock += 1
        self.node_version[slot] = self._version_clock

    def _account(self, slot: int, placed: PlacedPod, sign: int) -> None:
        self._touch(slot)
        row = self.requested[slot]
        for column, amount in zip(placed.request_columns, placed.request_amounts, strict=True):
            row[column] += sign * amount
        nonzero = self.nonzero_requested[slot]
        nonzero[0] += sign * placed.nonzero_cpu
        nonzero[1] += sign * placed.nonzero_memory

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

    # ------------------------------------------------------------------ pod queries

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    def has_pods_below(self, priority: int) -> bool:
        """Whether any placed pod has a priority lower than ``priority`` (O(distinct
        priorities)): preemption has no possible victim otherwise."""
        return any(p < priority for p in self._priority_counts)

    def placed_pod(self, uid: str) -> PlacedPod | None:
        return self._pods.get(uid)

    def placed_pods(self) -> Iterator[PlacedPod]:
        """Every placed pod, by UID."""
        for uid in sorted(self._pods):
            yield self._pods[uid]

    def pods_on(self, node: str) -> list[PlacedPod]:
        """Pods placed on a node (by name), sorted by UID."""
        return [self._pods[uid] for uid in sorted(self._pods_by_node.get(node, ()))]

    def pod_slot(self, placed: PlacedPod) -> int | None:
        """The slot of the node a placed pod is on (None while that node is unknown)."""
        return self._slot_by_name.get(placed.node_name)

    @property
    def has_pods_with_affinity(self) -> bool:
        """Whether any placed pod has a pod affinity or anti-affinity term."""
        return bool(self._pods_with_affinity)

    @property
    def has_pods_with_required_anti_affinity(self) -> bool:
        """Whether any placed pod has a required pod anti-affinity term."""
        return bool(self._pods_with_required_anti_affinity)

    def pods_matching(self, namespaces: Iterable[str] | None, selector: CompiledSelector) -> list[PlacedPod]:
        """Placed pods in ``namespaces`` (None: every namespace) whose labels match
        ``selector``, sorted by UID. Uses the label index, so the cost is about the number of
        pods carrying the selector's most selective label, not the number of pods."""
        if selector.nothing:
            return []
        spaces = sorted(self._pods_by_namespace) if namespaces is None else sorted(set(namespaces))
        hint = selector.index_hint()
        found: list[str] = []
        for namespace in spaces:
            if hint is None:
                candidates: Iterable[str] = self._pods_by_namespace.get(namespace, ())
            else:
                key, values = hint
                by_value = self._pods_by_label.get((namespace, key))
                if not by_value:
                    continue
                if values is None:
                    candidates = [uid for uids in by_value.values() for uid in uids]
                else:
                    candidates = [uid for v in values for uid in by_value.get(v, ())]
            pods = self._pods
            found.extend(uid for uid in candidates if selector.matches(pods[uid].pod.labels))
        found.sort()
        return [self._pods[uid] for uid in found]

    # ------------------------------------------------------------------ extensions

    def attach(self, extension: StateExtension) -> None:
        """Attach a plugin-owned extension and replay the current nodes and pods into it
        (nodes in name order, then pods by UID). Attaching a second extension with the same
        KEY is an error; see :meth:`ensure_extension` for get-or-attach."""
        if extension.KEY in self._extensions:
            raise ValueError(f"state extension {extension.KEY!r} is already attached")
        extension.grow(self._capacity)
        for name in self.node_names():
            slot = self._slot_by_name[name]
            extension.node_upserted(slot, self._nodes[slot], None)  # type: ignore[arg-type]  # the slot was just filled
        for uid in sorted(self._pods):
            placed = self._pods[uid]
            extension.pod_added(self._slot_by_name.get(placed.node_name), placed)
        self._extensions[extension.KEY] = extension

    def __getstate__(self) -> dict[str, Any]:
        """What a pickled state keeps: everything but its extensions, which are derived (plugin
        caches and indexes rebuilt by replaying the nodes and pods when attached again)."""
        kept = dict(self.__dict__)
        kept["_extensions"] = {}
        return kept

    def __setstate__(self, kept: dict[str, Any]) -> None:
        self.__dict__.update(kept)

    def ensure_extension(self, factory: type[StateExtension]) -> StateExtension:
        """The attached extension with ``factory.KEY``, attaching ``factory()`` if missing."""
        existing = self._extensions.get(factory.KEY)
        if existing is None:
            existing = factory()
            self.attach(existing)
        return existing

    def extension(self, key: str) -> StateExtension | None:
        return self._extensions.get(key)


def _pod_digest(pod_json: bytes, node: str, gpu_devices: tuple[int, ...], gpu_milli: int | None) -> int:
    """``object_digest("pod", {...})`` of a placement, reusing the pod's canonical JSON: the
    bytes are exactly the canonical JSON of ``{"gpu_devices", "gpu_milli", "node", "pod"}``."""
    head = canonical_json({"gpu_devices": list(gpu_devices), "gpu_milli": gpu_milli, "node": node})
    return object_digest_of_bytes("pod", head[:-1] + b',"pod":' + pod_json + b"}")


def _discard(index: dict[str, set[str]], key: str, uid: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(uid)
        if not members:
            del index[key]


def _parse_int64(text: str) -> int | None:
    # Go's strconv.ParseInt(s, 10, 64): optional sign, decimal digits, no spaces or underscores.
    body = text[1:] if text[:1] in "+-" else text
    if not body.isdigit() or not body.isascii():
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None
