"""Kubernetes manifests (camelCase dicts as parsed from YAML/JSON) → Berth's contract models.

One function per kind turns an object into the model the decision core consumes
(:class:`~berth.schemas.cluster.PodInfo`, :class:`~berth.schemas.cluster.NodeInfo`, the policy
models), and :func:`load_documents` converts a whole file's worth of objects in dependency order
(PriorityClasses and LimitRanges before the pods that need them).

Contract:

- Every rejection is a :class:`ManifestError` whose text names the object and the field path, e.g.
  ``Pod default/train-0: spec.containers[0].resources.requests.cpu: '2 cores' is not a Kubernetes
  quantity``. Nothing is silently dropped: a field Berth does not model either is irrelevant to
  scheduling (ignored by design, such as images or probes) or produces a warning in
  :attr:`ManifestBundle.warnings`.
- A pod's ``requests`` are computed as kube-scheduler does after API defaulting (a request
  defaults to its limit) and LimitRanger admission (per-container defaults, before summing).
- Conversion is deterministic: no clock (a missing ``creationTimestamp`` becomes the Unix epoch)
  and no randomness (a missing ``uid`` is derived from the object's namespace and name).

Berth's own annotations (the manifest face of fields Kubernetes has no place for):

======================================  ============================================================
``gpu-fraction`` (pod)                  share of ONE GPU, ``"0.25"``; milli precision, 0 < f <= 1
``gpu-memory`` (pod)                    GPU memory the share needs, MiB
``berth.io/gpu-locality`` (pod)         ``any`` | ``same-node`` | ``same-socket`` | ``nvlink``
``berth.io/gpu-devices`` (pod)          device indices a bound pod holds, ``"0,1"``
``berth.io/gpu-topology`` (node)        JSON ``{"devices": [{"index": 0, "numa": 0, "nvlink": [1]}]}``
``berth.io/gpu-mig`` (node)             JSON ``{"7": {"1g.5gb": 7}}``: device index → profile → count
``berth.io/price-per-hour`` (node)      price of the node per hour (any currency, used to compare)
``berth.io/carbon-intensity`` (node)    grid carbon intensity, gCO2eq/kWh
======================================  ============================================================
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from berth.core.admission import (
    ContainerResources,
    PodResources,
    apply_limit_ranges,
    forbidden,
    limit_range_message,
)
from berth.schemas.cluster import (
    Affinity,
    GpuDevice,
    LabelSelector,
    LabelSelectorRequirement,
    MigSlice,
    NodeAffinity,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OwnerReference,
    PodAffinity,
    PodAffinityTerm,
    PodInfo,
    PreferredSchedulingTerm,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from berth.schemas.policy import (
    LimitRangeInfo,
    LimitRangeItem,
    NamespaceInfo,
    PodDisruptionBudgetInfo,
    PodGroupInfo,
    PriorityClassInfo,
    ResourceQuotaInfo,
)
from berth.schemas.quantity import MILLI_RESOURCES, QuantityError, parse_quantity, to_canonical

__all__ = [
    "ANNOTATION_CARBON",
    "ANNOTATION_GPU_DEVICES",
    "ANNOTATION_GPU_FRACTION",
    "ANNOTATION_GPU_LOCALITY",
    "ANNOTATION_GPU_MEMORY",
    "ANNOTATION_GPU_MIG",
    "ANNOTATION_GPU_TOPOLOGY",
    "ANNOTATION_PRICE",
    "AgentPoolManifest",
    "LABEL_POD_GROUP",
    "ManifestBundle",
    "ManifestError",
    "NamespaceInfo",
    "PodManifest",
    "limit_range_from_manifest",
    "load_documents",
    "namespace_from_manifest",
    "node_from_manifest",
    "pdb_from_manifest",
    "pod_from_manifest",
    "pod_group_from_manifest",
    "priority_class_from_manifest",
    "resource_quota_from_manifest",
]

ANNOTATION_GPU_FRACTION = "gpu-fraction"
ANNOTATION_GPU_MEMORY = "gpu-memory"
ANNOTATION_GPU_LOCALITY = "berth.io/gpu-locality"
ANNOTATION_GPU_DEVICES = "berth.io/gpu-devices"
ANNOTATION_GPU_TOPOLOGY = "berth.io/gpu-topology"
ANNOTATION_GPU_MIG = "berth.io/gpu-mig"
ANNOTATION_PRICE = "berth.io/price-per-hour"
ANNOTATION_CARBON = "berth.io/carbon-intensity"
LABEL_POD_GROUP = "scheduling.x-k8s.io/pod-group"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"

# A pod or node without a timestamp gets this one: a fixed value keeps conversion reproducible.
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_UID_NAMESPACE = uuid.UUID("6f1c3a52-2b7e-4c1e-9a43-5d0c1f1e7b10")
_MIG_SLICES_PER_GPU = 7  # compute slices of an A100/H100; the "Ng" of a profile counts them
_NATIVE = {"cpu", "memory", "ephemeral-storage"}
DEFAULT_MAX_PODS = 110

M = TypeVar("M", bound=BaseModel)


class ManifestError(ValueError):
    """A manifest Berth cannot accept; ``str()`` is ``<Kind> <ns>/<name>: <field path>: <why>``."""

    def __init__(self, ref: str, path: str, detail: str) -> None:
        self.ref = ref
        self.path = path
        self.detail = detail
        super().__init__(f"{ref}: {path}: {detail}" if path else f"{ref}: {detail}")


@dataclass(frozen=True)
class AgentPoolManifest:
    """A ``berth.io/v1alpha1 AgentPool``, its spec kept verbatim (validated against
    :class:`berth.schemas.agentpool.AgentPoolSpec`). ``simulate`` schedules the replicas its
    controller would create (:func:`berth.simulate.pool_replicas`)."""

    namespace: str
    name: str
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PodManifest:
    """A converted pod plus what admission needs beyond :class:`PodInfo`.

    ``resources`` are the per-container requests/limits after API defaulting and LimitRange
    defaults (quota charges ``limits.*`` from them); ``rejection`` is kube-apiserver's message when
    LimitRanger would refuse the pod (``pods "x" is forbidden: maximum cpu usage per Container is
    32, but limit is 64``), None when it is admitted.
    """

    pod: PodInfo
    resources: PodResources
    rejection: str | None = None


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
    warnings: tuple[str, ...] = ()


# --- small typed readers that know where they are ------------------------------------------------


class _Reader:
    """Reads fields of one object and raises :class:`ManifestError` naming the object and path."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def fail(self, path: str, detail: str) -> ManifestError:
        return ManifestError(self.ref, path, detail)

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"must be an object, got {type(value).__name__}")
        return value

    def sequence(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {type(value).__name__}")
        return value

    def string(self, value: Any, path: str, *, required: bool = False) -> str | None:
        if value is None:
            if required:
                raise self.fail(path, "is required")
            return None
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {value!r}")
        return value

    def integer(self, value: Any, path: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {value!r}")
        return value

    def strings(self, value: Any, path: str) -> tuple[str, ...]:
        return tuple(self.string(item, f"{path}[{i}]", required=True) or ""
                     for i, item in enumerate(self.sequence(value, path)))

    def string_map(self, value: Any, path: str) -> dict[str, str]:
        raw = self.mapping(value, path)
        out: dict[str, str] = {}
        for key in sorted(raw):
            item = raw[key]
            if not isinstance(item, str):
                # Kubernetes rejects non-string label/annotation values; YAML's `true` or `8`
                # unquoted are the usual culprits, so say how to fix it.
                raise self.fail(f"{path}.{key}", f"must be a string (quote it), got {item!r}")
            out[str(key)] = item
        return out

    def quantities(self, value: Any, path: str) -> dict[str, int]:
        raw = self.mapping(value, path)
        out: dict[str, int] = {}
        for name in sorted(raw):
            amount = raw[name]
            where = f"{path}.{name}"
            if isinstance(amount, bool) or not isinstance(amount, (str, int, float)):
                raise self.fail(where, f"{amount!r} is not a Kubernetes quantity")
            try:
                canonical = to_canonical(name, amount)
            except QuantityError:
                if isinstance(amount, str) and amount.strip().startswith("-") or (
                        not isinstance(amount, str) and amount < 0):
                    raise self.fail(where, f"{amount!r} must be non-negative") from None
                raise self.fail(where, f"{amount!r} is not a Kubernetes quantity") from None
            if name not in _NATIVE and not name.startswith("hugepages-") and name not in MILLI_RESOURCES:
                # Extended resources are whole counts (kube: "must be an integer").
                if Decimal(str(canonical)) != _decimal(amount):
                    raise self.fail(where, f"{amount!r} must be an integer for extended resource {name}")
            out[name] = canonical
        return out

    def build(self, path: str, cls: Callable[..., M], /, **values: Any) -> M:
        """Construct a contract model, turning pydantic's complaint into one with a field path."""
        try:
            return cls(**values)
        except ValidationError as exc:
            error = exc.errors()[0]
            loc = ".".join(_camel(str(part)) for part in error["loc"])
            where = f"{path}.{loc}" if path and loc else (path or loc)
            raise self.fail(where, error["msg"].removeprefix("Value error, ")) from None


def _decimal(amount: str | int | float) -> Decimal:
    return parse_quantity(amount)


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


def _timestamp(reader: _Reader, value: Any, path: str) -> datetime:
    if value is None:
        return EPOCH
    if isinstance(value, datetime):
        stamp = value
    else:
        text = reader.string(value, path) or ""
        try:
            stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise reader.fail(path, f"{text!r} is not an RFC 3339 timestamp") from None
    if stamp.tzinfo is None:
        raise reader.fail(path, "timestamp must carry a timezone (e.g. 2026-01-01T00:00:00Z)")
    return stamp.astimezone(timezone.utc)


def _meta(obj: Mapping[str, Any], kind: str, index: int | None, *, namespaced: bool,
          default_namespace: str = "default") -> tuple[_Reader, dict[str, Any], str, str]:
    """Return a reader named after the object, its metadata, namespace and name."""
    where = f"document {index}" if index is not None else kind
    if not isinstance(obj, Mapping):
        raise ManifestError(where, "", f"must be an object, got {type(obj).__name__}")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ManifestError(f"{kind} ({where})", "metadata", "is required")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{kind} ({where})", "metadata.name", "is required")
    namespace = ""
    if namespaced:
        namespace = meta.get("namespace") or default_namespace
        if not isinstance(namespace, str):
            raise ManifestError(f"{kind} {name}", "metadata.namespace", "must be a string")
    ref = f"{kind} {namespace}/{name}" if namespaced else f"{kind} {name}"
    reader = _Reader(ref)
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
        raise reader.fail("metadata.name", f"{name!r} is not a valid Kubernetes object name "
                          "(lowercase letters, digits, '-' and '.')")
    return reader, dict(meta), namespace, name


# --- selectors, affinity, tolerations --------------------------------------------------------------


def _label_selector(reader: _Reader, raw: Any, path: str) -> LabelSelector | None:
    if raw is None:
        return None
    body = reader.mapping(raw, path)
    expressions = []
    for i, expr in enumerate(reader.sequence(body.get("matchExpressions"), f"{path}.matchExpressions")):
        where = f"{path}.matchExpressions[{i}]"
        expr = reader.mapping(expr, where)
        expressions.append(reader.build(
            where, LabelSelectorRequirement, key=expr.get("key"), operator=expr.get("operator"),
            values=reader.strings(expr.get("values"), f"{where}.values")))
    return reader.build(path, LabelSelector,
                        match_labels=reader.string_map(body.get("matchLabels"), f"{path}.matchLabels"),
                        match_expressions=tuple(expressions))


def _node_selector_term(reader: _Reader, raw: Any, path: str) -> NodeSelectorTerm:
    body = reader.mapping(raw, path)
    parts: dict[str, tuple[NodeSelectorRequirement, ...]] = {}
    for key, attr in (("matchExpressions", "match_expressions"), ("matchFields", "match_fields")):
        items = []
        for i, expr in enumerate(reader.sequence(body.get(key), f"{path}.{key}")):
            where = f"{path}.{key}[{i}]"
            expr = reader.mapping(expr, where)
            items.append(reader.build(
                where, NodeSelectorRequirement, key=expr.get("key"), operator=expr.get("operator"),
                values=reader.strings(expr.get("values"), f"{where}.values")))
        parts[attr] = tuple(items)
    return NodeSelectorTerm(**parts)


def _pod_affinity_term(reader: _Reader, raw: Any, path: str) -> PodAffinityTerm:
    body = reader.mapping(raw, path)
    return reader.build(
        path, PodAffinityTerm,
        label_selector=_label_selector(reader, body.get("labelSelector"), f"{path}.labelSelector"),
        namespaces=reader.strings(body.get("namespaces"), f"{path}.namespaces"),
        namespace_selector=_label_selector(reader, body.get("namespaceSelector"),
                                           f"{path}.namespaceSelector"),
        topology_key=body.get("topologyKey"),
        match_label_keys=reader.strings(body.get("matchLabelKeys"), f"{path}.matchLabelKeys"),
        mismatch_label_keys=reader.strings(body.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys"),
    )


def _pod_affinity(reader: _Reader, raw: Any, path: str) -> PodAffinity | None:
    if raw is None:
        return None
    body = reader.mapping(raw, path)
    req_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    pref_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    raw_required = body.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = tuple(_pod_affinity_term(reader, term, f"{req_path}[{i}]")
                     for i, term in enumerate(reader.sequence(raw_required, req_path)))
    preferred = []
    raw_preferred = body.get("preferredDuringSchedulingIgnoredDuringExecution")
    for i, item in enumerate(reader.sequence(raw_preferred, pref_path)):
        where = f"{pref_path}[{i}]"
        item = reader.mapping(item, where)
        preferred.append(reader.build(
            where, WeightedPodAffinityTerm, weight=item.get("weight"),
            term=_pod_affinity_term(reader, item.get("podAffinityTerm"), f"{where}.podAffinityTerm")))
    return PodAffinity(required=required, preferred=tuple(preferred))


def _affinity(reader: _Reader, raw: Any, path: str) -> Affinity | None:
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
            required = tuple(_node_selector_term(reader, term, f"{req_path}.nodeSelectorTerms[{i}]")
                             for i, term in enumerate(terms))
        preferred = []
        pref_path = f"{na_path}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, item in enumerate(reader.sequence(na.get("preferredDuringSchedulingIgnoredDuringExecution"),
                                                 pref_path)):
            where = f"{pref_path}[{i}]"
            item = reader.mapping(item, where)
            preferred.append(reader.build(
                where, PreferredSchedulingTerm, weight=item.get("weight"),
                preference=_node_selector_term(reader, item.get("preference"), f"{where}.preference")))
        node_affinity = NodeAffinity(required=required, preferred=tuple(preferred))
    return Affinity(
        node_affinity=node_affinity,
        pod_affinity=_pod_affinity(reader, body.get("podAffinity"), f"{path}.podAffinity"),
        pod_anti_affinity=_pod_affinity(reader, body.get("podAntiAffinity"), f"{path}.podAntiAffinity"),
    )


def _tolerations(reader: _Reader, raw: Any, path: str) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(reader.sequence(raw, path)):
        where = f"{path}[{i}]"
        item = reader.mapping(item, where)
        out.append(reader.build(
            where, Toleration, key=item.get("key") or "", operator=item.get("operator") or "Equal",
            value=item.get("value") or "", effect=item.get("effect") or None,
            toleration_seconds=reader.integer(item.get("tolerationSeconds"), f"{where}.tolerationSeconds")))
    return tuple(out)


def _spread(reader: _Reader, raw: Any, path: str) -> tuple[TopologySpreadConstraint, ...]:
    out = []
    for i, item in enumerate(reader.sequence(raw, path)):
        where = f"{path}[{i}]"
        item = reader.mapping(item, where)
        values: dict[str, Any] = {
            "max_skew": item.get("maxSkew"),
            "topology_key": item.get("topologyKey"),
            "when_unsatisfiable": item.get("whenUnsatisfiable"),
            "label_selector": _label_selector(reader, item.get("labelSelector"), f"{where}.labelSelector"),
            "min_domains": item.get("minDomains"),
            "match_label_keys": reader.strings(item.get("matchLabelKeys"), f"{where}.matchLabelKeys"),
        }
        if item.get("nodeAffinityPolicy") is not None:
            values["node_affinity_policy"] = item["nodeAffinityPolicy"]
        if item.get("nodeTaintsPolicy") is not None:
            values["node_taints_policy"] = item["nodeTaintsPolicy"]
        out.append(reader.build(where, TopologySpreadConstraint, **values))
    return tuple(out)


# --- pods ----------------------------------------------------------------------------------------


def _containers(reader: _Reader, raw: Any, path: str, *, init: bool) -> tuple[ContainerResources, ...]:
    out = []
    for i, item in enumerate(reader.sequence(raw, path)):
        where = f"{path}[{i}]"
        item = reader.mapping(item, where)
        name = reader.string(item.get("name"), f"{where}.name", required=True) or ""
        resources = reader.mapping(item.get("resources"), f"{where}.resources")
        requests = reader.quantities(resources.get("requests"), f"{where}.resources.requests")
        limits = reader.quantities(resources.get("limits"), f"{where}.resources.limits")
        for resource in sorted(set(requests) & set(limits)):
            if resource in _NATIVE or resource.startswith("hugepages-"):
                if requests[resource] > limits[resource]:
                    raise reader.fail(f"{where}.resources.requests.{resource}",
                                      f"must be less than or equal to {resource} limit")
            elif requests[resource] != limits[resource]:
                raise reader.fail(f"{where}.resources.requests.{resource}",
                                  f"must be equal to {resource} limit")
        for resource in sorted(set(requests) - set(limits)):
            if resource not in _NATIVE and not resource.startswith("hugepages-"):
                raise reader.fail(f"{where}.resources.limits",
                                  f"Limit must be set for non overcommitable resources: {resource}")
        # API defaulting: a resource with a limit but no request requests its limit.
        for resource, amount in limits.items():
            requests.setdefault(resource, amount)
        restart_policy = reader.string(item.get("restartPolicy"), f"{where}.restartPolicy")
        if restart_policy is not None and (not init or restart_policy != "Always"):
            raise reader.fail(f"{where}.restartPolicy",
                              "only init containers may set restartPolicy, and only to Always")
        out.append(ContainerResources(name=name, requests=dict(sorted(requests.items())),
                                      limits=dict(sorted(limits.items())),
                                      restartable=restart_policy == "Always"))
    return tuple(out)


def _gpu_fraction(reader: _Reader, text: str, path: str) -> int:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise reader.fail(path, f"{text!r} is not a number (expected e.g. '0.25')") from None
    if not value.is_finite() or value <= 0 or value > 1:
        raise reader.fail(path, f"{text!r} must be greater than 0 and at most 1")
    milli = value * 1000
    if milli != milli.to_integral_value():
        raise reader.fail(path, f"{text!r} has more than milli precision (at most 3 decimals)")
    return int(milli)


def _device_list(reader: _Reader, text: str, path: str) -> tuple[int, ...]:
    if not text.strip():
        return ()
    indices = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise reader.fail(path, f"{text!r} must be comma-separated device indices, e.g. '0,1'")
        indices.append(int(part))
    if len(set(indices)) != len(indices):
        raise reader.fail(path, f"{text!r} names a device twice")
    return tuple(sorted(indices))


def _deterministic_uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{namespace}/{name}"))


def pod_from_manifest(
    obj: Mapping[str, Any],
    *,
    priority_classes: Mapping[str, PriorityClassInfo] | None = None,
    limit_ranges: Sequence[LimitRangeInfo] = (),
    index: int | None = None,
) -> PodManifest:
    """Convert a Pod.

    ``priority_classes`` (by name) resolve ``priorityClassName`` and the global default, as the
    Priority admission plugin does; ``limit_ranges`` are the pod's namespace's LimitRanges, applied
    as LimitRanger would (a violation lands in :attr:`PodManifest.rejection`, not an exception:
    the object is well-formed, admission just refuses it).
    """
    reader, meta, namespace, name = _meta(obj, "Pod", index, namespaced=True)
    classes = priority_classes or {}
    spec = reader.mapping(obj.get("spec"), "spec")
    status = reader.mapping(obj.get("status"), "status")
    labels = reader.string_map(meta.get("labels"), "metadata.labels")
    annotations = reader.string_map(meta.get("annotations"), "metadata.annotations")

    containers = _containers(reader, spec.get("containers"), "spec.containers", init=False)
    if not containers:
        raise reader.fail("spec.containers", "must have at least one container")
    init_containers = _containers(reader, spec.get("initContainers"), "spec.initContainers", init=True)
    overhead = reader.quantities(spec.get("overhead"), "spec.overhead")
    resources = PodResources(containers, init_containers, overhead)
    rejection = None
    if limit_ranges:
        resources, violations = apply_limit_ranges(resources, limit_ranges)
        if violations:
            rejection = forbidden(name, limit_range_message(violations))
    requests = resources.effective_requests()

    # Priority, as the Priority admission plugin resolves it.
    class_name = reader.string(spec.get("priorityClassName"), "spec.priorityClassName") or None
    explicit = reader.integer(spec.get("priority"), "spec.priority")
    preemption_policy = reader.string(spec.get("preemptionPolicy"), "spec.preemptionPolicy")
    if preemption_policy not in (None, "PreemptLowerPriority", "Never"):
        raise reader.fail("spec.preemptionPolicy",
                          f"{preemption_policy!r} must be PreemptLowerPriority or Never")
    pclass: PriorityClassInfo | None = None
    if class_name:
        pclass = classes.get(class_name)
        if pclass is None:
            raise reader.fail("spec.priorityClassName", f"no PriorityClass with name {class_name} was found")
    elif explicit is None:
        defaults = [c for c in classes.values() if c.global_default]
        pclass = min(defaults, key=lambda c: c.value) if defaults else None
        class_name = pclass.name if pclass else None
    priority = explicit if explicit is not None else (pclass.value if pclass else 0)
    if explicit is not None and pclass is not None and explicit != pclass.value:
        raise reader.fail("spec.priority",
                          f"the integer value of priority ({explicit}) must not be provided in pod spec; "
                          f"priority admission controller computed {pclass.value} from the given "
                          "PriorityClass name")
    if preemption_policy is None:
        preemption_policy = pclass.preemption_policy if pclass else "PreemptLowerPriority"

    # Berth's GPU annotations.
    fraction = None
    if ANNOTATION_GPU_FRACTION in annotations:
        fraction = _gpu_fraction(reader, annotations[ANNOTATION_GPU_FRACTION],
                                 f"metadata.annotations.{ANNOTATION_GPU_FRACTION}")
    gpu_memory = None
    if ANNOTATION_GPU_MEMORY in annotations:
        text = annotations[ANNOTATION_GPU_MEMORY].strip()
        if not text.isdigit() or int(text) == 0:
            raise reader.fail(f"metadata.annotations.{ANNOTATION_GPU_MEMORY}",
                              f"{text!r} must be a positive whole number of MiB")
        gpu_memory = int(text)
    if (fraction is not None or gpu_memory is not None) and requests.get(GPU, 0):
        raise reader.fail(f"metadata.annotations.{ANNOTATION_GPU_FRACTION}",
                          f"a GPU share (gpu-fraction/gpu-memory) and a {GPU} request are mutually "
                          "exclusive: request whole GPUs or a share of one, not both")
    locality = annotations.get(ANNOTATION_GPU_LOCALITY, "any")
    if locality not in ("any", "same-node", "same-socket", "nvlink"):
        raise reader.fail(f"metadata.annotations.{ANNOTATION_GPU_LOCALITY}",
                          f"{locality!r} must be one of any, same-node, same-socket, nvlink")
    devices: tuple[int, ...] = ()
    if ANNOTATION_GPU_DEVICES in annotations:
        devices = _device_list(reader, annotations[ANNOTATION_GPU_DEVICES],
                               f"metadata.annotations.{ANNOTATION_GPU_DEVICES}")

    owner = None
    for i, ref in enumerate(reader.sequence(meta.get("ownerReferences"), "metadata.ownerReferences")):
        ref = reader.mapping(ref, f"metadata.ownerReferences[{i}]")
        if ref.get("controller") or owner is None:
            owner = reader.build(f"metadata.ownerReferences[{i}]", OwnerReference,
                                 api_version=ref.get("apiVersion") or "", kind=ref.get("kind"),
                                 name=ref.get("name"), uid=ref.get("uid") or "",
                                 controller=bool(ref.get("controller")))

    node_name = reader.string(spec.get("nodeName"), "spec.nodeName") or None
    phase = reader.string(status.get("phase"), "status.phase") or ("Running" if node_name else "Pending")
    pod = reader.build(
        "", PodInfo,
        uid=reader.string(meta.get("uid"), "metadata.uid") or _deterministic_uid("Pod", namespace, name),
        namespace=namespace,
        name=name,
        labels=labels,
        annotations=annotations,
        scheduler_name=reader.string(spec.get("schedulerName"), "spec.schedulerName") or "default-scheduler",
        priority=priority,
        priority_class_name=class_name,
        preemption_policy=preemption_policy,
        requests=requests,
        gpu_fraction_milli=fraction,
        gpu_memory_mib=gpu_memory,
        gpu_locality=locality,
        node_selector=reader.string_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        affinity=_affinity(reader, spec.get("affinity"), "spec.affinity"),
        tolerations=_tolerations(reader, spec.get("tolerations"), "spec.tolerations"),
        topology_spread_constraints=_spread(reader, spec.get("topologySpreadConstraints"),
                                            "spec.topologySpreadConstraints"),
        pod_group=labels.get(LABEL_POD_GROUP) or None,
        owner=owner,
        node_name=node_name,
        gpu_devices=devices,
        phase=phase,
        creation_time=_timestamp(reader, meta.get("creationTimestamp"), "metadata.creationTimestamp"),
    )
    return PodManifest(pod=pod, resources=resources, rejection=rejection)


# --- nodes ---------------------------------------------------------------------------------------

_TOPOLOGY_KEYS = {"index", "numa", "nvlink", "pcieSwitch", "healthy", "model", "memoryMiB"}


def _number(reader: _Reader, text: str, path: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise reader.fail(path, f"{text!r} is not a number") from None
    if value != value or value < 0 or value == float("inf"):
        raise reader.fail(path, f"{text!r} must be a non-negative number")
    return value


def _json_annotation(reader: _Reader, annotations: Mapping[str, str], key: str) -> Any:
    try:
        return json.loads(annotations[key])
    except json.JSONDecodeError as exc:
        raise reader.fail(f"metadata.annotations.{key}", f"is not valid JSON ({exc.msg} at "
                                                         f"char {exc.pos})") from None


def _mig_layout(reader: _Reader, annotations: Mapping[str, str]) -> dict[int, tuple[MigSlice, ...]]:
    if ANNOTATION_GPU_MIG not in annotations:
        return {}
    path = f"metadata.annotations.{ANNOTATION_GPU_MIG}"
    raw = _json_annotation(reader, annotations, ANNOTATION_GPU_MIG)
    if not isinstance(raw, dict):
        raise reader.fail(path, 'must be a JSON object like {"7": {"1g.5gb": 7}}')
    layout: dict[int, tuple[MigSlice, ...]] = {}
    for key, profiles in raw.items():
        if not str(key).isdigit():
            raise reader.fail(f"{path}.{key}", "keys must be GPU device indices")
        if not isinstance(profiles, dict) or not profiles:
            raise reader.fail(f"{path}.{key}", 'must map MIG profiles to counts, e.g. {"1g.5gb": 7}')
        slices = []
        for profile in sorted(profiles):
            count = profiles[profile]
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise reader.fail(f"{path}.{key}.{profile}", f"{count!r} must be a positive integer")
            slices.append(reader.build(f"{path}.{key}.{profile}", MigSlice, profile=profile, count=count))
        used = sum(int(s.profile.split("g.")[0]) * s.count for s in slices)
        if used > _MIG_SLICES_PER_GPU:
            raise reader.fail(f"{path}.{key}", f"uses {used} compute slices; a GPU has {_MIG_SLICES_PER_GPU}")
        layout[int(key)] = tuple(slices)
    return layout


def _synthesised_mig(allocatable: Mapping[str, int], first_index: int) -> dict[int, tuple[MigSlice, ...]]:
    """MIG devices for a node that only advertises ``nvidia.com/mig-<profile>`` counts.

    The device plugin's "mixed" strategy reports counts, not which GPU holds which slice; Berth
    needs devices, so it packs the profiles (largest first, names sorted within a size) onto
    synthetic MIG devices numbered after the whole GPUs, 7 compute slices each. Annotate the node
    with ``berth.io/gpu-mig`` to state the real layout.
    """
    wanted = []
    for resource in sorted(allocatable):
        if resource.startswith(MIG_PREFIX):
            profile = resource[len(MIG_PREFIX):]
            if re.fullmatch(r"[0-9]+g\.[0-9]+gb", profile):
                wanted += [profile] * allocatable[resource]
    wanted.sort(key=lambda p: (-int(p.split("g.")[0]), p))
    devices: list[dict[str, int]] = []
    free: list[int] = []
    for profile in wanted:
        size = int(profile.split("g.")[0])
        for i, room in enumerate(free):
            if room >= size:
                break
        else:
            devices.append({})
            free.append(_MIG_SLICES_PER_GPU)
            i = len(devices) - 1
        devices[i][profile] = devices[i].get(profile, 0) + 1
        free[i] -= size
    return {first_index + i: tuple(MigSlice(profile=p, count=c) for p, c in sorted(d.items()))
            for i, d in enumerate(devices)}


def _gpu_devices(reader: _Reader, labels: Mapping[str, str], annotations: Mapping[str, str],
                 allocatable: Mapping[str, int], warnings: list[str]) -> tuple[GpuDevice, ...]:
    model = labels.get(LABEL_GPU_PRODUCT, "")
    memory = 0
    if LABEL_GPU_MEMORY in labels:
        text = labels[LABEL_GPU_MEMORY]
        if not text.isdigit():
            raise reader.fail(f"metadata.labels.{LABEL_GPU_MEMORY}", f"{text!r} must be MiB as a whole number")
        memory = int(text)
    whole = allocatable.get(GPU)
    if whole is None and LABEL_GPU_COUNT in labels:
        text = labels[LABEL_GPU_COUNT]
        if not text.isdigit():
            raise reader.fail(f"metadata.labels.{LABEL_GPU_COUNT}", f"{text!r} must be a whole number")
        whole = int(text)
    whole = whole or 0
    mig = _mig_layout(reader, annotations)

    topology: dict[int, dict[str, Any]] = {}
    if ANNOTATION_GPU_TOPOLOGY in annotations:
        path = f"metadata.annotations.{ANNOTATION_GPU_TOPOLOGY}"
        raw = _json_annotation(reader, annotations, ANNOTATION_GPU_TOPOLOGY)
        if not isinstance(raw, dict) or not isinstance(raw.get("devices"), list):
            raise reader.fail(path, 'must be a JSON object like {"devices": [{"index": 0, "numa": 0, '
                                    '"nvlink": [1]}]}')
        for i, device in enumerate(raw["devices"]):
            where = f"{path}.devices[{i}]"
            if not isinstance(device, dict):
                raise reader.fail(where, "must be an object")
            unknown = sorted(set(device) - _TOPOLOGY_KEYS)
            if unknown:
                raise reader.fail(f"{where}.{unknown[0]}",
                                  f"unknown field (known: {', '.join(sorted(_TOPOLOGY_KEYS))})")
            index = device.get("index")
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise reader.fail(f"{where}.index", f"{index!r} must be a non-negative integer")
            if index in topology:
                raise reader.fail(f"{where}.index", f"device {index} is listed twice")
            topology[index] = device
        device_indices = sorted(topology)
        for i, device in enumerate(raw["devices"]):
            peers = device.get("nvlink", [])
            if not isinstance(peers, list) or any(isinstance(p, bool) or not isinstance(p, int) for p in peers):
                raise reader.fail(f"{path}.devices[{i}].nvlink", f"{peers!r} must be a list of device indices")
            unknown = sorted(set(peers) - set(topology))
            if unknown:
                raise reader.fail(f"{path}.devices[{i}].nvlink",
                                  f"peers {unknown} are not devices of this node (devices: {device_indices})")
        missing = sorted(set(mig) - set(topology))
        if missing:
            raise reader.fail(f"metadata.annotations.{ANNOTATION_GPU_MIG}",
                              f"names devices {missing} that {ANNOTATION_GPU_TOPOLOGY} does not list")
    elif mig:
        device_indices = sorted(set(range(whole + len(mig))) | set(mig))
    else:
        mig = _synthesised_mig(allocatable, whole)
        if mig:
            warnings.append(f"{reader.ref}: MIG devices synthesised from nvidia.com/mig-* counts; "
                            f"annotate {ANNOTATION_GPU_MIG} to give the real layout")
        device_indices = list(range(whole + len(mig)))

    devices = []
    for index in device_indices:
        info = topology.get(index, {})
        where = f"metadata.annotations.{ANNOTATION_GPU_TOPOLOGY}.devices[index={index}]"
        healthy = info.get("healthy", True)
        if not isinstance(healthy, bool):
            raise reader.fail(f"{where}.healthy", f"{healthy!r} must be true or false")
        devices.append(reader.build(
            where, GpuDevice,
            index=index,
            model=info.get("model", model),
            memory_mib=info.get("memoryMiB", memory),
            numa_node=info.get("numa", 0),
            nvlink_peers=tuple(sorted(info.get("nvlink", ()))),
            pcie_switch=info.get("pcieSwitch"),
            mig=mig.get(index, ()),
            healthy=healthy,
        ))
    # Kubernetes' count and Berth's device list must tell the same story, or the two filters
    # (NodeResourcesFit on counts, the GPU plugin on devices) would disagree about the node.
    plain_healthy = sum(1 for d in devices if not d.mig and d.healthy)
    if GPU in allocatable and devices and allocatable[GPU] != plain_healthy:
        warnings.append(f"{reader.ref}: status.allocatable.{GPU} is {allocatable[GPU]} but the node "
                        f"has {plain_healthy} healthy non-MIG GPU devices")
    return tuple(devices)


def node_from_manifest(obj: Mapping[str, Any], *, index: int | None = None,
                       warnings: list[str] | None = None) -> NodeInfo:
    """Convert a Node: allocatable/capacity, labels, taints, cordon, zone, capacity type, GPUs.

    ``allocatable`` falls back to ``capacity`` when only the latter is given (hand-written
    manifests rarely spell out both), and ``pods`` to the kubelet's default of 110. GPU devices come from the ``nvidia.com/gpu`` count and the
    GPU Feature Discovery labels, refined by ``berth.io/gpu-topology`` and ``berth.io/gpu-mig``.
    Observations that do not prevent conversion are appended to ``warnings``.
    """
    notes: list[str] = warnings if warnings is not None else []
    reader, meta, _, name = _meta(obj, "Node", index, namespaced=False)
    spec = reader.mapping(obj.get("spec"), "spec")
    status = reader.mapping(obj.get("status"), "status")
    labels = reader.string_map(meta.get("labels"), "metadata.labels")
    annotations = reader.string_map(meta.get("annotations"), "metadata.annotations")
    capacity = reader.quantities(status.get("capacity"), "status.capacity")
    allocatable = (reader.quantities(status.get("allocatable"), "status.allocatable")
                   if status.get("allocatable") is not None else dict(capacity))
    if "pods" not in allocatable and "pods" not in capacity:
        # Every kubelet reports a pod limit (110 unless configured); a hand-written node that
        # leaves it out means "the usual", not "no pods at all".
        allocatable["pods"] = DEFAULT_MAX_PODS
    taints = []
    for i, item in enumerate(reader.sequence(spec.get("taints"), "spec.taints")):
        item = reader.mapping(item, f"spec.taints[{i}]")
        taints.append(reader.build(f"spec.taints[{i}]", Taint, key=item.get("key"),
                                   value=item.get("value") or "", effect=item.get("effect")))
    unschedulable = spec.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        raise reader.fail("spec.unschedulable", f"{unschedulable!r} must be true or false")
    capacity_type = labels.get(LABEL_CAPACITY_TYPE, "on-demand")
    if capacity_type == "reserved":
        capacity_type = "on-demand"  # a capacity reservation is priced and kept like on-demand
    if capacity_type not in ("on-demand", "spot"):
        raise reader.fail(f"metadata.labels.{LABEL_CAPACITY_TYPE}",
                          f"{capacity_type!r} must be spot, on-demand or reserved")
    price = carbon = None
    if ANNOTATION_PRICE in annotations:
        price = _number(reader, annotations[ANNOTATION_PRICE], f"metadata.annotations.{ANNOTATION_PRICE}")
    if ANNOTATION_CARBON in annotations:
        carbon = _number(reader, annotations[ANNOTATION_CARBON], f"metadata.annotations.{ANNOTATION_CARBON}")
    gpus = _gpu_devices(reader, labels, annotations, allocatable, notes)
    # The device plugin advertises what the devices offer; a hand-written node that describes its
    # devices (topology / MIG annotations) but leaves the counts out gets them filled in, so that
    # NodeResourcesFit and the device plugins agree.
    if gpus and GPU not in allocatable and GPU not in capacity:
        allocatable[GPU] = sum(1 for d in gpus if d.healthy and not d.mig)
    if ANNOTATION_GPU_MIG in annotations:
        offered: dict[str, int] = {}
        for device in gpus:
            for piece in device.mig if device.healthy else ():
                resource = f"{MIG_PREFIX}{piece.profile}"
                offered[resource] = offered.get(resource, 0) + piece.count
        for resource, count in sorted(offered.items()):
            if resource not in allocatable and resource not in capacity:
                allocatable[resource] = count
    return reader.build(
        "", NodeInfo,
        name=name,
        uid=reader.string(meta.get("uid"), "metadata.uid") or _deterministic_uid("Node", "", name),
        labels=labels,
        annotations=annotations,
        taints=tuple(taints),
        unschedulable=unschedulable,
        capacity=capacity,
        allocatable=allocatable,
        gpus=gpus,
        capacity_type=capacity_type,
        price_per_hour=price,
        carbon_intensity=carbon,
        zone=labels.get(LABEL_ZONE),
        region=labels.get(LABEL_REGION),
    )


# --- policy objects ------------------------------------------------------------------------------


def namespace_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> NamespaceInfo:
    reader, meta, _, name = _meta(obj, "Namespace", index, namespaced=False)
    labels = reader.string_map(meta.get("labels"), "metadata.labels")
    labels["kubernetes.io/metadata.name"] = name
    return NamespaceInfo(name=name, labels=dict(sorted(labels.items())))


def priority_class_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> PriorityClassInfo:
    reader, _, _, name = _meta(obj, "PriorityClass", index, namespaced=False)
    value = reader.integer(obj.get("value"), "value")
    if value is None:
        raise reader.fail("value", "is required")
    if value > 1_000_000_000 and not name.startswith("system-"):
        raise reader.fail("value", f"{value} must be at most 1000000000 (larger values are reserved "
                                   "for system priority classes)")
    global_default = obj.get("globalDefault", False)
    if not isinstance(global_default, bool):
        raise reader.fail("globalDefault", f"{global_default!r} must be true or false")
    return reader.build("", PriorityClassInfo, name=name, value=value, global_default=global_default,
                        preemption_policy=obj.get("preemptionPolicy") or "PreemptLowerPriority")


def pod_group_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> PodGroupInfo:
    reader, _, namespace, name = _meta(obj, "PodGroup", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    min_member = reader.integer(spec.get("minMember"), "spec.minMember")
    if min_member is None:
        raise reader.fail("spec.minMember", "is required")
    return reader.build("spec", PodGroupInfo, namespace=namespace, name=name, min_member=min_member,
                        schedule_timeout_seconds=reader.integer(spec.get("scheduleTimeoutSeconds"),
                                                                "spec.scheduleTimeoutSeconds"))


def resource_quota_from_manifest(obj: Mapping[str, Any], *, index: int | None = None,
                                 warnings: list[str] | None = None) -> ResourceQuotaInfo:
    """Convert a ResourceQuota. Only the PriorityClass ``In`` scope selector is modelled; quotas
    with other scopes (``NotTerminating``, ``BestEffort``...) are kept but those scopes are
    ignored, with a warning, since they do not depend on anything Berth schedules by."""
    notes: list[str] = warnings if warnings is not None else []
    reader, _, namespace, name = _meta(obj, "ResourceQuota", index, namespaced=True)
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
    for i, expr in enumerate(reader.sequence(selector.get("matchExpressions"),
                                             "spec.scopeSelector.matchExpressions")):
        where = f"spec.scopeSelector.matchExpressions[{i}]"
        expr = reader.mapping(expr, where)
        scope_name = expr.get("scopeName")
        operator = expr.get("operator")
        if scope_name != "PriorityClass":
            notes.append(f"{reader.ref}: {where}.scopeName {scope_name} is not modelled; ignored")
            continue
        if operator != "In":
            raise reader.fail(f"{where}.operator",
                              f"{operator!r} is not supported for scopeName PriorityClass (only In)")
        values = reader.strings(expr.get("values"), f"{where}.values")
        if not values:
            raise reader.fail(f"{where}.values", "must name at least one PriorityClass")
        classes.extend(values)
    return reader.build("spec", ResourceQuotaInfo, namespace=namespace, name=name, hard=hard,
                        scope_priority_classes=tuple(sorted(set(classes))))


def limit_range_from_manifest(obj: Mapping[str, Any], *, index: int | None = None,
                              warnings: list[str] | None = None) -> LimitRangeInfo:
    """Convert a LimitRange, applying Kubernetes' object defaulting for ``Container`` items:
    ``default`` falls back to ``max``, ``defaultRequest`` to ``default`` and then to ``min``."""
    notes: list[str] = warnings if warnings is not None else []
    reader, _, namespace, name = _meta(obj, "LimitRange", index, namespaced=True)
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
        lists = {key: reader.quantities(item.get(key), f"{where}.{key}")
                 for key in ("default", "defaultRequest", "min", "max")}
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
        items.append(reader.build(where, LimitRangeItem, type=kind,
                                  default=dict(sorted(lists["default"].items())),
                                  default_request=dict(sorted(lists["defaultRequest"].items())),
                                  min=lists["min"], max=lists["max"]))
    return reader.build("spec", LimitRangeInfo, namespace=namespace, name=name, limits=tuple(items))


def pdb_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> PodDisruptionBudgetInfo:
    reader, _, namespace, name = _meta(obj, "PodDisruptionBudget", index, namespaced=True)
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
    selector = _label_selector(reader, spec.get("selector"), "spec.selector") or LabelSelector()
    return PodDisruptionBudgetInfo(namespace=namespace, name=name, selector=selector, **values)


def agent_pool_from_manifest(obj: Mapping[str, Any], *, index: int | None = None) -> AgentPoolManifest:
    """An AgentPool, its spec kept as written after validating it against
    :class:`berth.schemas.agentpool.AgentPoolSpec` (every problem named by its path)."""
    from berth.schemas.agentpool import AgentPoolSpec, error_text

    reader, _, namespace, name = _meta(obj, "AgentPool", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    try:
        AgentPoolSpec.model_validate(spec)
    except ValidationError as exc:
        raise reader.fail("spec", error_text(exc, prefix="").removeprefix("spec: ")) from exc
    return AgentPoolManifest(namespace=namespace, name=name, spec=spec)


# --- whole files ---------------------------------------------------------------------------------

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
}


def _flatten(documents: Iterable[Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """Number documents from 1 and expand ``v1 List`` objects (``kind: List``/``*List``)."""
    out: list[tuple[int, Mapping[str, Any]]] = []
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


def load_documents(documents: Iterable[Any]) -> ManifestBundle:
    """Convert a file's objects (YAML documents, or the items of a ``v1 List``).

    Order of work: Namespaces, PriorityClasses and LimitRanges first (pods depend on them), then
    everything else; within a kind the input order is kept (it is the scheduling queue's tie
    breaker). Raises the first :class:`ManifestError`; an object named twice is an error too.
    """
    warnings: list[str] = []
    flat = _flatten(documents)
    seen: set[tuple[str, str, str]] = set()
    by_kind: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for number, doc in flat:
        kind = doc.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ManifestError(f"document {number}", "kind", "is required")
        if kind not in _API_VERSIONS:
            raise ManifestError(f"document {number}", "kind",
                                f"{kind!r} is not supported (one of {', '.join(sorted(_API_VERSIONS))})")
        api_version = doc.get("apiVersion")
        if api_version not in _API_VERSIONS[kind]:
            raise ManifestError(f"{kind} (document {number})", "apiVersion",
                                f"{api_version!r} must be {' or '.join(sorted(_API_VERSIONS[kind]))}")
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
        namespaced = kind not in ("Namespace", "Node", "PriorityClass")
        key = (kind, (meta.get("namespace") or "default") if namespaced else "", str(meta.get("name")))
        if key in seen:
            ref = f"{kind} {key[1]}/{key[2]}" if namespaced else f"{kind} {key[2]}"
            raise ManifestError(ref, "metadata.name", f"is defined twice (again in document {number})")
        seen.add(key)
        by_kind.setdefault(kind, []).append((number, doc))

    def each(kind: str, convert: Callable[..., Any], **extra: Any) -> list[Any]:
        return [convert(doc, index=number, **extra) for number, doc in by_kind.get(kind, [])]

    namespaces = each("Namespace", namespace_from_manifest)
    priority_classes = each("PriorityClass", priority_class_from_manifest)
    defaults = [c.name for c in priority_classes if c.global_default]
    if len(defaults) > 1:
        raise ManifestError(f"PriorityClass {defaults[1]}", "globalDefault",
                            f"only one PriorityClass may be the global default (also {defaults[0]})")
    limit_ranges = each("LimitRange", limit_range_from_manifest, warnings=warnings)
    classes = {c.name: c for c in priority_classes}
    ranges_by_ns: dict[str, list[LimitRangeInfo]] = {}
    for limit_range in sorted(limit_ranges, key=lambda r: r.name):
        ranges_by_ns.setdefault(limit_range.namespace, []).append(limit_range)
    pods = [pod_from_manifest(doc, priority_classes=classes,
                              limit_ranges=ranges_by_ns.get((doc.get("metadata") or {}).get("namespace")
                                                            or "default", ()), index=number)
            for number, doc in by_kind.get("Pod", [])]
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
        warnings=tuple(warnings),
    )
