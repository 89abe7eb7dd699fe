"""The Alibaba GPU cluster trace (cluster-trace-gpu-v2023) as a workload.

Node list columns ``sn,cpu_milli,memory_mib,gpu,model``; pod list columns ``name,cpu_milli,
memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time``
(times in seconds). The mapping to Berth's models:

- a node gets ``gpu`` devices of ``model`` with no NVLink peers and one NUMA node (the trace
  says nothing about topology), the GPU Feature Discovery labels ``nvidia.com/gpu.product``,
  ``nvidia.com/gpu.count`` and, for models whose memory is public, ``nvidia.com/gpu.memory``;
  allocatable ``cpu``, ``memory``, ``nvidia.com/gpu`` and 110 pods (kubelet's default);
- a pod with ``gpu_milli`` = 1000 requests ``num_gpu`` whole GPUs (``nvidia.com/gpu``); with
  ``gpu_milli`` < 1000 it asks for that share of one GPU (``gpu_fraction_milli`` and the
  ``gpu-fraction`` annotation); ``num_gpu`` = 0 is CPU-only. A share spread over several GPUs
  cannot be expressed and is an error naming the row;
- ``gpu_spec`` (models separated by ``|``) becomes a required node affinity
  ``nvidia.com/gpu.product In (...)``;
- the pod arrives at ``creation_time`` minus the earliest creation time; if the trace scheduled
  it, it runs ``deletion_time - scheduled_time`` seconds after binding, otherwise forever;
- ``qos`` and ``pod_phase`` become labels (``alibaba.com/qos``, ``alibaba.com/trace-phase``) for
  analysis; they do not change priority, so the scheduler sees every pod as equal, as in the
  published FGD experiments. Every pod has ``schedulerName: berth`` in namespace ``default``.
"""

from __future__ import annotations

import csv
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from berth.schemas.cluster import (
    Affinity,
    GpuDevice,
    NodeAffinity,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodInfo,
)
from pydantic import ValidationError

from berth.kube.manifests import EPOCH, LABEL_GPU_COUNT, LABEL_GPU_MEMORY, LABEL_GPU_PRODUCT

from .model import TimedPod, Workload, WorkloadError, sort_pods

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
GPU_NODE_LIST = "openb_node_list_gpu_node.csv"
DEFAULT_POD_LIST = "openb_pod_list_default.csv"
NAMESPACE = "default"
MAX_PODS_PER_NODE = 110

GPU_MEMORY_MIB = {"P100": 16384, "T4": 15360, "V100M16": 16384, "V100M32": 32768, "A10": 24576}
"""Public memory sizes of the trace's models; G2/G3 are Alibaba-internal and stay unlabelled."""

_UID_NAMESPACE = uuid.UUID("0d7c9a43-3f1e-4b9a-8b6e-a11baba02023")


