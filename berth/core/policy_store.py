"""Namespaces and policy objects of a :class:`~berth.core.state.ClusterState`.

Owned by the state: it calls the mutations and folds the digest change each returns into the
snapshot hash, so that namespaces and policies are part of the hash. Read through
``state.policies``; every other method is a pure query.
"""

from __future__ import annotations

from collections.abc import Mapping

from berth.core.hashing import DIGEST_MODULUS, object_digest
from berth.schemas._base import FrozenModel

__all__ = ["PolicyStore"]

PolicyKey = tuple[str, str, str]
"""``(kind, namespace, name)``."""


class PolicyStore:
    """Namespace labels (for ``namespaceSelector`` in pod affinity terms) and policy objects
    (PodGroup, PriorityClass, ResourceQuota, ...) kept in the snapshot so that they count in
    its hash.

    The mutations return how the snapshot digest changes: the digest of what was added minus
    the digest of what was removed, modulo ``DIGEST_MODULUS`` (0 when nothing changed).
    """

    def __init__(self) -> None:
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._namespace_digest: dict[str, int] = {}
        self._policies: dict[PolicyKey, FrozenModel] = {}
        self._policy_digest: dict[PolicyKey, int] = {}

    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> int:
        """Set a namespace's labels; returns the digest change."""
        labels = dict(labels)
        if self._namespaces.get(name) == labels:
            return 0
        removed = self.remove_namespace(name)
        self._namespaces[name] = labels
        digest = object_digest("namespace", {"name": name, "labels": labels})
        self._namespace_digest[name] = digest
        return (digest + removed) % DIGEST_MODULUS

    def remove_namespace(self, name: str) -> int:
        """Forget a namespace (unknown names are ignored); returns the digest change."""
        if name not in self._namespaces:
            return 0
        del self._namespaces[name]
        return -self._namespace_digest.pop(name) % DIGEST_MODULUS

    def namespace_labels(self, name: str) -> Mapping[str, str]:
        """Labels of a namespace; a namespace never observed has none."""
        return self._namespaces.get(name, {})

    def namespace_names(self) -> set[str]:
        """Names of the namespaces observed (a new set)."""
        return set(self._namespaces)

    def upsert_policy(self, kind: str, namespace: str, name: str, obj: FrozenModel) -> int:
        """Keep a policy object; returns the digest change."""
        key = (kind, namespace, name)
        if self._policies.get(key) == obj:
            return 0
        removed = self.remove_policy(kind, namespace, name)
        self._policies[key] = obj
        digest = object_digest("policy", {"kind": kind, "namespace": namespace, "name": name, "object": obj})
        self._policy_digest[key] = digest
        return (digest + removed) % DIGEST_MODULUS

    def remove_policy(self, kind: str, namespace: str, name: str) -> int:
        """Forget a policy object (unknown ones are ignored); returns the digest change."""
        key = (kind, namespace, name)
        if key not in self._policies:
            return 0
        del self._policies[key]
        return -self._policy_digest.pop(key) % DIGEST_MODULUS

    def get(self, kind: str, namespace: str, name: str) -> FrozenModel | None:
        return self._policies.get((kind, namespace, name))

    def of_kind(self, kind: str) -> list[tuple[str, str, FrozenModel]]:
        """``(namespace, name, object)`` of every policy of ``kind``, sorted."""
        return [
            (ns, name, obj)
            for (k, ns, name), obj in sorted(self._policies.items(), key=lambda item: item[0])
            if k == kind
        ]
