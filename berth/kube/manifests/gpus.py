"""A node's GPU devices: whole GPUs counted by ``nvidia.com/gpu`` and GPU Feature Discovery
labels, refined by ``berth.io/gpu-topology`` (NUMA, NVLink, PCIe switch, health per device) and
``berth.io/gpu-mig`` (MIG slices per device), or MIG devices synthesised from
``nvidia.com/mig-<profile>`` counts when the layout is not annotated."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from berth.schemas.cluster import GpuDevice, MigSlice

from .common import (
    ANNOTATION_GPU_MIG,
    ANNOTATION_GPU_TOPOLOGY,
    GPU,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    MIG_PREFIX,
    MIG_SLICES_PER_GPU,
    FieldReader,
)

_TOPOLOGY_KEYS = {"index", "numa", "nvlink", "pcieSwitch", "healthy", "model", "memoryMiB"}


def _json_annotation(reader: FieldReader, annotations: Mapping[str, str], key: str) -> Any:
    try:
        return json.loads(annotations[key])
    except json.JSONDecodeError as exc:
        raise reader.fail(f"metadata.annotations.{key}", f"is not valid JSON ({exc.msg} at char {exc.pos})") from None


def _mig_layout(reader: FieldReader, annotations: Mapping[str, str]) -> dict[int, tuple[MigSlice, ...]]:
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
        if used > MIG_SLICES_PER_GPU:
            raise reader.fail(f"{path}.{key}", f"uses {used} compute slices; a GPU has {MIG_SLICES_PER_GPU}")
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
            profile = resource[len(MIG_PREFIX) :]
            if re.fullmatch(r"[0-9]+g\.[0-9]+gb", profile):
                wanted += [profile] * allocatable[resource]
    wanted.sort(key=lambda p: (-int(p.split("g.")[0]), p))
    devices: list[dict[str, int]] = []
    free: list[int] = []
    for profile in wanted:
        size = int(profile.split("g.")[0])
        for i, room in enumerate(free):  # noqa: B007 -- i is the device found, read after the loop
            if room >= size:
                break
        else:
            devices.append({})
            free.append(MIG_SLICES_PER_GPU)
            i = len(devices) - 1
        devices[i][profile] = devices[i].get(profile, 0) + 1
        free[i] -= size
    return {
        first_index + i: tuple(MigSlice(profile=p, count=c) for p, c in sorted(d.items()))
        for i, d in enumerate(devices)
    }


def _gpu_labels(reader: FieldReader, labels: Mapping[str, str], allocatable: Mapping[str, int]) -> tuple[str, int, int]:
    """The GPU model, memory (MiB) and whole-GPU count that the node's labels and allocatable
    give every device not described otherwise."""
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
    return model, memory, whole or 0


def _topology(reader: FieldReader, annotations: Mapping[str, str]) -> dict[int, dict[str, Any]]:
    """The ``berth.io/gpu-topology`` annotation's devices by index, each checked for unknown
    fields, a valid unique index and NVLink peers that are devices of this node."""
    path = f"metadata.annotations.{ANNOTATION_GPU_TOPOLOGY}"
    raw = _json_annotation(reader, annotations, ANNOTATION_GPU_TOPOLOGY)
    if not isinstance(raw, dict) or not isinstance(raw.get("devices"), list):
        raise reader.fail(path, 'must be a JSON object like {"devices": [{"index": 0, "numa": 0, "nvlink": [1]}]}')
    topology: dict[int, dict[str, Any]] = {}
    for i, device in enumerate(raw["devices"]):
        where = f"{path}.devices[{i}]"
        if not isinstance(device, dict):
            raise reader.fail(where, "must be an object")
        unknown = sorted(set(device) - _TOPOLOGY_KEYS)
        if unknown:
            raise reader.fail(f"{where}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(_TOPOLOGY_KEYS))})")
        index = device.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise reader.fail(f"{where}.index", f"{index!r} must be a non-negative integer")
        if index in topology:
            raise reader.fail(f"{where}.index", f"device {index} is listed twice")
        topology[index] = device
    _check_nvlink_peers(reader, raw["devices"], topology, path)
    return topology


def _check_nvlink_peers(
    reader: FieldReader, raw_devices: list[dict[str, Any]], topology: Mapping[int, Any], path: str
) -> None:
    for i, device in enumerate(raw_devices):
        peers = device.get("nvlink", [])
        if not isinstance(peers, list) or any(isinstance(p, bool) or not isinstance(p, int) for p in peers):
            raise reader.fail(f"{path}.devices[{i}].nvlink", f"{peers!r} must be a list of device indices")
        unknown = sorted(set(peers) - set(topology))
        if unknown:
            raise reader.fail(
                f"{path}.devices[{i}].nvlink",
                f"peers {unknown} are not devices of this node (devices: {sorted(topology)})",
            )


def _gpu_device(
    reader: FieldReader, index: int, info: Mapping[str, Any], model: str, memory: int, mig: tuple[MigSlice, ...]
) -> GpuDevice:
    """One device: its topology entry where there is one, else the node-wide model and memory."""
    where = f"metadata.annotations.{ANNOTATION_GPU_TOPOLOGY}.devices[index={index}]"
    healthy = info.get("healthy", True)
    if not isinstance(healthy, bool):
        raise reader.fail(f"{where}.healthy", f"{healthy!r} must be true or false")
    return reader.build(
        where,
        GpuDevice,
        index=index,
        model=info.get("model", model),
        memory_mib=info.get("memoryMiB", memory),
        numa_node=info.get("numa", 0),
        nvlink_peers=tuple(sorted(info.get("nvlink", ()))),
        pcie_switch=info.get("pcieSwitch"),
        mig=mig,
        healthy=healthy,
    )


def gpu_devices(
    reader: FieldReader,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    allocatable: Mapping[str, int],
    warnings: list[str],
) -> tuple[GpuDevice, ...]:
    """A node's GPU devices, in index order; observations that do not prevent conversion (MIG
    devices synthesised, a GPU count that disagrees with the devices) go to ``warnings``."""
    model, memory, whole = _gpu_labels(reader, labels, allocatable)
    mig = _mig_layout(reader, annotations)
    topology: dict[int, dict[str, Any]] = {}
    if ANNOTATION_GPU_TOPOLOGY in annotations:
        topology = _topology(reader, annotations)
        missing = sorted(set(mig) - set(topology))
        if missing:
            raise reader.fail(
                f"metadata.annotations.{ANNOTATION_GPU_MIG}",
                f"names devices {missing} that {ANNOTATION_GPU_TOPOLOGY} does not list",
            )
        device_indices = sorted(topology)
    elif mig:
        device_indices = sorted(set(range(whole + len(mig))) | set(mig))
    else:
        mig = _synthesised_mig(allocatable, whole)
        if mig:
            warnings.append(
                f"{reader.ref}: MIG devices synthesised from nvidia.com/mig-* counts; "
                f"annotate {ANNOTATION_GPU_MIG} to give the real layout"
            )
        device_indices = list(range(whole + len(mig)))
    devices = tuple(
        _gpu_device(reader, index, topology.get(index, {}), model, memory, mig.get(index, ()))
        for index in device_indices
    )
    # Kubernetes' count and Berth's device list must tell the same story, or the two filters
    # (NodeResourcesFit on counts, the GPU plugin on devices) would disagree about the node.
    plain_healthy = sum(1 for d in devices if not d.mig and d.healthy)
    if GPU in allocatable and devices and allocatable[GPU] != plain_healthy:
        warnings.append(
            f"{reader.ref}: status.allocatable.{GPU} is {allocatable[GPU]} but the node "
            f"has {plain_healthy} healthy non-MIG GPU devices"
        )
    return devices
