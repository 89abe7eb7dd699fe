"""The real placement engine as a policy: ``berth.core.engine.Engine`` with the default profile.

Unlike the other policies, this one does not plug into the simulator's (shape x node) score
cache: every pod goes through a full scheduling cycle of the engine the decision service and
``berth simulate`` run (every filter and score plugin of the profile, its own tie-break and its
own GPU device choice at Reserve), on an engine whose state is built from the trace.  The simulator's own
:class:`~bench.gpu_trace.simulator.ClusterState` is updated in parallel with each decision, so the protocol's accounting
(and its over-allocation assertions)
check the engine's placements independently.

How the trace maps onto the engine's inputs:

* node -> ``NodeInfo`` with allocatable CPU (milli), memory (MiB -> bytes), ``nvidia.com/gpu``
  and one ``GpuDevice`` per GPU of the node's model (label ``nvidia.com/gpu.product``); the
  ``pods`` limit is set high, as the protocol has none;
* pod -> ``PodInfo`` with its CPU and memory requests, ``nvidia.com/gpu: n`` for whole GPUs,
  ``gpu_fraction_milli`` for a share of one GPU, and a ``gpu_spec`` model list as required node
  affinity on ``nvidia.com/gpu.product`` (Kubernetes' way of asking for a GPU model).  UIDs are
  the protocol's pod names, so the engine's tie-break hash sees the same names as ``berth``'s.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from berth.schemas.cluster import (
    Affinity,
    GpuDevice,
    NodeAffinity,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodInfo,
)

from bench.gpu_trace.policies.base import IntArray, Policy
from bench.gpu_trace.protocol import Workload
from bench.gpu_trace.simulator import ClusterState, PodShapes, RunResult, affinity_tag, pod_uid
from bench.gpu_trace.trace import NodeTable, PodTable
from berth.core.config import default_document
from berth.core.engine import Engine
from berth.core.gpu.fragmentation import PodRequest
from berth.kube.manifests import LABEL_GPU_PRODUCT

NAMESPACE = "trace"
SCHEDULER_NAME = "berth"
MAX_PODS_PER_NODE = 100_000
"""The protocol limits nodes by CPU, memory and GPUs only."""
_T0 = datetime(2023, 1, 1, tzinfo=UTC)
_MIB = 2**20


def node_infos(nodes: NodeTable) -> list[NodeInfo]:
    """The trace's nodes as the engine sees them (see the module docstring)."""
    out = []
    for i, name in enumerate(nodes.names):
        count = int(nodes.gpu_count[i])
        model = nodes.model[i] or ""
        labels = {"kubernetes.io/hostname": name}
        if count:
            labels[LABEL_GPU_PRODUCT] = model
        allocatable = {
            "cpu": int(nodes.cpu_milli[i]),
            "memory": int(nodes.memory_mib[i]) * _MIB,
            "pods": MAX_PODS_PER_NODE,
        }
        if count:
            allocatable["nvidia.com/gpu"] = count
        gpus = tuple(GpuDevice(index=d, model=model) for d in range(count))
        out.append(NodeInfo(name=name, labels=labels, capacity=allocatable, allocatable=allocatable, gpus=gpus))
    return out


def pod_template(request: PodRequest, name: str) -> PodInfo:
    """A pending pod asking for ``request``; copies differ only in UID and name."""
    requests = {"cpu": request.cpu_milli, "memory": request.memory_mib * _MIB}
    fraction = None
    if request.num_gpu and not request.is_fractional:
        requests["nvidia.com/gpu"] = request.num_gpu
    elif request.is_fractional:
        fraction = request.gpu_milli
    affinity = None
    if request.allowed_models:
        term = NodeSelectorTerm(
            match_expressions=(
                NodeSelectorRequirement(
                    key=LABEL_GPU_PRODUCT, operator="In", values=tuple(sorted(request.allowed_models))
                ),
            )
        )
        affinity = Affinity(node_affinity=NodeAffinity(required=(term,)))
    return PodInfo(
        uid=name,
        namespace=NAMESPACE,
        name=name,
        scheduler_name=SCHEDULER_NAME,
        requests={k: v for k, v in requests.items() if v},
        gpu_fraction_milli=fraction,
        affinity=affinity,
        creation_time=_T0,
    )


