"""Event loop of the protocol: place pods one by one on a mutable copy of the cluster.

Speed comes from a lazily refreshed (node x pod shape) cache.  Every policy here scores a
node for a pod from the node's own state and the pod's shape only (BestFit's min-max
normalisation across nodes happens later, at selection).  A placement changes one node, so
only that node's cached scores go stale; scoring a pod then re-scores just the nodes that
changed since its shape was last scored - usually a handful - and selection is one pass over
a cached column.  The results are identical to re-scoring every node for every pod.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from bench.gpu_trace.protocol import Workload, allocation_at_demand
from bench.gpu_trace.trace import NodeTable, PodTable
from berth.core.gpu.fragmentation import MILLI_PER_GPU, PodRequest, model_matches

if TYPE_CHECKING:  # the policies import this module; annotations only
    from bench.gpu_trace.policies.base import Policy

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class PodShapes:
    """Distinct pod shapes of a pod table (resources + allowed models) and each pod's shape."""

    requests: tuple[PodRequest, ...]
    shape_of_pod: IntArray

    @classmethod
    def of(cls, pods: PodTable) -> PodShapes:
        index: dict[PodRequest, int] = {}
        shape_of_pod = np.empty(len(pods), dtype=np.int64)
        for i in range(len(pods)):
            shape_of_pod[i] = index.setdefault(pods.request(i), len(index))
        return cls(tuple(index), shape_of_pod)

    def __len__(self) -> int:
        return len(self.requests)


def affinity_tag(request: PodRequest) -> int:
    """GpuClustering's per-pod tag: -1 no GPU, 0 a shared GPU, k for k whole GPUs."""
    if request.num_gpu == 0:
        return -1
    return 0 if request.is_fractional else request.num_gpu


@dataclass(eq=False)
class ClusterState:
    """Free resources per node and per GPU device, mutated by placements.

    ``free_gpu`` is nodes x devices, right-padded with 0 for nodes with fewer devices.
    ``tag_count[n, j]`` counts GPU pods of affinity tag ``tags[j]`` on node ``n``.
    """

    nodes: NodeTable
    free_gpu: IntArray
    free_cpu: IntArray
    free_mem: IntArray
    tags: tuple[int, ...]
    tag_count: IntArray
    used_gpu_milli: int = 0

    @classmethod
    def empty(cls, nodes: NodeTable, tags: tuple[int, ...]) -> ClusterState:
        width = max(nodes.max_devices, 1)
        slots = np.arange(width)[None, :] < nodes.gpu_count[:, None]
        return cls(
            nodes=nodes,
            free_gpu=np.where(slots, MILLI_PER_GPU, 0).astype(np.int64),
            free_cpu=nodes.cpu_milli.copy(),
            free_mem=nodes.memory_mib.copy(),
            tags=tags,
            tag_count=np.zeros((len(nodes), len(tags)), dtype=np.int64),
        )

    def fits(self, rows: IntArray, request: PodRequest, model_ok: BoolArray) -> BoolArray:
        """Filter: CPU, memory, GPU model and GPU devices (share on one device, or idle ones)."""
        ok = model_ok[rows] & (self.free_cpu[rows] >= request.cpu_milli) & (self.free_mem[rows] >= request.memory_mib)
        if request.num_gpu == 0:
            return ok
        free = self.free_gpu[rows]
        if request.is_fractional:
            return ok & (free >= request.gpu_milli).any(axis=1)
        return ok & ((free == MILLI_PER_GPU).sum(axis=1) >= request.num_gpu)

    def place(self, node: int, request: PodRequest, devices: tuple[int, ...]) -> None:
        """Bind: subtract the pod's resources; asserts the devices really have room."""
        self.free_cpu[node] -= request.cpu_milli
        self.free_mem[node] -= request.memory_mib
        if request.num_gpu:
            if len(devices) != request.num_gpu or len(set(devices)) != len(devices):
                raise AssertionError(f"bad device choice {devices} for {request}")
            for d in devices:
                if self.free_gpu[node, d] < request.gpu_milli:
                    raise AssertionError(f"device {node}/{d} over-allocated")
                self.free_gpu[node, d] -= request.gpu_milli
            self.used_gpu_milli += request.total_gpu_milli
            self.tag_count[node, self.tags.index(affinity_tag(request))] += 1
        if self.free_cpu[node] < 0 or self.free_mem[node] < 0:
            raise AssertionError(f"node {node} over-allocated")


@dataclass(eq=False)
class SimContext:
    """Everything a policy may read: the cluster, the shapes, the trace and the run's RNG."""

    nodes: NodeTable
    pods: PodTable
    shapes: PodShapes
    model_ok: BoolArray  # (N, S): node's GPU model acceptable for the shape's pods
    rng: np.random.Generator
    node_hash: npt.NDArray[np.uint64]


