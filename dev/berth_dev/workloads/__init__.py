"""Workloads for the cluster simulator, the demo and the benchmarks.

A :class:`Workload` is a starting cluster (nodes, policies, AgentPools) and what happens to it over
simulated time (pods arriving and ending, spot notices, queue-lag reports, node removals). Three
sources, one model:

- Kubernetes manifests plus a Timeline document (:mod:`.manifests`);
- the Alibaba GPU trace's CSV files (:mod:`.alibaba`);
- deterministic generators, ``demo`` and ``bench`` (:mod:`.generate`), written as manifests.

Entry points: :func:`load_workload` (a file or trace directory), :func:`generate_workload` and
:func:`generated_documents` (a generator spec such as ``demo:7``). An AgentPool and its replica
pods are the product's (:mod:`berth.kube.replicas`), re-exported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from berth.kube.replicas import LABEL_AGENT_POOL, AgentPool, ReplicaError, replica_manifest, replica_pod

from .alibaba import DEFAULT_POD_LIST, is_pod_list, load_trace
from .generate import bench_documents, demo_documents
from .manifests import from_documents, load_manifests, write_documents
from .model import (
    ANNOTATION_ARRIVAL,
    ANNOTATION_RUN,
    NodeRemoval,
    PolicyObject,
    QueueLagSample,
    SpotNotice,
    TimedPod,
    Workload,
    WorkloadError,
    policy_kind,
    policy_observed,
)
from .pools import pool_policies, write_pools_file

GENERATORS = ("demo", "bench")

__all__ = [
    "ANNOTATION_ARRIVAL",
    "ANNOTATION_RUN",
    "GENERATORS",
    "LABEL_AGENT_POOL",
    "AgentPool",
    "NodeRemoval",
    "PolicyObject",
    "QueueLagSample",
    "ReplicaError",
    "SpotNotice",
    "TimedPod",
    "Workload",
    "WorkloadError",
    "bench_documents",
    "demo_documents",
    "from_documents",
    "generate_workload",
    "generated_documents",
    "load_workload",
    "parse_generator",
    "policy_kind",
    "policy_observed",
    "pool_policies",
    "write_pools_file",
    "replica_manifest",
    "replica_pod",
    "write_documents",
]


def load_workload(path: Path, *, nodes_csv: Path | None = None) -> Workload:
    """A workload from a manifest file (YAML/JSON), an Alibaba pod-list CSV (with ``nodes_csv``
    or the GPU node list beside it), or a directory holding the trace's files."""
    if path.is_dir():
        return load_trace(path / DEFAULT_POD_LIST, nodes_csv)
    if not path.is_file():
        raise WorkloadError(f"{path}: no such file or directory")
    if path.suffix.lower() == ".csv":
        if not is_pod_list(path):
            raise WorkloadError(
                f"{path}: not a pod list (columns name,cpu_milli,memory_mib,num_gpu,gpu_milli,...); "
                "give the pod list, with the node list as --nodes-csv"
            )
        return load_trace(path, nodes_csv)
    return load_manifests(path)


def parse_generator(spec: str) -> tuple[str, int]:
    """``"demo"`` → ("demo", 1); ``"demo:7"`` → ("demo", 7)."""
    name, _, seed_text = spec.partition(":")
    if name not in GENERATORS:
        raise WorkloadError(
            f"unknown generator {name!r}; choose one of {', '.join(GENERATORS)} (optionally with a seed, e.g. demo:7)"
        )
    try:
        seed = int(seed_text) if seed_text else 1
    except ValueError:
        raise WorkloadError(f"{spec!r}: the seed after ':' must be an integer") from None
    return name, seed


def generated_documents(spec: str, **options: Any) -> list[dict[str, Any]]:
    """The manifests of a generator spec. ``options`` go to the bench generator (``nodes``,
    ``pods``, ``rate``); the demo takes none."""
    name, seed = parse_generator(spec)
    if name == "demo":
        return demo_documents(seed)
    return bench_documents(seed, **{k: v for k, v in options.items() if v is not None})


def generate_workload(spec: str, **options: Any) -> Workload:
    name, seed = parse_generator(spec)
    return from_documents(generated_documents(spec, **options), name=f"{name}:{seed}")
