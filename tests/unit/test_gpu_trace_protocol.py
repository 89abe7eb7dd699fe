"""Unit tests for the GPU trace benchmark (bench/gpu_trace) on tiny synthetic clusters.

One test reads the real trace when it is present and checks its published sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.gpu_trace.__main__ import parse_seeds
from bench.gpu_trace.policies import REGISTRY, make_policy
from bench.gpu_trace.protocol import allocation_at_demand, build_workload
from bench.gpu_trace.runner import run_generators, run_one
from bench.gpu_trace.simulator import simulate
from bench.gpu_trace.trace import NODE_LISTS, POD_LIST_DEFAULT, NodeTable, PodTable, Trace, default_data_dir, load_trace
from berth.core.gpu.fragmentation import MILLI_PER_GPU


def make_nodes(specs: list[tuple[int, int, int, str | None]]) -> NodeTable:
    """specs: (cpu_milli, memory_mib, gpus, model)."""
    return NodeTable(
        names=tuple(f"node-{i:03d}" for i in range(len(specs))),
        cpu_milli=np.array([s[0] for s in specs], dtype=np.int64),
        memory_mib=np.array([s[1] for s in specs], dtype=np.int64),
        gpu_count=np.array([s[2] for s in specs], dtype=np.int64),
        model=tuple(s[3] if s[2] else None for s in specs),
    )


def make_pods(specs: list[tuple[int, int, int, int]]) -> PodTable:
    """specs: (cpu_milli, memory_mib, num_gpu, gpu_milli)."""
    return PodTable(
        names=tuple(f"pod-{i:04d}" for i in range(len(specs))),
        cpu_milli=np.array([s[0] for s in specs], dtype=np.int64),
        memory_mib=np.array([s[1] for s in specs], dtype=np.int64),
        num_gpu=np.array([s[2] for s in specs], dtype=np.int64),
        gpu_milli=np.array([s[3] for s in specs], dtype=np.int64),
        gpu_spec=tuple(frozenset() for _ in specs),
    )


SMALL_TRACE = Trace(
    nodes=make_nodes(
        [(32_000, 128_000, 4, "T4"), (16_000, 64_000, 2, "T4"), (64_000, 256_000, 8, "V100"), (8_000, 8_000, 0, None)]
    ),
    pods=make_pods(
        [
            (4000, 8000, 1, 500),
            (8000, 16000, 1, 1000),
            (2000, 4000, 1, 250),
            (16000, 32000, 2, 1000),
            (1000, 2000, 0, 0),
            (3000, 6000, 1, 810),
        ]
    ),
)


# --- workload construction -----------------------------------------------------------------


@pytest.mark.parametrize("demand", [1.0, 1.3, 2.5])
def test_sampling_reaches_the_demand_target(demand):
    pods, capacity = SMALL_TRACE.pods, SMALL_TRACE.nodes.total_gpu_milli
    workload = build_workload(pods, capacity, demand, np.random.Generator(np.random.PCG64(7)))
    target = demand * capacity
    total = pods.total_gpu_milli
    assert workload.requested_gpu_milli == total[workload.pod_index].sum()
    # the trace comes first, each pod exactly once, shuffled
    assert sorted(workload.pod_index[: len(pods)].tolist()) == list(range(len(pods)))
    # never beyond the target except by the rule's multi-GPU slack, and no sampled pod that
    # would still fit the rule was left out: the next draw must have crossed the target
    assert workload.requested_gpu_milli <= target + (pods.num_gpu.max() - 1) * MILLI_PER_GPU
    assert workload.requested_gpu_milli > target - MILLI_PER_GPU
    assert workload.target_gpu_milli == target


def test_demand_without_gpu_pods_is_rejected():
    cpu_only = make_pods([(1000, 1, 0, 0)] * 3)
    with pytest.raises(ValueError):
        build_workload(cpu_only, 4000, 1.3, np.random.Generator(np.random.PCG64(0)))


def test_demand_below_the_trace_drops_pods():
    pods, capacity = SMALL_TRACE.pods, SMALL_TRACE.nodes.total_gpu_milli
    workload = build_workload(pods, capacity, 0.2, np.random.Generator(np.random.PCG64(1)))
    assert workload.requested_gpu_milli <= 0.2 * capacity
    assert len(workload) < len(pods) and len(set(workload.pod_index.tolist())) == len(workload)


def test_same_seed_same_workload_and_result():
    for policy in REGISTRY:
        first = run_one(SMALL_TRACE, policy, seed=42, demand=1.5)
        second = run_one(SMALL_TRACE, policy, seed=42, demand=1.5)
        assert np.array_equal(first.used_gpu_milli, second.used_gpu_milli), policy
        assert np.array_equal(first.final_state.free_gpu, second.final_state.free_gpu), policy
    w1 = build_workload(SMALL_TRACE.pods, 14_000, 1.3, run_generators(3)[0])
    w2 = build_workload(SMALL_TRACE.pods, 14_000, 1.3, run_generators(3)[0])
    w3 = build_workload(SMALL_TRACE.pods, 14_000, 1.3, run_generators(4)[0])
    assert np.array_equal(w1.pod_index, w2.pod_index) and not np.array_equal(w1.pod_index, w3.pod_index)


# --- the metric ------------------------------------------------------------------------------


def test_allocation_at_demand_averages_the_events_of_the_bin():
    capacity = 1000
    arrived = np.array([500, 1000, 1290, 1296, 1300])
    used = np.array([500, 900, 950, 950, 960])
    # 129.0 % rounds to 129; 129.6 % and 130.0 % round to 130
    assert allocation_at_demand(arrived, used, capacity, 130) == pytest.approx((0.95 + 0.96) / 2)
    # no event rounds to 128: fall back to the +-1 window (129.0 only)
    assert allocation_at_demand(arrived, used, capacity, 128) == pytest.approx(0.95)
    assert np.isnan(allocation_at_demand(arrived, used, capacity, 10))


# --- policies ----------------------------------------------------------------------------------


def simulate_on(trace: Trace, policy: str, order: list[int], seed: int = 0):
    from bench.gpu_trace.protocol import Workload

    workload = Workload(np.array(order, dtype=np.int64), len(order), 0, 0.0)
    return simulate(
        trace.nodes, trace.pods, workload, make_policy(policy), np.random.Generator(np.random.PCG64(seed)), seed
    )


def test_bestfit_prefers_the_node_left_with_least_free_resources():
    trace = Trace(make_nodes([(64_000, 10**6, 8, "G"), (16_000, 10**6, 2, "G")]), make_pods([(4000, 1, 1, 1000)]))
    state = simulate_on(trace, "bestfit", [0]).final_state
    assert state.free_gpu[1].tolist()[:2] == [0, 1000]


def test_fractional_pods_share_a_device_under_fgd_and_berth():
    # Two half-GPU pods and a popular whole-GPU shape: both fragmentation-aware policies put
    # the second half on the device the first one opened, keeping a whole GPU free.
    trace = Trace(make_nodes([(64_000, 10**6, 2, "G")]), make_pods([(1000, 1, 1, 500)] * 2 + [(1000, 1, 1, 1000)] * 5))
    for policy in ("fgd", "berth", "gpupacking"):
        state = simulate_on(trace, policy, [0, 1]).final_state
        assert sorted(state.free_gpu[0].tolist()) == [0, 1000], policy


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(
        st.tuples(st.integers(1000, 64_000), st.integers(1000, 10**6), st.integers(0, 8), st.sampled_from(["A", "B"])),
        min_size=1,
        max_size=6,
    ),
    pods=st.lists(
        st.one_of(
            st.tuples(st.integers(0, 16_000), st.integers(0, 64_000), st.just(1), st.integers(1, 999)),
            st.tuples(st.integers(0, 32_000), st.integers(0, 64_000), st.sampled_from([1, 2, 4, 8]), st.just(1000)),
            st.tuples(st.integers(1, 16_000), st.integers(0, 64_000), st.just(0), st.just(0)),
        ),
        min_size=1,
        max_size=12,
    ),
    policy=st.sampled_from(sorted(REGISTRY)),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_policy_never_over_allocates(nodes, pods, policy, seed):
    trace = Trace(make_nodes(nodes), make_pods(pods))
    if trace.nodes.total_gpu_milli == 0 or not trace.pods.num_gpu.any():
        return  # no GPU demand or capacity: the protocol is undefined
    result = run_one(trace, policy, seed=seed, demand=1.6)
    state = result.final_state
    assert (state.free_gpu >= 0).all() and (state.free_gpu <= MILLI_PER_GPU).all()
    slots = np.arange(state.free_gpu.shape[1])[None, :] < trace.nodes.gpu_count[:, None]
    assert (state.free_gpu[~slots] == 0).all()  # padding never used
    assert (state.free_cpu >= 0).all() and (state.free_mem >= 0).all()
    used_at_end = result.used_gpu_milli[-1] if result.used_gpu_milli.size else 0  # demand may drop every pod
    assert used_at_end == trace.nodes.total_gpu_milli - state.free_gpu.sum()
    assert (np.diff(result.used_gpu_milli) >= 0).all()


def test_parse_seeds():
    assert parse_seeds("42-51") == list(range(42, 52))
    assert parse_seeds("1,3-4,3") == [1, 3, 4]


# --- the real trace, when present -------------------------------------------------------------


def test_real_trace_sizes_and_demand():
    data = default_data_dir()
    if not (data / NODE_LISTS["gpu"]).is_file() or not (data / POD_LIST_DEFAULT).is_file():
        pytest.skip(f"trace not found in {data}")
    trace = load_trace(data, "gpu")
    assert len(trace.nodes) == 1213
    assert trace.nodes.total_gpu_milli == 6_212_000
    assert len(trace.pods) == 8152
    assert len(load_trace(data, "all").nodes) == 1523
    workload = build_workload(trace.pods, trace.nodes.total_gpu_milli, 1.3, run_generators(42)[0])
    assert 1.299 * 6_212_000 < workload.requested_gpu_milli <= 1.3 * 6_212_000 + 7000
    assert workload.n_original == 8152 and len(workload) > 10_000


# --- the real engine as a policy ---------------------------------------------------------------


def test_engine_policy_places_through_the_engine_and_the_protocol_agrees():
    from bench.gpu_trace.policies.engine import BerthEngine

    assert "berth-engine" in REGISTRY and BerthEngine.drives_placement
    result = run_one(SMALL_TRACE, "berth-engine", seed=7, demand=1.3)
    # The mirror state (the protocol's own accounting) saw every engine placement.
    used = SMALL_TRACE.nodes.total_gpu_milli - result.final_state.free_gpu.sum()
    assert result.used_gpu_milli[-1] == used > 0
    assert result.failed < int(result.extra["pods"])


def test_engine_policy_maps_gpu_spec_to_required_node_affinity():
    from bench.gpu_trace.policies.engine import node_infos, pod_template
    from berth.core.config import default_config
    from berth.core.scheduler import Scheduler
    from berth.core.state import ClusterState as EngineState

    pods = make_pods([(1000, 1000, 1, 500)])
    pods = PodTable(pods.names, pods.cpu_milli, pods.memory_mib, pods.num_gpu, pods.gpu_milli, (frozenset({"V100"}),))
    scheduler = Scheduler(default_config())
    state = EngineState()
    for node in node_infos(SMALL_TRACE.nodes):
        state.upsert_node(node)
    decision = scheduler.schedule(pod_template(pods.request(0), "p"), state, "berth")
    assert decision.node == "node-002"  # the only V100 node
    assert decision.gpu_milli == 500 and len(decision.gpu_devices) == 1