@dataclass(frozen=True, eq=False)
class Event:
    """One submission: position in the run, trace pod, shape and a stable per-pod hash."""

    position: int
    pod: int
    shape: int
    pod_hash: np.uint64


@dataclass(eq=False)
class RunResult:
    policy: str
    seed: int
    capacity_gpu_milli: int
    arrived_gpu_milli: IntArray
    used_gpu_milli: IntArray
    failed: int
    elapsed_s: float
    final_state: ClusterState | None = None
    extra: dict = field(default_factory=dict)

    def allocation_at(self, demand_percent: int) -> float:
        return allocation_at_demand(
            self.arrived_gpu_milli, self.used_gpu_milli, self.capacity_gpu_milli, demand_percent
        )

    @property
    def final_allocation(self) -> float:
        return float(self.used_gpu_milli[-1]) / self.capacity_gpu_milli if self.used_gpu_milli.size else 0.0


def stable_hash64(text: str) -> np.uint64:
    """64-bit hash of a string that is the same in every process and on every run."""
    return np.uint64(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little"))


def pod_uid(pods: PodTable, workload: Workload, position: int) -> str:
    """Names as the artifact gives them: trace pods keep theirs, copies get ``-tuned-<i>``."""
    name = pods.names[int(workload.pod_index[position])]
    return name if position < workload.n_original else f"{name}-tuned-{position - workload.n_original}"


def simulate(
    nodes: NodeTable,
    pods: PodTable,
    workload: Workload,
    policy: Policy,
    rng: np.random.Generator,
    seed: int = -1,
    shapes: PodShapes | None = None,
) -> RunResult:
    """Run one protocol instance and return per-event arrived/used GPU milli."""
    started = time.perf_counter()
    shapes = shapes or PodShapes.of(pods)
    if getattr(policy, "drives_placement", False):
        # The real engine runs its own cycle per pod (bench/gpu_trace/policies/engine.py).
        return policy.run(nodes, pods, workload, shapes, seed)  # type: ignore[attr-defined, no-any-return]  # policies are duck-typed
    tags = tuple(sorted({affinity_tag(r) for r in shapes.requests if r.num_gpu}))
    state = ClusterState.empty(nodes, tags)
    model_ok = np.stack([model_matches(nodes.model, r.allowed_models) for r in shapes.requests], axis=1)
    ctx = SimContext(
        nodes=nodes,
        pods=pods,
        shapes=shapes,
        model_ok=model_ok,
        rng=rng,
        node_hash=np.array([stable_hash64(n) for n in nodes.names], dtype=np.uint64),
    )
    policy.setup(ctx)

    n_nodes, n_shapes = len(nodes), len(shapes)
    stale = np.ones((n_shapes, n_nodes), dtype=bool)  # shape-major: a shape's row is contiguous
    feasible = np.zeros((n_shapes, n_nodes), dtype=bool)
    score = np.zeros((n_shapes, n_nodes), dtype=np.int64)
    device = np.full((n_shapes, n_nodes), -1, dtype=np.int64)

    n_events = len(workload)
    arrived_log = np.empty(n_events, dtype=np.int64)
    used_log = np.empty(n_events, dtype=np.int64)
    arrived = 0
    failed = 0
    total_req = pods.total_gpu_milli
    for position in range(n_events):
        pod = int(workload.pod_index[position])
        s = int(shapes.shape_of_pod[pod])
        request = shapes.requests[s]
        arrived += int(total_req[pod])

        rows = np.flatnonzero(stale[s])
        if rows.size:
            ok = state.fits(rows, request, model_ok[:, s])
            feasible[s, rows] = ok
            good = rows[ok]
            if good.size:
                score[s, good], device[s, good] = policy.score_rows(state, good, s, request)
            stale[s, rows] = False

        candidates = np.flatnonzero(feasible[s])
        if candidates.size == 0:
            failed += 1
        else:
            event = Event(position, pod, s, stable_hash64(pod_uid(pods, workload, position)))
            node = int(policy.select(state, candidates, score[s, candidates], event))
            devices = policy.devices(state, node, request, int(device[s, node]))
            state.place(node, request, devices)
            stale[:, node] = True
        arrived_log[position] = arrived
        used_log[position] = state.used_gpu_milli

    return RunResult(
        policy=policy.name,
        seed=seed,
        capacity_gpu_milli=nodes.total_gpu_milli,
        arrived_gpu_milli=arrived_log,
        used_gpu_milli=used_log,
        failed=failed,
        elapsed_s=time.perf_counter() - started,
        final_state=state,
    )
