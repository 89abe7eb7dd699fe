"""Pods: containers' requests and limits after API defaulting and LimitRanger admission, priority
as the Priority admission plugin resolves it, Berth's GPU-share annotations, scheduling
constraints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from berth.core.admission import (
    ContainerResources,
    PodResources,
    apply_limit_ranges,
    forbidden,
    limit_range_message,
)
from berth.schemas.cluster import OwnerReference, PodInfo
from berth.schemas.policy import LimitRangeInfo, PriorityClassInfo

from .common import (
    ANNOTATION_GPU_DEVICES,
    ANNOTATION_GPU_FRACTION,
    ANNOTATION_GPU_LOCALITY,
    ANNOTATION_GPU_MEMORY,
    GPU,
    LABEL_POD_GROUP,
    NATIVE_RESOURCES,
    FieldReader,
    deterministic_uid,
    object_meta,
    parse_timestamp,
)
from .selectors import read_affinity, read_spread_constraints, read_tolerations

GPU_LOCALITIES = ("any", "same-node", "same-socket", "nvlink")


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
    scheduling_gates: tuple[str, ...] = ()
    """``spec.schedulingGates`` by name: while any remain, no scheduler may place the pod (the
    apiserver marks it ``PodScheduled=False``, reason ``SchedulingGated``)."""


@dataclass(frozen=True)
class _Priority:
    """A pod's priority as admission resolves it."""

    value: int
    class_name: str | None
    preemption_policy: str


@dataclass(frozen=True)
class _GpuShare:
    """What Berth's GPU annotations ask of a pod (and, once bound, which devices it holds)."""

    fraction_milli: int | None
    memory_mib: int | None
    locality: str
    devices: tuple[int, ...]


def _containers(reader: FieldReader, raw: Any, path: str, *, init: bool) -> tuple[ContainerResources, ...]:
    out = []
    for i, item in enumerate(reader.sequence(raw, path)):
        where = f"{path}[{i}]"
        item = reader.mapping(item, where)
        name = reader.string(item.get("name"), f"{where}.name", required=True) or ""
        resources = reader.mapping(item.get("resources"), f"{where}.resources")
        requests = reader.quantities(resources.get("requests"), f"{where}.resources.requests")
        limits = reader.quantities(resources.get("limits"), f"{where}.resources.limits")
        for resource in sorted(set(requests) & set(limits)):
            if resource in NATIVE_RESOURCES or resource.startswith("hugepages-"):
                if requests[resource] > limits[resource]:
                    raise reader.fail(
                        f"{where}.resources.requests.{resource}", f"must be less than or equal to {resource} limit"
                    )
            elif requests[resource] != limits[resource]:
                raise reader.fail(f"{where}.resources.requests.{resource}", f"must be equal to {resource} limit")
        for resource in sorted(set(requests) - set(limits)):
            if resource not in NATIVE_RESOURCES and not resource.startswith("hugepages-"):
                raise reader.fail(
                    f"{where}.resources.limits", f"Limit must be set for non overcommitable resources: {resource}"
                )
        # API defaulting: a resource with a limit but no request requests its limit.
        for resource, amount in limits.items():
            requests.setdefault(resource, amount)
        restart_policy = reader.string(item.get("restartPolicy"), f"{where}.restartPolicy")
        if restart_policy is not None and (not init or restart_policy != "Always"):
            raise reader.fail(
                f"{where}.restartPolicy", "only init containers may set restartPolicy, and only to Always"
            )
        out.append(
            ContainerResources(
                name=name,
                requests=dict(sorted(requests.items())),
                limits=dict(sorted(limits.items())),
                restartable=restart_policy == "Always",
            )
        )
    return tuple(out)


def _gpu_fraction(reader: FieldReader, text: str, path: str) -> int:
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


def _device_list(reader: FieldReader, text: str, path: str) -> tuple[int, ...]:
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


def _admitted_resources(
    reader: FieldReader, spec: Mapping[str, Any], name: str, limit_ranges: Sequence[LimitRangeInfo]
) -> tuple[PodResources, str | None]:
    """The pod's containers' resources after LimitRange defaults, and LimitRanger's refusal
    message (None when the pod is admitted)."""
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
    return resources, rejection


def _priority(reader: FieldReader, spec: Mapping[str, Any], classes: Mapping[str, PriorityClassInfo]) -> _Priority:
    """Resolve ``priorityClassName``/``priority``/``preemptionPolicy`` as the Priority admission
    plugin does: a named class must exist, an unnamed pod without an explicit priority gets the
    global default class (the lowest, should there be several), and an explicit priority must
    agree with the class."""
    class_name = reader.string(spec.get("priorityClassName"), "spec.priorityClassName") or None
    explicit = reader.integer(spec.get("priority"), "spec.priority")
    preemption_policy = reader.string(spec.get("preemptionPolicy"), "spec.preemptionPolicy")
    if preemption_policy not in (None, "PreemptLowerPriority", "Never"):
        raise reader.fail("spec.preemptionPolicy", f"{preemption_policy!r} must be PreemptLowerPriority or Never")
    pclass: PriorityClassInfo | None = None
    if class_name:
        pclass = classes.get(class_name)
        if pclass is None:
            raise reader.fail("spec.priorityClassName", f"no PriorityClass with name {class_name} was found")
    elif explicit is None:
        defaults = [c for c in classes.values() if c.global_default]
        pclass = min(defaults, key=lambda c: c.value) if defaults else None
        class_name = pclass.name if pclass else None
    value = explicit if explicit is not None else (pclass.value if pclass else 0)
    if explicit is not None and pclass is not None and explicit != pclass.value:
        raise reader.fail(
            "spec.priority",
            f"the integer value of priority ({explicit}) must not be provided in pod spec; "
            f"priority admission controller computed {pclass.value} from the given "
            "PriorityClass name",
        )
    if preemption_policy is None:
        preemption_policy = pclass.preemption_policy if pclass else "PreemptLowerPriority"
    return _Priority(value=value, class_name=class_name, preemption_policy=preemption_policy)