def _rows(path: Path, columns: tuple[str, ...]) -> Iterable[tuple[int, Mapping[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise WorkloadError(f"{path}: missing column(s) {', '.join(missing)}; expected {','.join(columns)}")
        yield from enumerate(reader, start=2)


def _int(path: Path, line: int, row: Mapping[str, str], column: str) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(text)
    except ValueError:
        raise WorkloadError(f"{path}:{line}: {column}: {text!r} is not a whole number") from None
    if value < 0:
        raise WorkloadError(f"{path}:{line}: {column}: {value} must not be negative")
    return value


def _name(text: str) -> str:
    # Kubernetes names are lowercase; the trace's are otherwise valid already.
    return text.strip().lower()


def _node(path: Path, line: int, row: Mapping[str, str]) -> NodeInfo:
    name = _name(row["sn"])
    gpus = _int(path, line, row, "gpu")
    model = (row.get("model") or "").strip()
    memory_mib = GPU_MEMORY_MIB.get(model, 0)
    labels: dict[str, str] = {}
    if gpus:
        labels[LABEL_GPU_PRODUCT] = model
        labels[LABEL_GPU_COUNT] = str(gpus)
        if memory_mib:
            labels[LABEL_GPU_MEMORY] = str(memory_mib)
    resources = {
        "cpu": _int(path, line, row, "cpu_milli"),
        "memory": _int(path, line, row, "memory_mib") * 2**20,
        "pods": MAX_PODS_PER_NODE,
    }
    if gpus:
        resources["nvidia.com/gpu"] = gpus
    try:
        return NodeInfo(
            name=name,
            uid=str(uuid.uuid5(_UID_NAMESPACE, f"node/{name}")),
            labels=labels,
            capacity=resources,
            allocatable=dict(resources),
            gpus=tuple(GpuDevice(index=i, model=model, memory_mib=memory_mib) for i in range(gpus)),
        )
    except ValidationError as exc:
        raise WorkloadError(f"{path}:{line}: node {name!r}: {exc.errors(include_url=False)[0]['msg']}") from None


def _pod(path: Path, line: int, row: Mapping[str, str], first_creation: int) -> TimedPod:
    name = _name(row["name"])
    num_gpu = _int(path, line, row, "num_gpu")
    gpu_milli = _int(path, line, row, "gpu_milli")
    requests = {"cpu": _int(path, line, row, "cpu_milli"), "memory": _int(path, line, row, "memory_mib") * 2**20}
    annotations: dict[str, str] = {}
    fraction = None
    if num_gpu and gpu_milli >= 1000:
        requests["nvidia.com/gpu"] = num_gpu
    elif num_gpu and 0 < gpu_milli < 1000:
        if num_gpu > 1:
            raise WorkloadError(
                f"{path}:{line}: pod {name!r}: a share of {gpu_milli} milli on each of "
                f"{num_gpu} GPUs cannot be expressed; a GPU share is of one device"
            )
        fraction = gpu_milli
        annotations["gpu-fraction"] = f"{gpu_milli / 1000:g}"
    models = tuple(m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip())
    affinity = None
    if models:
        affinity = Affinity(
            node_affinity=NodeAffinity(
                required=(
                    NodeSelectorTerm(
                        match_expressions=(
                            NodeSelectorRequirement(key=LABEL_GPU_PRODUCT, operator="In", values=models),
                        )
                    ),
                )
            )
        )
    labels = {
        "alibaba.com/qos": (row.get("qos") or "").strip() or "unknown",
        "alibaba.com/trace-phase": (row.get("pod_phase") or "").strip() or "unknown",
    }
    created = _int(path, line, row, "creation_time")
    scheduled_text = (row.get("scheduled_time") or "").strip()
    run_s = None
    if scheduled_text and (row.get("deletion_time") or "").strip():
        run_s = float(max(0, _int(path, line, row, "deletion_time") - _int(path, line, row, "scheduled_time")))
    try:
        pod = PodInfo(
            uid=str(uuid.uuid5(_UID_NAMESPACE, f"pod/{NAMESPACE}/{name}")),
            namespace=NAMESPACE,
            name=name,
            labels=labels,
            annotations=annotations,
            scheduler_name="berth",
            requests=requests,
            gpu_fraction_milli=fraction,
            affinity=affinity,
            creation_time=EPOCH,
        )
    except ValidationError as exc:
        raise WorkloadError(f"{path}:{line}: pod {name!r}: {exc.errors(include_url=False)[0]['msg']}") from None
    return TimedPod(pod=pod, at_s=float(created - first_creation), run_s=run_s)


def load_nodes(path: Path) -> tuple[NodeInfo, ...]:
    return tuple(_node(path, line, row) for line, row in _rows(path, NODE_COLUMNS))


def load_pods(path: Path) -> tuple[TimedPod, ...]:
    rows = list(_rows(path, POD_COLUMNS))
    first = min((_int(path, line, row, "creation_time") for line, row in rows), default=0)
    return sort_pods([_pod(path, line, row, first) for line, row in rows])


def load_trace(pods_csv: Path, nodes_csv: Path | None = None) -> Workload:
    """The trace's pods on its nodes. Without ``nodes_csv``, the GPU node list next to the pod
    list (``openb_node_list_gpu_node.csv``) is used, as in the published experiments."""
    nodes_csv = nodes_csv or pods_csv.with_name(GPU_NODE_LIST)
    if not nodes_csv.is_file():
        raise WorkloadError(f"{pods_csv}: needs a node list; none at {nodes_csv} (give one with --nodes-csv)")
    return Workload(name=pods_csv.name, nodes=load_nodes(nodes_csv), pods=load_pods(pods_csv))


def is_pod_list(path: Path) -> bool:
    """Whether a CSV file has the pod list's header (as opposed to the node list's)."""
    with path.open(newline="") as handle:
        header = next(csv.reader(handle), [])
    return all(column in header for column in ("name", "num_gpu", "gpu_milli"))
