"""Loading the Alibaba cluster-trace-gpu-v2023 ("openb") CSV files into numpy tables.

Only the columns the placement protocol needs are kept.  Values are normalised the way the
ATC'23 artifact's CSV-to-YAML converter does it: a pod asking for no GPU carries no GPU
share at all, and a GPU share above 1000 milli is clamped to one whole device.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from berth.core.gpu.fragmentation import MILLI_PER_GPU, PodRequest

IntArray = npt.NDArray[np.int64]

NODE_LISTS = {
    "gpu": "openb_node_list_gpu_node.csv",
    "all": "openb_node_list_all_node.csv",
}
POD_LIST_DEFAULT = "openb_pod_list_default.csv"
TRACE_DIR_ENV = "BERTH_TRACE_DIR"


def default_data_dir() -> Path:
    """``$BERTH_TRACE_DIR`` if set, else ``<repo root>/../shared/data/gpu-v2023``."""
    if env := os.environ.get(TRACE_DIR_ENV):
        return Path(env)
    repo_root = Path(__file__).resolve().parents[2]
    return repo_root.parent / "shared" / "data" / "gpu-v2023"


def _ints(rows: list[dict[str, str]], column: str) -> IntArray:
    return np.array([int(r[column] or 0) for r in rows], dtype=np.int64)


@dataclass(frozen=True, eq=False)
class NodeTable:
    """Cluster nodes: capacity per node and GPU model (``None`` for CPU-only nodes)."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpu_count: IntArray
    model: tuple[str | None, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> int:
        """The metric's denominator: every GPU device counts 1000 milli."""
        return int(self.gpu_count.sum()) * MILLI_PER_GPU

    @property
    def max_devices(self) -> int:
        return int(self.gpu_count.max(initial=0))


@dataclass(frozen=True, eq=False)
class PodTable:
    """Pods of the trace in file order (the artifact samples copies by this order)."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    gpu_spec: tuple[frozenset[str], ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> IntArray:
        """GPU milli each pod consumes in total (num_gpu x per-device share)."""
        return self.num_gpu * self.gpu_milli

    def request(self, i: int) -> PodRequest:
        return PodRequest(
            cpu_milli=int(self.cpu_milli[i]),
            num_gpu=int(self.num_gpu[i]),
            gpu_milli=int(self.gpu_milli[i]),
            allowed_models=self.gpu_spec[i],
            memory_mib=int(self.memory_mib[i]),
        )


@dataclass(frozen=True, eq=False)
class Trace:
    nodes: NodeTable
    pods: PodTable


def load_nodes(path: Path) -> NodeTable:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows.sort(key=lambda r: r["sn"])  # a fixed order, independent of the file's
    return NodeTable(
        names=tuple(r["sn"] for r in rows),
        cpu_milli=_ints(rows, "cpu_milli"),
        memory_mib=_ints(rows, "memory_mib"),
        gpu_count=_ints(rows, "gpu"),
        model=tuple((r["model"] or None) if int(r["gpu"] or 0) > 0 else None for r in rows),
    )


def load_pods(path: Path) -> PodTable:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows.sort(key=lambda r: r["name"])
    num_gpu = _ints(rows, "num_gpu")
    raw_share = _ints(rows, "gpu_milli")
    share = np.where(num_gpu > 0, np.clip(raw_share, 0, MILLI_PER_GPU), 0)
    if ((num_gpu > 0) & (share == 0)).any():
        raise ValueError(f"{path}: a GPU pod without a GPU share")
    return PodTable(
        names=tuple(r["name"] for r in rows),
        cpu_milli=_ints(rows, "cpu_milli"),
        memory_mib=_ints(rows, "memory_mib"),
        num_gpu=num_gpu,
        gpu_milli=share.astype(np.int64),
        gpu_spec=tuple(frozenset(m for m in (r.get("gpu_spec") or "").split("|") if m) for r in rows),
    )


def load_trace(data_dir: Path, node_list: str = "gpu", pod_list: str = POD_LIST_DEFAULT) -> Trace:
    """Load nodes (``node_list`` = "gpu" for the 1,213 GPU nodes, "all" for 1,523) and pods."""
    if node_list not in NODE_LISTS:
        raise ValueError(f"node_list must be one of {sorted(NODE_LISTS)}")
    return Trace(load_nodes(data_dir / NODE_LISTS[node_list]), load_pods(data_dir / pod_list))
