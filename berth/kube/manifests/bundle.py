"""Whole manifest files: every object converted, in dependency order, into a
:class:`ManifestBundle`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from berth.schemas.cluster import NodeInfo
from berth.schemas.policy import (
    LimitRangeInfo,
    NamespaceInfo,
    PodDisruptionBudgetInfo,
    PodGroupInfo,
    PriorityClassInfo,
    ResourceQuotaInfo,
)

from .common import ManifestError
from .nodes import node_from_manifest
from .pods import PodManifest, pod_from_manifest
from .policies import (
    AgentPoolManifest,
    ToolBindingManifest,
    agent_pool_from_manifest,
    limit_range_from_manifest,
    namespace_from_manifest,
    pdb_from_manifest,
    pod_group_from_manifest,
    priority_class_from_manifest,
    resource_quota_from_manifest,
    tool_binding_from_manifest,
)


@dataclass(frozen=True)
class ManifestBundle:
    """Every object of a manifest file, converted, in input order within each kind."""

    namespaces: tuple[NamespaceInfo, ...] = ()
    nodes: tuple[NodeInfo, ...] = ()
    pods: tuple[PodManifest, ...] = ()
    priority_classes: tuple[PriorityClassInfo, ...] = ()
    pod_groups: tuple[PodGroupInfo, ...] = ()
    resource_quotas: tuple[ResourceQuotaInfo, ...] = ()
    limit_ranges: tuple[LimitRangeInfo, ...] = ()
    pod_disruption_budgets: tuple[PodDisruptionBudgetInfo, ...] = ()
    agent_pools: tuple[AgentPoolManifest, ...] = ()
    tool_bindings: tuple[ToolBindingManifest, ...] = ()
    warnings: tuple[str, ...] = ()


_API_VERSIONS = {
    "Namespace": {"v1"},
    "Node": {"v1"},
    "Pod": {"v1"},
    "ResourceQuota": {"v1"},
    "LimitRange": {"v1"},
    "PriorityClass": {"scheduling.k8s.io/v1"},
    "PodGroup": {"scheduling.x-k8s.io/v1alpha1", "scheduling.sigs.k8s.io/v1alpha1"},
    "PodDisruptionBudget": {"policy/v1"},
    "AgentPool": {"berth.io/v1alpha1"},
    "ToolBinding": {"berth.io/v1alpha1"},
}

#: Documents (or ``List`` items) with the 1-based number of the document they came from.
_Numbered = list[tuple[int, Mapping[str, Any]]]


def _flatten(documents: Iterable[Any]) -> _Numbered:
    """Number documents from 1 and expand ``v1 List`` objects (``kind: List``/``*List``)."""
    out: _Numbered = []
    for number, doc in enumerate(documents, start=1):
        if doc is None:
            continue  # an empty YAML document, e.g. a trailing '---'
        if not isinstance(doc, Mapping):
            raise ManifestError(f"document {number}", "", f"must be an object, got {type(doc).__name__}")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
            items = doc.get("items")
            if not isinstance(items, list):
                raise ManifestError(f"document {number}", "items", "must be a list")
            for i, item in enumerate(items):
                if not isinstance(item, Mapping):
                    raise ManifestError(f"document {number}", f"items[{i}]", "must be an object")
                out.append((number, item))
        else:
            out.append((number, doc))
    return out


def _check_kind(number: int, doc: Mapping[str, Any]) -> str:
    """The document's kind, after checking it is one Berth reads, under an API version it knows."""
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ManifestError(f"document {number}", "kind", "is required")
    if kind not in _API_VERSIONS:
        raise ManifestError(
            f"document {number}", "kind", f"{kind!r} is not supported (one of {', '.join(sorted(_API_VERSIONS))})"
        )
    api_version = doc.get("apiVersion")
    if api_version not in _API_VERSIONS[kind]:
        raise ManifestError(
            f"{kind} (document {number})",
            "apiVersion",
            f"{api_version!r} must be {' or '.join(sorted(_API_VERSIONS[kind]))}",
        )
    return kind


