"""Nodes: allocatable and capacity, labels, taints, cordon, zone, capacity type, price, carbon
intensity and GPU devices (:mod:`.gpus`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from berth.schemas.cluster import GpuDevice, NodeInfo, Taint

from ..capacity import SPOT_LABELS, SpotLabel, is_spot
from .common import (
    ANNOTATION_CARBON,
    ANNOTATION_GPU_MIG,
    ANNOTATION_PRICE,
    DEFAULT_MAX_PODS,
    GPU,
    LABEL_CAPACITY_TYPE,
    LABEL_REGION,
    LABEL_ZONE,
    MIG_PREFIX,
    FieldReader,
    deterministic_uid,
    object_meta,
)
from .gpus import gpu_devices


def _number(reader: FieldReader, text: str, path: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise reader.fail(path, f"{text!r} is not a number") from None
    if value != value or value < 0 or value == float("inf"):
        raise reader.fail(path, f"{text!r} must be a non-negative number")
    return value


def _annotated_number(reader: FieldReader, annotations: Mapping[str, str], key: str) -> float | None:
    if key not in annotations:
        return None
    return _number(reader, annotations[key], f"metadata.annotations.{key}")


def _node_resources(reader: FieldReader, status: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """``capacity`` and ``allocatable``; allocatable falls back to capacity, and ``pods`` to the
    kubelet's default."""
    capacity = reader.quantities(status.get("capacity"), "status.capacity")
    allocatable = (
        reader.quantities(status.get("allocatable"), "status.allocatable")
        if status.get("allocatable") is not None
        else dict(capacity)
    )
    if "pods" not in allocatable and "pods" not in capacity:
        # Every kubelet reports a pod limit (110 unless configured); a hand-written node that
        # leaves it out means "the usual", not "no pods at all".
        allocatable["pods"] = DEFAULT_MAX_PODS
    return capacity, allocatable


def _taints(reader: FieldReader, spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    taints = []
    for i, item in enumerate(reader.sequence(spec.get("taints"), "spec.taints")):
        item = reader.mapping(item, f"spec.taints[{i}]")
        taints.append(
            reader.build(
                f"spec.taints[{i}]",
                Taint,
                key=item.get("key"),
                value=item.get("value") or "",
                effect=item.get("effect"),
            )
        )
    return tuple(taints)


def _capacity_type(reader: FieldReader, labels: Mapping[str, str], spot_labels: Sequence[SpotLabel]) -> str:
    """``spot`` when any provider's spot label says so (:mod:`berth.kube.capacity`), else
    ``on-demand``. Karpenter's label must hold one of its values: a capacity reservation
    (``reserved``) is priced and kept like on-demand."""
    karpenter = labels.get(LABEL_CAPACITY_TYPE, "on-demand")
    if karpenter not in ("on-demand", "spot", "reserved"):
        raise reader.fail(
            f"metadata.labels.{LABEL_CAPACITY_TYPE}", f"{karpenter!r} must be spot, on-demand or reserved"
        )
    return "spot" if is_spot(labels, spot_labels) else "on-demand"


def _advertise_device_counts(
    gpus: tuple[GpuDevice, ...],
    annotations: Mapping[str, str],
    allocatable: dict[str, int],
    capacity: Mapping[str, int],
) -> None:
    """Fill in the counts a device plugin would advertise for the described devices, where the
    node states neither allocatable nor capacity for them.

    A hand-written node that describes its devices (topology / MIG annotations) but leaves the
    counts out gets them, so that NodeResourcesFit and the device plugins agree.
    """
    if gpus and GPU not in allocatable and GPU not in capacity:
        allocatable[GPU] = sum(1 for d in gpus if d.healthy and not d.mig)
    if ANNOTATION_GPU_MIG not in annotations:
        return
    offered: dict[str, int] = {}
    for device in gpus:
        for piece in device.mig if device.healthy else ():
            resource = f"{MIG_PREFIX}{piece.profile}"
            offered[resource] = offered.get(resource, 0) + piece.count
    for resource, count in sorted(offered.items()):
        if resource not in allocatable and resource not in capacity:
            allocatable[resource] = count


def node_from_manifest(
    obj: Mapping[str, Any],
    *,
    index: int | None = None,
    warnings: list[str] | None = None,
    spot_labels: Sequence[SpotLabel] = SPOT_LABELS,
) -> NodeInfo:
    """Convert a Node: allocatable/capacity, labels, taints, cordon, zone, capacity type, GPUs.

    ``allocatable`` falls back to ``capacity`` when only the latter is given (hand-written
    manifests rarely spell out both), and ``pods`` to the kubelet's default of 110. GPU devices
    come from the ``nvidia.com/gpu`` count and the GPU Feature Discovery labels, refined by
    ``berth.io/gpu-topology`` and ``berth.io/gpu-mig``. Observations that do not prevent
    conversion are appended to ``warnings``. ``spot_labels``: the labels that mark a spot node.
    """
    notes: list[str] = warnings if warnings is not None else []
    reader, meta, _, name = object_meta(obj, "Node", index, namespaced=False)
    spec = reader.mapping(obj.get("spec"), "spec")
    status = reader.mapping(obj.get("status"), "status")
    labels = reader.string_map(meta.get("labels"), "metadata.labels")
    annotations = reader.string_map(meta.get("annotations"), "metadata.annotations")
    capacity, allocatable = _node_resources(reader, status)
    taints = _taints(reader, spec)
    unschedulable = spec.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        raise reader.fail("spec.unschedulable", f"{unschedulable!r} must be true or false")
    capacity_type = _capacity_type(reader, labels, spot_labels)
    price = _annotated_number(reader, annotations, ANNOTATION_PRICE)
    carbon = _annotated_number(reader, annotations, ANNOTATION_CARBON)
    gpus = gpu_devices(reader, labels, annotations, allocatable, notes)
    _advertise_device_counts(gpus, annotations, allocatable, capacity)
    return reader.build(
        "",
        NodeInfo,
        name=name,
        uid=reader.string(meta.get("uid"), "metadata.uid") or deterministic_uid("Node", "", name),
        labels=labels,
        annotations=annotations,
        taints=taints,
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
