"""Same input, same decisions: GPU placements do not depend on the order nodes and pods arrive."""

from __future__ import annotations

from datetime import UTC, datetime

from berth.schemas.cluster import GpuDevice, MigSlice, NodeInfo, PodInfo
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import default_config
from berth.core.scheduler import Scheduler
from berth.core.state import ClusterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _node(i: int) -> NodeInfo:
    gpus = tuple(
        GpuDevice(
            index=d,
            numa_node=d // 4,
            memory_mib=40960,
            nvlink_peers=tuple(j for j in range(4 * (d // 4), 4 * (d // 4) + 4) if j != d),
            mig=(MigSlice(profile="1g.5gb", count=7),) if (i == 2 and d == 7) else (),
        )
        for d in range(8)
    )
    allocatable = {"cpu": 64000, "memory": 2**39, "pods": 110, "nvidia.com/gpu": 7 if i == 2 else 8}
    if i == 2:
        allocatable["nvidia.com/mig-1g.5gb"] = 7
    return NodeInfo(name=f"n{i}", allocatable=allocatable, gpus=gpus)


NODES = [_node(i) for i in range(4)]
BOUND = [
    PodInfo(
        uid="b0",
        namespace="d",
        name="b0",
        node_name="n1",
        requests={"nvidia.com/gpu": 3},
        phase="Running",
        creation_time=T0,
    ),
    PodInfo(
        uid="b1", namespace="d", name="b1", node_name="n0", gpu_fraction_milli=500, phase="Running", creation_time=T0
    ),
]
PENDING = [
    PodInfo(uid=f"p{i}", namespace="d", name=f"p{i}", creation_time=T0, **kw)  # type: ignore[arg-type]  # keyword arguments of mixed types, validated by pydantic
    for i, kw in enumerate(
        [
            {"requests": {"nvidia.com/gpu": 4}, "gpu_locality": "nvlink"},
            {"gpu_fraction_milli": 250},
            {"requests": {"nvidia.com/gpu": 2}, "gpu_locality": "same-socket"},
            {"requests": {"nvidia.com/mig-1g.5gb": 2}},
            {"gpu_fraction_milli": 500, "gpu_memory_mib": 10000},
            {"requests": {"nvidia.com/gpu": 1}},
            {"requests": {"nvidia.com/gpu": 8}},
        ]
    )
]
SCHEDULER = Scheduler(default_config())


def run(node_order: list[int], bound_order: list[int]) -> list[tuple[str | None, tuple[int, ...], str]]:
    state = ClusterState()
    for framework in SCHEDULER.frameworks.values():
        framework.prepare(state)
    for i in node_order:
        state.upsert_node(NODES[i])
    for i in bound_order:
        state.upsert_bound_pod(BOUND[i])
    out = []
    for pod in PENDING:
        decision = SCHEDULER.schedule(pod, state, "berth")
        if decision.status == "placed":
            state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)
        out.append((decision.node, tuple(decision.gpu_devices), decision.decision_hash))
    return out


BASELINE = run([0, 1, 2, 3], [0, 1])


@settings(max_examples=25, deadline=None)
@given(st.permutations([0, 1, 2, 3]), st.permutations([0, 1]))
def test_arrival_order_does_not_change_gpu_decisions(nodes: list[int], bound: list[int]) -> None:
    assert run(nodes, bound) == BASELINE


def test_baseline_places_everything_on_named_devices() -> None:
    assert all(node is not None for node, _, _ in BASELINE[:-1])
    assert BASELINE[3][1] == (7,)  # the MIG slices of n2's GPU 7
