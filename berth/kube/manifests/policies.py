"""Policy objects: Namespaces, PriorityClasses, PodGroups, ResourceQuotas, LimitRanges,
PodDisruptionBudgets and Berth's AgentPools and ToolBindings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from berth.schemas.agentpool import AgentPoolSpec, ToolBindingSpec, error_text
from berth.schemas.cluster import LabelSelector
from berth.schemas.policy import (
    LimitRangeInfo,
    LimitRangeItem,
    NamespaceInfo,
    PodDisruptionBudgetInfo,
    PodGroupInfo,
    PriorityClassInfo,
    ResourceQuotaInfo,
)

from .common import object_meta
from .selectors import read_label_selector


@dataclass(frozen=True)
class AgentPoolManifest:
    """A ``berth.io/v1alpha1 AgentPool``, its spec kept verbatim (validated against
    :class:`berth.schemas.agentpool.AgentPoolSpec`). ``simulate`` schedules the replicas its
    controller would create (:func:`berth.simulate.pool_replicas`)."""

    namespace: str
    name: str
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolBindingManifest:
    """A ``berth.io/v1alpha1 ToolBinding``: the queue binding of the AgentPool ``agent_pool`` (same
    namespace; None: it names none). ``queue_config`` is its ``spec.queueConfig`` as written
    (validated against :class:`berth.schemas.agentpool.QueueConfig`)."""

    namespace: str
    name: str
    agent_pool: str | None = None
    queue_config: Mapping[str, Any] | None = None


def namespace_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> NamespaceInfo:
    reader, meta, _, name = object_meta(obj, "Namespace", index, namespaced=False)
    labels = reader.string_map(meta.get("labels"), "metadata.labels")
    labels["kubernetes.io/metadata.name"] = name
    return NamespaceInfo(name=name, labels=dict(sorted(labels.items())))


def priority_class_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> PriorityClassInfo:
    reader, _, _, name = object_meta(obj, "PriorityClass", index, namespaced=False)
    value = reader.integer(obj.get("value"), "value")
    if value is None:
        raise reader.fail("value", "is required")
    if value > 1_000_000_000 and not name.startswith("system-"):
        raise reader.fail(
            "value", f"{value} must be at most 1000000000 (larger values are reserved for system priority classes)"
        )
    global_default = obj.get("globalDefault", False)
    if not isinstance(global_default, bool):
        raise reader.fail("globalDefault", f"{global_default!r} must be true or false")
    return reader.build(
        "",
        PriorityClassInfo,
        name=name,
        value=value,
        global_default=global_default,
        preemption_policy=obj.get("preemptionPolicy") or "PreemptLowerPriority",
    )


def pod_group_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> PodGroupInfo:
    reader, _, namespace, name = object_meta(obj, "PodGroup", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    min_member = reader.integer(spec.get("minMember"), "spec.minMember")
    if min_member is None:
        raise reader.fail("spec.minMember", "is required")
    return reader.build(
        "spec",
        PodGroupInfo,
        namespace=namespace,
        name=name,
        min_member=min_member,
        schedule_timeout_seconds=reader.integer(spec.get("scheduleTimeoutSeconds"), "spec.scheduleTimeoutSeconds"),
    )


def resource_quota_from_manifest(
    obj: Mapping[str, Any], *, index: int | None = None, warnings: list[str] | None = None
) -> ResourceQuotaInfo:
    """Convert a ResourceQuota. Only the PriorityClass ``In`` scope selector is modelled; quotas
    with other scopes (``NotTerminating``, ``BestEffort``...) are kept but those scopes are
    ignored, with a warning, since they do not depend on anything Berth schedules by."""
    notes: list[str] = warnings if warnings is not None else []
    reader, _, namespace, name = object_meta(obj, "ResourceQuota", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    hard_raw = reader.mapping(spec.get("hard"), "spec.hard")
    hard: dict[str, int] = {}
    for key in sorted(hard_raw):
        underlying = key.removeprefix("requests.").removeprefix("limits.").removeprefix("count/")
        single = reader.quantities({underlying: hard_raw[key]}, "spec.hard")
        hard[key] = single[underlying]
    for scope in reader.strings(spec.get("scopes"), "spec.scopes"):
        notes.append(f"{reader.ref}: spec.scopes {scope} is not modelled; the quota applies to every pod")
    classes: list[str] = []
    selector = reader.mapping(spec.get("scopeSelector"), "spec.scopeSelector")
    for i, expr in enumerate(reader.sequence(selector.get("matchExpressions"), "spec.scopeSelector.matchExpressions")):
        where = f"spec.scopeSelector.matchExpressions[{i}]"
        expr = reader.mapping(expr, where)
        scope_name = expr.get("scopeName")
        operator = expr.get("operator")
        if scope_name != "PriorityClass":
            notes.append(f"{reader.ref}: {where}.scopeName {scope_name} is not modelled; ignored")
            continue
        if operator != "In":
            raise reader.fail(
                f"{where}.operator", f"{operator!r} is not supported for scopeName PriorityClass (only In)"
            )
        values = reader.strings(expr.get("values"), f"{where}.values")
        if not values:
            raise reader.fail(f"{where}.values", "must name at least one PriorityClass")
        classes.extend(values)
    return reader.build(
        "spec",
        ResourceQuotaInfo,
        namespace=namespace,
        name=name,
        hard=hard,
        scope_priority_classes=tuple(sorted(set(classes))),
    )


def limit_range_from_manifest(
    obj: Mapping[str, Any], *, index: int | None = None, warnings: list[str] | None = None
) -> LimitRangeInfo:
    """Convert a LimitRange, applying Kubernetes' object defaulting for ``Container`` items:
    ``default`` falls back to ``max``, ``defaultRequest`` to ``default`` and then to ``min``."""
    notes: list[str] = warnings if warnings is not None else []
    reader, _, namespace, name = object_meta(obj, "LimitRange", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    items = []
    for i, item in enumerate(reader.sequence(spec.get("limits"), "spec.limits")):
        where = f"spec.limits[{i}]"
        item = reader.mapping(item, where)
        kind = item.get("type") or "Container"
        if kind == "PersistentVolumeClaim":
            notes.append(f"{reader.ref}: {where} (PersistentVolumeClaim) does not affect scheduling; ignored")
            continue
        if kind not in ("Container", "Pod"):
            raise reader.fail(f"{where}.type", f"{kind!r} must be Container, Pod or PersistentVolumeClaim")
        lists = {
            key: reader.quantities(item.get(key), f"{where}.{key}")
            for key in ("default", "defaultRequest", "min", "max")
        }
        if item.get("maxLimitRequestRatio") is not None:
            notes.append(f"{reader.ref}: {where}.maxLimitRequestRatio is not enforced by Berth")
        if kind == "Container":
            for resource, amount in lists["max"].items():
                lists["default"].setdefault(resource, amount)
            for resource, amount in lists["default"].items():
                lists["defaultRequest"].setdefault(resource, amount)
            for resource, amount in lists["min"].items():
                lists["defaultRequest"].setdefault(resource, amount)
        elif lists["default"] or lists["defaultRequest"]:
            raise reader.fail(where, "default and defaultRequest are only allowed for type Container")
        items.append(
            reader.build(
                where,
                LimitRangeItem,
                type=kind,
                default=dict(sorted(lists["default"].items())),
                default_request=dict(sorted(lists["defaultRequest"].items())),
                min=lists["min"],
                max=lists["max"],
            )
        )
    return reader.build("spec", LimitRangeInfo, namespace=namespace, name=name, limits=tuple(items))


def pdb_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> PodDisruptionBudgetInfo:
    reader, _, namespace, name = object_meta(obj, "PodDisruptionBudget", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    values: dict[str, Any] = {}
    for key, attr in (("minAvailable", "min_available"), ("maxUnavailable", "max_unavailable")):
        value = spec.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise reader.fail(f"spec.{key}", f"{value!r} must be an integer or a percentage like '50%'")
        if isinstance(value, str):
            if re.fullmatch(r"[0-9]+", value):
                value = int(value)
            elif not re.fullmatch(r"[0-9]+%", value) or int(value[:-1]) > 100:
                raise reader.fail(f"spec.{key}", f"{value!r} must be an integer or a percentage like '50%'")
        if isinstance(value, int) and value < 0:
            raise reader.fail(f"spec.{key}", f"{value} must be non-negative")
        values[attr] = value
    if len(values) == 2:
        raise reader.fail("spec", "minAvailable and maxUnavailable cannot both be set")
    selector = read_label_selector(reader, spec.get("selector"), "spec.selector") or LabelSelector()
    return PodDisruptionBudgetInfo(namespace=namespace, name=name, selector=selector, **values)


def agent_pool_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> AgentPoolManifest:
    """An AgentPool, its spec kept as written after validating it against
    :class:`berth.schemas.agentpool.AgentPoolSpec` (every problem named by its path)."""

    reader, _, namespace, name = object_meta(obj, "AgentPool", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    try:
        AgentPoolSpec.model_validate(spec)
    except ValidationError as exc:
        raise reader.fail("spec", error_text(exc, prefix="").removeprefix("spec: ")) from exc
    return AgentPoolManifest(namespace=namespace, name=name, spec=spec)


def tool_binding_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> ToolBindingManifest:
    """A ToolBinding, its ``spec`` validated against :class:`berth.schemas.agentpool.ToolBindingSpec`."""

    reader, _, namespace, name = object_meta(obj, "ToolBinding", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    try:
        parsed = ToolBindingSpec.model_validate(spec)
    except ValidationError as exc:
        raise reader.fail("spec", error_text(exc, prefix="").removeprefix("spec: ")) from exc
    queue = spec.get("queueConfig", spec.get("queue_config"))
    return ToolBindingManifest(
        namespace=namespace, name=name, agent_pool=parsed.agent_pool, queue_config=dict(queue) if queue else None
    )