def _gpu_share(reader: FieldReader, annotations: Mapping[str, str], requests: Mapping[str, int]) -> _GpuShare:
    """Read Berth's GPU annotations; a share of one GPU excludes a whole-GPU request."""
    fraction = None
    if ANNOTATION_GPU_FRACTION in annotations:
        fraction = _gpu_fraction(
            reader, annotations[ANNOTATION_GPU_FRACTION], f"metadata.annotations.{ANNOTATION_GPU_FRACTION}"
        )
    gpu_memory = None
    if ANNOTATION_GPU_MEMORY in annotations:
        text = annotations[ANNOTATION_GPU_MEMORY].strip()
        if not text.isdigit() or int(text) == 0:
            raise reader.fail(
                f"metadata.annotations.{ANNOTATION_GPU_MEMORY}", f"{text!r} must be a positive whole number of MiB"
            )
        gpu_memory = int(text)
    if (fraction is not None or gpu_memory is not None) and requests.get(GPU, 0):
        raise reader.fail(
            f"metadata.annotations.{ANNOTATION_GPU_FRACTION}",
            f"a GPU share (gpu-fraction/gpu-memory) and a {GPU} request are mutually "
            "exclusive: request whole GPUs or a share of one, not both",
        )
    locality = annotations.get(ANNOTATION_GPU_LOCALITY, "any")
    if locality not in GPU_LOCALITIES:
        raise reader.fail(
            f"metadata.annotations.{ANNOTATION_GPU_LOCALITY}",
            f"{locality!r} must be one of {', '.join(GPU_LOCALITIES)}",
        )
    devices: tuple[int, ...] = ()
    if ANNOTATION_GPU_DEVICES in annotations:
        devices = _device_list(
            reader, annotations[ANNOTATION_GPU_DEVICES], f"metadata.annotations.{ANNOTATION_GPU_DEVICES}"
        )
    return _GpuShare(fraction_milli=fraction, memory_mib=gpu_memory, locality=locality, devices=devices)


def _owner(reader: FieldReader, meta: Mapping[str, Any]) -> OwnerReference | None:
    """The controlling owner reference, else the first one listed, else None."""
    owner = None
    for i, ref in enumerate(reader.sequence(meta.get("ownerReferences"), "metadata.ownerReferences")):
        ref = reader.mapping(ref, f"metadata.ownerReferences[{i}]")
        if ref.get("controller") or owner is None:
            owner = reader.build(
                f"metadata.ownerReferences[{i}]",
                OwnerReference,
                api_version=ref.get("apiVersion") or "",
                kind=ref.get("kind"),
                name=ref.get("name"),
                uid=ref.get("uid") or "",
                controller=bool(ref.get("controller")),
            )
    return owner


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
    reader, meta, namespace, name = object_meta(obj, "Pod", index, namespaced=True)
    spec = reader.mapping(obj.get("spec"), "spec")
    status = reader.mapping(obj.get("status"), "status")
    labels = reader.string_map(meta.get("labels"), "metadata.labels")
    annotations = reader.string_map(meta.get("annotations"), "metadata.annotations")
    resources, rejection = _admitted_resources(reader, spec, name, limit_ranges)
    requests = resources.effective_requests()
    priority = _priority(reader, spec, priority_classes or {})
    share = _gpu_share(reader, annotations, requests)
    owner = _owner(reader, meta)
    node_name = reader.string(spec.get("nodeName"), "spec.nodeName") or None
    phase = reader.string(status.get("phase"), "status.phase") or ("Running" if node_name else "Pending")
    pod = reader.build(
        "",
        PodInfo,
        uid=reader.string(meta.get("uid"), "metadata.uid") or deterministic_uid("Pod", namespace, name),
        namespace=namespace,
        name=name,
        labels=labels,
        annotations=annotations,
        scheduler_name=reader.string(spec.get("schedulerName"), "spec.schedulerName") or "default-scheduler",
        priority=priority.value,
        priority_class_name=priority.class_name,
        preemption_policy=priority.preemption_policy,
        requests=requests,
        gpu_fraction_milli=share.fraction_milli,
        gpu_memory_mib=share.memory_mib,
        gpu_locality=share.locality,
        node_selector=reader.string_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        affinity=read_affinity(reader, spec.get("affinity"), "spec.affinity"),
        tolerations=read_tolerations(reader, spec.get("tolerations"), "spec.tolerations"),
        topology_spread_constraints=read_spread_constraints(
            reader, spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints"
        ),
        pod_group=labels.get(LABEL_POD_GROUP) or None,
        owner=owner,
        node_name=node_name,
        gpu_devices=share.devices,
        phase=phase,
        creation_time=parse_timestamp(reader, meta.get("creationTimestamp"), "metadata.creationTimestamp"),
    )
    return PodManifest(
        pod=pod, resources=resources, rejection=rejection, scheduling_gates=scheduling_gates(reader, spec)
    )


def scheduling_gates(reader: FieldReader, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of ``spec.schedulingGates`` (each an object with a ``name``)."""
    gates = []
    for i, item in enumerate(reader.sequence(spec.get("schedulingGates"), "spec.schedulingGates")):
        gate = reader.mapping(item, f"spec.schedulingGates[{i}]")
        name = reader.string(gate.get("name"), f"spec.schedulingGates[{i}].name")
        if not name:
            raise reader.fail(f"spec.schedulingGates[{i}].name", "a scheduling gate needs a name")
        gates.append(name)
    return tuple(gates)