def _group_by_kind(flat: _Numbered) -> dict[str, _Numbered]:
    """The documents by kind, input order kept; an object named twice is an error."""
    seen: set[tuple[str, str, str]] = set()
    by_kind: dict[str, _Numbered] = {}
    for number, doc in flat:
        kind = _check_kind(number, doc)
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
        namespaced = kind not in ("Namespace", "Node", "PriorityClass")
        key = (kind, (meta.get("namespace") or "default") if namespaced else "", str(meta.get("name")))
        if key in seen:
            ref = f"{kind} {key[1]}/{key[2]}" if namespaced else f"{kind} {key[2]}"
            raise ManifestError(ref, "metadata.name", f"is defined twice (again in document {number})")
        seen.add(key)
        by_kind.setdefault(kind, []).append((number, doc))
    return by_kind


def _check_one_global_default(priority_classes: list[PriorityClassInfo]) -> None:
    defaults = [c.name for c in priority_classes if c.global_default]
    if len(defaults) > 1:
        raise ManifestError(
            f"PriorityClass {defaults[1]}",
            "globalDefault",
            f"only one PriorityClass may be the global default (also {defaults[0]})",
        )


def _pods(
    documents: _Numbered, priority_classes: list[PriorityClassInfo], limit_ranges: list[LimitRangeInfo]
) -> list[PodManifest]:
    """Convert the pods, each admitted against the PriorityClasses and its namespace's
    LimitRanges (applied in name order)."""
    classes = {c.name: c for c in priority_classes}
    ranges_by_ns: dict[str, list[LimitRangeInfo]] = {}
    for limit_range in sorted(limit_ranges, key=lambda r: r.name):
        ranges_by_ns.setdefault(limit_range.namespace, []).append(limit_range)
    return [
        pod_from_manifest(
            doc,
            priority_classes=classes,
            limit_ranges=ranges_by_ns.get((doc.get("metadata") or {}).get("namespace") or "default", ()),
            index=number,
        )
        for number, doc in documents
    ]


def load_documents(documents: Iterable[Any]) -> ManifestBundle:
    """Convert a file's objects (YAML documents, or the items of a ``v1 List``).

    Order of work: Namespaces, PriorityClasses and LimitRanges first (pods depend on them), then
    everything else; within a kind the input order is kept (it is the scheduling queue's tie
    breaker). Raises the first :class:`ManifestError`; an object named twice is an error too.
    """
    warnings: list[str] = []
    by_kind = _group_by_kind(_flatten(documents))

    def each(kind: str, convert: Callable[..., Any], **extra: Any) -> list[Any]:
        return [convert(doc, index=number, **extra) for number, doc in by_kind.get(kind, [])]

    namespaces = each("Namespace", namespace_from_manifest)
    priority_classes = each("PriorityClass", priority_class_from_manifest)
    _check_one_global_default(priority_classes)
    limit_ranges = each("LimitRange", limit_range_from_manifest, warnings=warnings)
    pods = _pods(by_kind.get("Pod", []), priority_classes, limit_ranges)
    agent_pools = each("AgentPool", agent_pool_from_manifest)
    return ManifestBundle(
        namespaces=tuple(namespaces),
        nodes=tuple(each("Node", node_from_manifest, warnings=warnings)),
        pods=tuple(pods),
        priority_classes=tuple(priority_classes),
        pod_groups=tuple(each("PodGroup", pod_group_from_manifest)),
        resource_quotas=tuple(each("ResourceQuota", resource_quota_from_manifest, warnings=warnings)),
        limit_ranges=tuple(limit_ranges),
        pod_disruption_budgets=tuple(each("PodDisruptionBudget", pdb_from_manifest)),
        agent_pools=tuple(agent_pools),
        tool_bindings=tuple(each("ToolBinding", tool_binding_from_manifest)),
        warnings=tuple(warnings),
    )
