"""GPU plugins and DefaultPreemption on a real ClusterState (filters probed directly)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from berth.schemas.cluster import GpuDevice, LabelSelector, NodeInfo, PodInfo
from berth.schemas.policy import PodDisruptionBudgetInfo

from berth.core import messages
from berth.core.framework import Code, CycleContext, Diagnosis
from berth.core.plugins.gpu_devices import (
    GpuBinPack,
    GpuDeviceExtension,
    GpuDeviceFit,
    GpuTopologyFitness,
    gpu_inventory,
)
from berth.core.plugins.preemption import PROBE, DefaultPreemption
from berth.core.state import ClusterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def dgx(name: str, unhealthy: tuple[int, ...] = ()) -> NodeInfo:
    return NodeInfo(
        name=name,
        allocatable={"cpu": 64_000},
        gpus=tuple(
            GpuDevice(
                index=i,
                numa_node=i // 4,
                memory_mib=40_960,
                healthy=i not in unhealthy,
                nvlink_peers=tuple(j for j in range(4 * (i // 4), 4 * (i // 4) + 4) if j != i),
            )
            for i in range(8)
        ),
    )


def pod(
    name: str,
    gpus: int = 0,
    *,
    priority: int = 0,
    node: str | None = None,
    fraction: int | None = None,
    locality: str = "any",
    devices: tuple[int, ...] = (),
    labels: dict[str, str] | None = None,
    never: bool = False,
    age: int = 0,
) -> PodInfo:
    return PodInfo(
        uid=name,
        namespace="default",
        name=name,
        priority=priority,
        node_name=node,
        requests={"nvidia.com/gpu": gpus} if gpus else {},
        gpu_fraction_milli=fraction,
        gpu_locality=locality,
        gpu_devices=devices,
        labels=labels or {},
        phase="Running" if node else "Pending",
        preemption_policy="Never" if never else "PreemptLowerPriority",
        creation_time=T0 - timedelta(minutes=age),
    )


def state_of(*nodes: NodeInfo, bound: tuple[PodInfo, ...] = ()) -> ClusterState:
    state = ClusterState()
    state.ensure_extension(GpuDeviceExtension)
    for node in nodes:
        state.upsert_node(node)
    for p in bound:
        state.upsert_bound_pod(p)
    return state


def run_filter(state: ClusterState, p: PodInfo) -> dict[str, str | None]:
    cycle = CycleContext(p, state, "berth")
    plugin = GpuDeviceFit()
    plugin.pre_filter(cycle)
    nodes = state.nodes.order()
    result = plugin.filter(cycle, nodes)
    out: dict[str, str | None] = {}
    for i, name in enumerate(state.nodes.names_of(nodes)):
        code = -1 if result.codes is None else int(result.codes[i])
        out[name] = None if code < 0 else result.statuses[code].message
    return out


def test_filter_reasons_per_node() -> None:
    state = state_of(
        dgx("a", unhealthy=(5,)),
        dgx("b"),
        bound=(pod("nb", 2, node="a", devices=(0, 1)), pod("x", 6, node="b", devices=tuple(range(6)))),
    )
    assert run_filter(state, pod("tp", 4, locality="nvlink")) == {
        "a": messages.gpu_no_nvlink_set(4),
        "b": "Insufficient nvidia.com/gpu",
    }
    assert run_filter(state, pod("tp", 4)) == {"a": None, "b": "Insufficient nvidia.com/gpu"}
    assert messages.gpu_no_nvlink_set(4) == "node(s) had no NVLink-connected set of 4 free GPUs"


def test_reserve_names_devices_and_assume_holds_them() -> None:
    state = state_of(dgx("a"), bound=(pod("nb", 2, node="a", devices=(0, 1)),))
    p = pod("tp", 4, locality="nvlink")
    cycle = CycleContext(p, state, "berth")
    reserved = GpuDeviceFit().reserve(cycle, state.nodes.slot_of("a"))  # type: ignore[arg-type]  # a slot number as the plugin takes it
    assert reserved.gpu_devices == (4, 5, 6, 7)
    hash_before = state.snapshot_hash()
    state.assume(p, "a", reserved.gpu_devices)
    assert int(gpu_inventory(state).devices.full_count[state.nodes.slot_of("a")]) == 2  # type: ignore[index]  # not None in this test's setup
    state.forget("tp")
    assert int(gpu_inventory(state).devices.full_count[state.nodes.slot_of("a")]) == 6  # type: ignore[index]  # not None in this test's setup
    assert state.snapshot_hash() == hash_before


def test_shares_reserve_the_fullest_device_and_report_milli() -> None:
    state = state_of(dgx("a"), bound=(pod("s0", node="a", fraction=500),))
    cycle = CycleContext(pod("s1", fraction=250), state, "berth")
    reserved = GpuDeviceFit().reserve(cycle, state.nodes.slot_of("a"))  # type: ignore[arg-type]  # a slot number as the plugin takes it
    assert (reserved.gpu_devices, reserved.gpu_milli) == ((0,), 250)
    state = state_of(dgx("a"), bound=tuple(pod(f"s{i}", node="a", fraction=750) for i in range(8)))
    assert run_filter(state, pod("big", fraction=500)) == {"a": "node(s) had no GPU device with 500 milli free"}


def test_node_update_keeps_what_pods_hold() -> None:
    state = state_of(dgx("a"), bound=(pod("nb", 3, node="a"),))
    inv = gpu_inventory(state)
    slot = state.nodes.slot_of("a")
    assert int(inv.devices.full_count[slot]) == 5  # type: ignore[index]  # not None in this test's setup
    state.upsert_node(dgx("a", unhealthy=(7,)))
    assert int(inv.devices.full_count[slot]) == 4  # type: ignore[index]  # not None in this test's setup


def test_scores_prefer_packed_nodes_and_linked_sets() -> None:
    state = state_of(dgx("a"), dgx("b"), bound=(pod("x", 4, node="a", devices=(0, 1, 2, 3)),))
    cycle = CycleContext(pod("p", 2), state, "berth")
    nodes = state.nodes.order()
    assert list(GpuBinPack().score(cycle, nodes)) == [75, 25]
    fitness = GpuTopologyFitness().score(cycle, nodes)
    assert list(fitness) == [100, 100]


class Probe:
    """The profile's filters reduced to GpuDeviceFit, as the framework would run them."""

    def feasible(self, cycle: CycleContext, nodes: np.ndarray):  # type: ignore[no-untyped-def]  # a test helper
        plugin = GpuDeviceFit()
        result = plugin.filter(cycle, nodes)
        passed = result.passed(len(nodes))
        reasons = [
            () if ok else result.statuses[int(result.codes[i])].reasons  # type: ignore[index]  # not None in this test's setup
            for i, ok in enumerate(passed)
        ]
        return passed, reasons


