"""kube's ``resourceAllocationScorer``: the requested/allocatable pairs behind resource scores.

For every configured resource and every node it yields ``(allocatable, requested + pod)``:

- cpu and memory use the *non-zero* requests of placed pods and of the pod (kube's
  ``NonZeroRequested``: 100m / 200 MiB for a pod that requests none) unless ``use_requested``;
- other resources use the plain requests; an extended resource the pod does not request
  gives (0, 0) so that it is left out of the node's score (kube's "bypass").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from berth.core.framework import NodeArray
from berth.core.resource_columns import CPU, DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, MEMORY
from berth.core.state import ClusterState
from berth.schemas.cluster import PodInfo

__all__ = ["is_extended", "pod_request", "requested_and_allocatable"]

_NATIVE = frozenset({"cpu", "memory", "ephemeral-storage"})


def is_extended(resource: str) -> bool:
    """Scalar resources kube scores only when the pod requests them (not cpu/memory/storage)."""
    return resource not in _NATIVE and resource != "pods"


def pod_request(pod: PodInfo, resource: str, *, use_requested: bool) -> int:
    amount = pod.requests.get(resource, 0)
    if not use_requested and amount == 0:
        if resource == "cpu":
            return DEFAULT_MILLI_CPU_REQUEST
        if resource == "memory":
            return DEFAULT_MEMORY_REQUEST
    return amount


def requested_and_allocatable(
    state: ClusterState, pod: PodInfo, nodes: NodeArray, resources: Sequence[str], *, use_requested: bool
) -> list[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """``(index into resources, requested + pod, allocatable)`` per resource that takes part in
    the score, each a 1-D array aligned with ``nodes``. Left out: extended resources the pod does
    not request, and resources no node offers (kube's (0, 0), which every scorer skips).

    Per-resource 1-D columns rather than one ``[nodes, resources]`` matrix: numpy reductions
    along a short second axis are slow, and these run for every pod on every feasible node."""
    columns = []
    for i, resource in enumerate(resources):
        amount = pod_request(pod, resource, use_requested=use_requested)
        if amount == 0 and is_extended(resource):
            continue
        column = state.resources.column(resource)
        if column is None:
            continue
        allocatable = state.resources.allocatable_of(column, nodes)
        if not use_requested and column in (CPU, MEMORY):
            requested = state.resources.nonzero_requested_of(column, nodes)
        else:
            requested = state.resources.requested_of(column, nodes)
        requested += amount
        columns.append((i, requested, allocatable))
    return columns
