"""GpuBinPack on pods that ask for no GPU: packed onto the fullest GPU nodes, nodes without GPUs
first, and nothing at all in a cluster without GPUs (kube's scoring is left alone there)."""

from __future__ import annotations

from datetime import UTC, datetime

from berth.schemas.cluster import GpuDevice, NodeInfo, PodInfo

from berth.core.config import default_document
from berth.core.engine import Engine
from berth.core.framework import CycleContext
from berth.core.plugins.gpu_devices import IDLE_GPU_NODE_PENALTY, GpuBinPack, GpuBinPackArgs, GpuDeviceExtension
from berth.core.state import ClusterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GIB = 2**30


def node(name: str, gpus: int, cpu: int = 32_000, memory: int = 128 * GIB) -> NodeInfo:
    allocatable = {"cpu": cpu, "memory": memory, "pods": 110}
    if gpus:
        allocatable["nvidia.com/gpu"] = gpus
    return NodeInfo(
        name=name, allocatable=allocatable, capacity=allocatable, gpus=tuple(GpuDevice(index=i) for i in range(gpus))
    )


def pod(name: str, cpu: int, memory: int = 4 * GIB, gpus: int = 0, bound_to: str | None = None) -> PodInfo:
    requests = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    return PodInfo(
        uid=name,
        namespace="default",
        name=name,
        requests=requests,
        node_name=bound_to,
        phase="Running" if bound_to else "Pending",
        creation_time=T0,
    )


def state_of(*nodes: NodeInfo, bound: tuple[PodInfo, ...] = ()) -> ClusterState:
    state = ClusterState()
    state.ensure_extension(GpuDeviceExtension)
    for n in nodes:
        state.upsert_node(n)
    for p in bound:
        state.upsert_bound_pod(p)
    return state


def scores(state: ClusterState, p: PodInfo, plugin: GpuBinPack | None = None) -> dict[str, int] | None:
    plugin = plugin or GpuBinPack()
    cycle = CycleContext(p, state, "berth")
    nodes = state.nodes.order()
    if plugin.pre_score(cycle, nodes).is_skip:
        return None
    return dict(zip(state.nodes.names_of(nodes), (int(s) for s in plugin.score(cycle, nodes)), strict=True))


def test_pods_without_gpu_are_packed_onto_the_fullest_gpu_node() -> None:
    state = state_of(node("busy", 8), node("idle", 8), bound=(pod("a", 16_000, 64 * GIB, bound_to="busy"),))
    got = scores(state, pod("cpu", 8_000, 16 * GIB))
    assert got is not None
    # kube's MostAllocated over cpu and memory, after the pod: (24/32 + 80/128) / 2 and (8/32 + 16/128) / 2,
    # each less the penalty (at least 0): neither node has a GPU in use.
    assert got == {
        "busy": (75 + 62) // 2 - IDLE_GPU_NODE_PENALTY,
        "idle": max((25 + 12) // 2 - IDLE_GPU_NODE_PENALTY, 0),
    }


def test_a_gpu_node_with_its_gpus_all_idle_is_kept_for_pods_that_need_all_of_them() -> None:
    # "whole" runs a CPU pod and nothing else: its 8 idle GPUs are what an 8-GPU pod needs, with CPU.
    # "partial" runs a 1-GPU pod with less CPU: it can never take an 8-GPU pod, its CPU is cheaper,
    # and it wins although kube's MostAllocated alone would pick "whole".
    state = state_of(
        node("whole", 8),
        node("partial", 8),
        bound=(pod("cpu-heavy", 16_000, 64 * GIB, bound_to="whole"), pod("gpu-1", 12_000, 48 * GIB, 1, "partial")),
    )
    got = scores(state, pod("cpu", 8_000, 16 * GIB))
    assert got is not None
    assert got == {"whole": (75 + 62) // 2 - IDLE_GPU_NODE_PENALTY, "partial": (62 + 50) // 2}
    assert got["partial"] > got["whole"]


def test_nodes_without_gpus_are_best_for_pods_without_gpu() -> None:
    state = state_of(node("cpu-node", 0), node("gpu-node", 8), bound=(pod("a", 31_000, bound_to="gpu-node"),))
    got = scores(state, pod("cpu", 500, GIB))
    assert got is not None and got["cpu-node"] == 100 and got["gpu-node"] < 100


def test_skips_in_a_cluster_without_gpus_and_when_switched_off() -> None:
    state = state_of(node("a", 0), node("b", 0))
    assert scores(state, pod("cpu", 1_000)) is None
    gpu_state = state_of(node("a", 8))
    off = GpuBinPack(GpuBinPackArgs(packPodsWithoutGpu=False))
    assert scores(gpu_state, pod("cpu", 1_000), off) is None
    assert scores(gpu_state, pod("cpu", 1_000)) is not None


def test_gpu_pods_are_scored_as_before() -> None:
    state = state_of(node("a", 8), node("b", 8), bound=(pod("x", 1_000, gpus=4, bound_to="a"),))
    assert scores(state, pod("p", 1_000, gpus=2)) == {"a": 75, "b": 25}


def test_the_default_profile_packs_cpu_pods_on_a_gpu_cluster() -> None:
    """Through the engine: kube's LeastAllocated alone would send the pod to the emptier node."""
    engine = Engine(default_document())
    for n in (node("busy", 8), node("idle", 8)):
        engine.upsert_node(n)
    first = engine.schedule(pod("first", 16_000, 64 * GIB), preempt=False, profile="berth")
    assert first.placed
    second = engine.schedule(pod("second", 4_000, 8 * GIB), preempt=False, profile="berth")
    assert second.placed and second.placements[0].node == first.placements[0].node