def preempt(state: ClusterState, p: PodInfo, unresolvable: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]  # a test helper
    cycle = CycleContext(p, state, "berth")
    cycle.data[PROBE] = Probe()
    nodes = state.nodes.order()
    from berth.core.framework import Status

    statuses = (
        Status.unschedulable("Insufficient nvidia.com/gpu"),
        Status.unresolvable("node(s) had untolerated taint {a: b}"),
    )
    codes = np.array([1 if name in unresolvable else 0 for name in state.nodes.names_of(nodes)], dtype=np.int32)
    diagnosis = Diagnosis(nodes=nodes, node_codes=codes, statuses=statuses)
    hash_before = state.snapshot_hash()
    result = DefaultPreemption().post_filter(cycle, diagnosis)
    assert state.snapshot_hash() == hash_before  # the what-if left no trace
    return result


def gpu_nodes() -> tuple[NodeInfo, NodeInfo]:
    return (
        NodeInfo(name="gpu-1", gpus=tuple(GpuDevice(index=i) for i in range(4))),
        NodeInfo(name="gpu-2", gpus=tuple(GpuDevice(index=i) for i in range(4))),
    )


def test_preemption_avoids_pdb_violations_and_picks_lowest_priority() -> None:
    serving = {"app": "serving"}
    state = state_of(
        *gpu_nodes(),
        bound=(
            pod("batch-a", 2, priority=100, node="gpu-1", age=60),
            pod("batch-b", 2, priority=100, node="gpu-1"),
            pod("serving-0", 2, priority=100, node="gpu-2", labels=serving),
            pod("batch-c", 2, priority=100, node="gpu-2"),
        ),
    )
    state.upsert_policy(
        "PodDisruptionBudget",
        "default",
        "serving",
        PodDisruptionBudgetInfo(
            namespace="default", name="serving", selector=LabelSelector(match_labels=serving), min_available=1
        ),
    )
    result = preempt(state, pod("urgent", 4, priority=1000))
    assert result.status.code is Code.SUCCESS
    assert (result.nominated_node, result.victims) == ("gpu-1", ("batch-a", "batch-b"))


def test_preemption_takes_only_what_it_needs() -> None:
    state = state_of(
        *gpu_nodes(),
        bound=(
            pod("low", 2, priority=1, node="gpu-1"),
            pod("mid", 2, priority=50, node="gpu-1"),
            pod("high", 4, priority=5000, node="gpu-2"),
        ),
    )
    result = preempt(state, pod("urgent", 2, priority=1000))
    assert (result.nominated_node, result.victims) == ("gpu-1", ("low",))


def test_never_and_no_victims_messages_are_kubes() -> None:
    state = state_of(
        *gpu_nodes(), bound=(pod("a", 4, priority=100, node="gpu-1"), pod("b", 4, priority=100, node="gpu-2"))
    )
    never = preempt(state, pod("polite", 2, priority=1000, never=True))
    assert never.message == "preemption: not eligible due to preemptionPolicy=Never."
    peer = preempt(state, pod("peer", 2, priority=100))
    assert peer.message == "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    mixed = preempt(state, pod("peer", 2, priority=100), unresolvable=("gpu-2",))
    assert mixed.message == (
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )


@pytest.mark.parametrize(
    ("milli", "mib", "text"),
    [
        (250, 0, "node(s) had no GPU device with 250 milli free"),
        (250, 8192, "node(s) had no GPU device with 250 milli and 8192 MiB free"),
        (0, 8192, "node(s) had no GPU device with 8192 MiB free"),
    ],
)
def test_share_messages_golden(milli: int, mib: int, text: str) -> None:
    assert messages.gpu_no_share(milli, mib) == text
    assert messages.gpu_no_socket_set(4) == "node(s) had no 4 free GPUs on one NUMA node"