class BerthEngine(Policy):
    """``berth-engine``: the decision core with its default profile (or ``config``, a
    configuration document merged onto it), one scheduling cycle per pod in protocol order."""

    name = "berth-engine"
    drives_placement = True
    """The simulator hands the whole run to :meth:`run` instead of using the score cache."""

    config: dict[str, Any] | None = None

    def scheduler_document(self) -> dict[str, Any]:
        return default_document() if self.config is None else self.config

    def run(self, nodes: NodeTable, pods: PodTable, workload: Workload, shapes: PodShapes, seed: int) -> RunResult:
        """Place every pod of ``workload`` in order; per-event arrived/used GPU milli."""
        started = time.perf_counter()
        engine = Engine(self.scheduler_document())
        for info in node_infos(nodes):
            engine.upsert_node(info)
        slot_of_name = {name: i for i, name in enumerate(nodes.names)}
        tags = tuple(sorted({affinity_tag(r) for r in shapes.requests if r.num_gpu}))
        mirror = ClusterState.empty(nodes, tags)
        templates = [pod_template(r, f"shape-{s}") for s, r in enumerate(shapes.requests)]

        n_events = len(workload)
        arrived_log = np.empty(n_events, dtype=np.int64)
        used_log = np.empty(n_events, dtype=np.int64)
        arrived = failed = 0
        total_req = pods.total_gpu_milli
        for position in range(n_events):
            pod_index = int(workload.pod_index[position])
            shape = int(shapes.shape_of_pod[pod_index])
            arrived += int(total_req[pod_index])
            uid = pod_uid(pods, workload, position)
            # Created in arrival order, as a real cluster stamps them (GpuFragmentation learns from
            # the oldest placed pods).
            pod = templates[shape].model_copy(
                update={"uid": uid, "name": uid, "creation_time": _T0 + timedelta(seconds=position)}
            )
            # The trace has no priorities to preempt by: a pod that does not fit fails.
            outcome = engine.schedule(pod, preempt=False, profile=SCHEDULER_NAME)
            if outcome.placed:
                placed = outcome.placements[0]
                mirror.place(slot_of_name[placed.node], shapes.requests[shape], placed.gpu_devices)
            else:
                failed += 1
            arrived_log[position] = arrived
            used_log[position] = mirror.used_gpu_milli
        return RunResult(
            policy=self.name,
            seed=seed,
            capacity_gpu_milli=nodes.total_gpu_milli,
            arrived_gpu_milli=arrived_log,
            used_gpu_milli=used_log,
            failed=failed,
            elapsed_s=time.perf_counter() - started,
            final_state=mirror,
        )

    def score_rows(
        self, state: ClusterState, rows: IntArray, shape: int, request: PodRequest
    ) -> tuple[IntArray, IntArray]:
        raise NotImplementedError("berth-engine places pods through the engine (see run)")


def _without_scores(*names: str) -> dict[str, Any]:
    """The default document with the Score extension of ``names`` disabled (kube's
    ``plugins.score.disabled``); their filters still run."""
    document = default_document()
    profile = document["profiles"][0]
    profile["plugins"]["score"] = {"disabled": [{"name": n} for n in names]}
    return document


class BerthEngineNoSpread(BerthEngine):
    """Ablation: the default profile without kube's spreading scores (NodeResourcesFit's
    LeastAllocated and NodeResourcesBalancedAllocation)."""

    name = "berth-engine-no-spread"
    config = _without_scores("NodeResourcesFit", "NodeResourcesBalancedAllocation")


class BerthEngineNoLeastAllocated(BerthEngine):
    """Ablation: the default profile without NodeResourcesFit's score."""

    name = "berth-engine-no-fit-score"
    config = _without_scores("NodeResourcesFit")


class BerthEngineNoFragmentation(BerthEngine):
    """Ablation: the default profile without GpuFragmentation's score."""

    name = "berth-engine-no-frag"
    config = _without_scores("GpuFragmentation")


class BerthEngineSpreadCpuPods(BerthEngine):
    """Ablation: the default profile with GpuBinPack's ``packPodsWithoutGpu`` off, so pods without
    GPUs are spread by NodeResourcesFit's LeastAllocated as in kube (the profile before it)."""

    name = "berth-engine-spread-cpu-pods"
    config = default_document()
    config["profiles"][0]["pluginConfig"].append({"name": "GpuBinPack", "args": {"packPodsWithoutGpu": False}})
