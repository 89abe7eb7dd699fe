"""Placed pods of a :class:`~berth.core.state.ClusterState` and their indexes.

A placed pod holds capacity on a node: bound (observed) or *assumed* by the scheduler until the
binding is observed. :class:`PlacedPodIndex` finds them by UID, node, namespace and
(namespace, label key, value), and keeps separate sets of pods that carry inter-pod
(anti-)affinity terms, so that a pod without such constraints pays nothing for them. The index
is owned by the state, which calls :meth:`PlacedPodIndex.add` and :meth:`PlacedPodIndex.remove`
as it accounts the pods' requests; plugins read it through ``state.pods``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from berth.core.hashing import canonical_json, object_digest_of_bytes
from berth.core.labels import CompiledSelector
from berth.schemas.cluster import PodInfo

__all__ = ["PlacedPod", "PlacedPodIndex", "has_affinity_terms", "has_required_anti_affinity", "placement_digest"]


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """A pod holding capacity on a node: bound (observed) or assumed (decided, not yet bound).

    ``request_columns``/``request_amounts``: its canonical requests per resource column of the
    state, including one ``pods``; ``nonzero_cpu``/``nonzero_memory``: requests with kube's
    non-zero defaults; ``digest``: its term of the snapshot hash (:func:`placement_digest`).
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


def placement_digest(pod_json: bytes, node: str, gpu_devices: tuple[int, ...], gpu_milli: int | None) -> int:
    """``object_digest("pod", {...})`` of a placement, reusing the pod's canonical JSON: the
    bytes are exactly the canonical JSON of ``{"gpu_devices", "gpu_milli", "node", "pod"}``."""
    head = canonical_json({"gpu_devices": list(gpu_devices), "gpu_milli": gpu_milli, "node": node})
    return object_digest_of_bytes("pod", head[:-1] + b',"pod":' + pod_json + b"}")


class PlacedPodIndex:
    """Every placed pod by UID, with indexes by node name, namespace and label, the pods with
    affinity terms, and counts per priority. Queries return pods sorted by UID."""

    def __init__(self) -> None:
        self._pods: dict[str, PlacedPod] = {}
        self._by_node: dict[str, set[str]] = {}
        self._by_namespace: dict[str, set[str]] = {}
        self._by_label: dict[tuple[str, str], dict[str, set[str]]] = {}
        self._with_affinity: set[str] = set()
        self._with_required_anti_affinity: set[str] = set()
        self._priority_counts: dict[int, int] = {}
        """Placed pods per priority: lets preemption see at once that nothing is below a pod."""

    def add(self, placed: PlacedPod) -> None:
        """Index a placement; its UID must not be indexed already."""
        uid, pod = placed.uid, placed.pod
        self._pods[uid] = placed
        self._priority_counts[pod.priority] = self._priority_counts.get(pod.priority, 0) + 1
        self._by_node.setdefault(placed.node_name, set()).add(uid)
        self._by_namespace.setdefault(pod.namespace, set()).add(uid)
        for key, value in pod.labels.items():
            self._by_label.setdefault((pod.namespace, key), {}).setdefault(value, set()).add(uid)
        if has_affinity_terms(pod):
            self._with_affinity.add(uid)
        if has_required_anti_affinity(pod):
            self._with_required_anti_affinity.add(uid)

    def remove(self, placed: PlacedPod) -> None:
        """Unindex a placement that :meth:`add` indexed."""
        uid, pod = placed.uid, placed.pod
        del self._pods[uid]
        left = self._priority_counts[pod.priority] - 1
        if left:
            self._priority_counts[pod.priority] = left
        else:
            del self._priority_counts[pod.priority]
        _discard(self._by_node, placed.node_name, uid)
        _discard(self._by_namespace, pod.namespace, uid)
        for key, value in pod.labels.items():
            values = self._by_label.get((pod.namespace, key))
            if values is not None:
                _discard(values, value, uid)
                if not values:
                    del self._by_label[(pod.namespace, key)]
        self._with_affinity.discard(uid)
        self._with_required_anti_affinity.discard(uid)

    def __len__(self) -> int:
        return len(self._pods)

    def get(self, uid: str) -> PlacedPod | None:
        return self._pods.get(uid)

    def __iter__(self) -> Iterator[PlacedPod]:
        """Every placed pod, by UID."""
        for uid in sorted(self._pods):
            yield self._pods[uid]

    def on_node(self, node: str) -> list[PlacedPod]:
        """Pods placed on a node (by name), sorted by UID."""
        return [self._pods[uid] for uid in sorted(self._by_node.get(node, ()))]

    def namespace_names(self) -> set[str]:
        """Namespaces that hold placed pods (a new set)."""
        return set(self._by_namespace)

    def has_below(self, priority: int) -> bool:
        """Whether any placed pod has a priority lower than ``priority`` (O(distinct
        priorities)): preemption has no possible victim otherwise."""
        return any(p < priority for p in self._priority_counts)

    @property
    def any_with_affinity(self) -> bool:
        """Whether any placed pod has a pod affinity or anti-affinity term."""
        return bool(self._with_affinity)

    @property
    def any_with_required_anti_affinity(self) -> bool:
        """Whether any placed pod has a required pod anti-affinity term."""
        return bool(self._with_required_anti_affinity)

    def matching(self, namespaces: Iterable[str] | None, selector: CompiledSelector) -> list[PlacedPod]:
        """Placed pods in ``namespaces`` (None: every namespace) whose labels match
        ``selector``, sorted by UID. Uses the label index, so the cost is about the number of
        pods carrying the selector's most selective label, not the number of pods."""
        if selector.nothing:
            return []
        spaces = sorted(self._by_namespace) if namespaces is None else sorted(set(namespaces))
        hint = selector.index_hint()
        found: list[str] = []
        pods = self._pods
        for namespace in spaces:
            if hint is None:
                candidates: Iterable[str] = self._by_namespace.get(namespace, ())
            else:
                key, values = hint
                by_value = self._by_label.get((namespace, key))
                if not by_value:
                    continue
                if values is None:
                    candidates = [uid for uids in by_value.values() for uid in uids]
                else:
                    candidates = [uid for v in values for uid in by_value.get(v, ())]
            found.extend(uid for uid in candidates if selector.matches(pods[uid].pod.labels))
        found.sort()
        return [pods[uid] for uid in found]


def _discard(index: dict[str, set[str]], key: str, uid: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(uid)
        if not members:
            del index[key]
