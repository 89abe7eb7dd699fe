"""Pod scheduling constraints shared by several kinds: label selectors, node and pod
(anti-)affinity, tolerations and topology spread constraints."""

from __future__ import annotations

from typing import Any

from berth.schemas.cluster import (
    Affinity,
    LabelSelector,
    LabelSelectorRequirement,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinity,
    PodAffinityTerm,
    PreferredSchedulingTerm,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)

from .common import FieldReader


def read_label_selector(reader: FieldReader, raw: Any, path: str) -> LabelSelector | None:
    if raw is None:
        return None
    body = reader.mapping(raw, path)
    expressions = []
    for i, expr in enumerate(reader.sequence(body.get("matchExpressions"), f"{path}.matchExpressions")):
        where = f"{path}.matchExpressions[{i}]"
        expr = reader.mapping(expr, where)
        expressions.append(
            reader.build(
                where,
                LabelSelectorRequirement,
                key=expr.get("key"),
                operator=expr.get("operator"),
                values=reader.strings(expr.get("values"), f"{where}.values"),
            )
        )
    return reader.build(
        path,
        LabelSelector,
        match_labels=reader.string_map(body.get("matchLabels"), f"{path}.matchLabels"),
        match_expressions=tuple(expressions),
    )


def _node_selector_term(reader: FieldReader, raw: Any, path: str) -> NodeSelectorTerm:
    body = reader.mapping(raw, path)
    parts: dict[str, tuple[NodeSelectorRequirement, ...]] = {}
    for key, attr in (("matchExpressions", "match_expressions"), ("matchFields", "match_fields")):
        items = []
        for i, expr in enumerate(reader.sequence(body.get(key), f"{path}.{key}")):
            where = f"{path}.{key}[{i}]"
            expr = reader.mapping(expr, where)
            items.append(
                reader.build(
                    where,
                    NodeSelectorRequirement,
                    key=expr.get("key"),
                    operator=expr.get("operator"),
                    values=reader.strings(expr.get("values"), f"{where}.values"),
                )
            )
        parts[attr] = tuple(items)
    return NodeSelectorTerm(**parts)


def _pod_affinity_term(reader: FieldReader, raw: Any, path: str) -> PodAffinityTerm:
    body = reader.mapping(raw, path)
    return reader.build(
        path,
        PodAffinityTerm,
        label_selector=read_label_selector(reader, body.get("labelSelector"), f"{path}.labelSelector"),
        namespaces=reader.strings(body.get("namespaces"), f"{path}.namespaces"),
        namespace_selector=read_label_selector(reader, body.get("namespaceSelector"), f"{path}.namespaceSelector"),
        topology_key=body.get("topologyKey"),
        match_label_keys=reader.strings(body.get("matchLabelKeys"), f"{path}.matchLabelKeys"),
        mismatch_label_keys=reader.strings(body.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys"),
    )


def _pod_affinity(reader: FieldReader, raw: Any, path: str) -> PodAffinity | None:
    if raw is None:
        return None
    body = reader.mapping(raw, path)
    req_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    pref_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    raw_required = body.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = tuple(
        _pod_affinity_term(reader, term, f"{req_path}[{i}]")
        for i, term in enumerate(reader.sequence(raw_required, req_path))
    )
    preferred = []
    raw_preferred = body.get("preferredDuringSchedulingIgnoredDuringExecution")
    for i, item in enumerate(reader.sequence(raw_preferred, pref_path)):
        where = f"{pref_path}[{i}]"
        item = reader.mapping(item, where)
        preferred.append(
            reader.build(
                where,
                WeightedPodAffinityTerm,
                weight=item.get("weight"),
                term=_pod_affinity_term(reader, item.get("podAffinityTerm"), f"{where}.podAffinityTerm"),
            )
        )
    return PodAffinity(required=required, preferred=tuple(preferred))


def read_affinity(reader: FieldReader, raw: Any, path: str) -> Affinity | None:
    if raw is None:
        return None
    body = reader.mapping(raw, path)
    node_affinity = None
    if body.get("nodeAffinity") is not None:
        na_path = f"{path}.nodeAffinity"
        na = reader.mapping(body["nodeAffinity"], na_path)
        required = None
        if na.get("requiredDuringSchedulingIgnoredDuringExecution") is not None:
            req_path = f"{na_path}.requiredDuringSchedulingIgnoredDuringExecution"
            selector = reader.mapping(na["requiredDuringSchedulingIgnoredDuringExecution"], req_path)
            terms = reader.sequence(selector.get("nodeSelectorTerms"), f"{req_path}.nodeSelectorTerms")
            if not terms:
                raise reader.fail(f"{req_path}.nodeSelectorTerms", "must have at least one term")
            required = tuple(
                _node_selector_term(reader, term, f"{req_path}.nodeSelectorTerms[{i}]") for i, term in enumerate(terms)
            )
        preferred = []
        pref_path = f"{na_path}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, item in enumerate(reader.sequence(na.get("preferredDuringSchedulingIgnoredDuringExecution"), pref_path)):
            where = f"{pref_path}[{i}]"
            item = reader.mapping(item, where)
            preferred.append(
                reader.build(
                    where,
                    PreferredSchedulingTerm,
                    weight=item.get("weight"),
                    preference=_node_selector_term(reader, item.get("preference"), f"{where}.preference"),
                )
            )
        node_affinity = NodeAffinity(required=required, preferred=tuple(preferred))
    return Affinity(
        node_affinity=node_affinity,
        pod_affinity=_pod_affinity(reader, body.get("podAffinity"), f"{path}.podAffinity"),
        pod_anti_affinity=_pod_affinity(reader, body.get("podAntiAffinity"), f"{path}.podAntiAffinity"),
    )


def read_tolerations(reader: FieldReader, raw: Any, path: str) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(reader.sequence(raw, path)):
        where = f"{path}[{i}]"
        item = reader.mapping(item, where)
        out.append(
            reader.build(
                where,
                Toleration,
                key=item.get("key") or "",
                operator=item.get("operator") or "Equal",
                value=item.get("value") or "",
                effect=item.get("effect") or None,
                toleration_seconds=reader.integer(item.get("tolerationSeconds"), f"{where}.tolerationSeconds"),
            )
        )
    return tuple(out)


def read_spread_constraints(reader: FieldReader, raw: Any, path: str) -> tuple[TopologySpreadConstraint, ...]:
    out = []
    for i, item in enumerate(reader.sequence(raw, path)):
        where = f"{path}[{i}]"
        item = reader.mapping(item, where)
        values: dict[str, Any] = {
            "max_skew": item.get("maxSkew"),
            "topology_key": item.get("topologyKey"),
            "when_unsatisfiable": item.get("whenUnsatisfiable"),
            "label_selector": read_label_selector(reader, item.get("labelSelector"), f"{where}.labelSelector"),
            "min_domains": item.get("minDomains"),
            "match_label_keys": reader.strings(item.get("matchLabelKeys"), f"{where}.matchLabelKeys"),
        }
        if item.get("nodeAffinityPolicy") is not None:
            values["node_affinity_policy"] = item["nodeAffinityPolicy"]
        if item.get("nodeTaintsPolicy") is not None:
            values["node_taints_policy"] = item["nodeTaintsPolicy"]
        out.append(reader.build(where, TopologySpreadConstraint, **values))
    return tuple(out)
