"""GpuFragmentation: memoised scores stay exact, fixed scale, GPU models, the learned target
workload, CPU-only pods and the device it hands to Reserve."""

from __future__ import annotations

import random
from collections import Counter
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

from berth.core.config import parse_config
from berth.core.framework import CycleContext
from berth.core.gpu import PodRequest, TargetWorkload, score_placements
from berth.core.plugins.gpu_devices import gpu_inventory
from berth.core.plugins.gpu_fragmentation import (
    GpuFragmentation,
    WorkloadExtension,
    _workload_of,
    bucket_count,
    learned_workload,
    milestone,
    shape_of,
)
from berth.core.scheduler import Scheduler
from berth.core.state import ClusterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def node(name: str, gpus: int = 8, model: str = "A100", cpu: int = 64_000) -> NodeInfo:
    return NodeInfo(
        name=name,
        labels={"nvidia.com/gpu.product": model},
        allocatable={"cpu": cpu, "memory": 2**40, "pods": 110, "nvidia.com/gpu": gpus},
        gpus=tuple(GpuDevice(index=i, model=model, memory_mib=40_960) for i in range(gpus)),
    )


def pod(
    name: str, *, whole: int = 0, fraction: int | None = None, cpu: int = 1000, models: tuple[str, ...] = ()
) -> PodInfo:
    requests = {"cpu": cpu, **({"nvidia.com/gpu": whole} if whole else {})}
    affinity = None
    if models:
        term = NodeSelectorTerm(
            match_expressions=(NodeSelectorRequirement(key="nvidia.com/gpu.product", operator="In", values=models),)
        )
        affinity = Affinity(node_affinity=NodeAffinity(required=(term,)))
    return PodInfo(
        uid=name,
        namespace="default",
        name=name,
        scheduler_name="berth",
        requests=requests,
        gpu_fraction_milli=fraction,
        affinity=affinity,
        creation_time=T0,
    )


def scheduler(weight: int = 10, **args: Any) -> Scheduler:
    profile: dict[str, Any] = {
        "schedulerName": "berth",
        "plugins": {"multiPoint": {"enabled": [{"name": "GpuFragmentation", "weight": weight}]}},
    }
    if args:
        profile["pluginConfig"] = [{"name": "GpuFragmentation", "args": args}]
    return Scheduler(
        parse_config({"apiVersion": "berth.io/v1alpha1", "kind": "BerthSchedulerConfiguration", "profiles": [profile]})
    )


def state_with(sched: Scheduler, *nodes: NodeInfo) -> ClusterState:
    state = ClusterState()
    for framework in sched.frameworks.values():
        framework.prepare(state)
    for n in nodes:
        state.upsert_node(n)
    return state


def fresh_scores(plugin: GpuFragmentation, p: PodInfo, state: ClusterState, nodes: np.ndarray) -> np.ndarray:
    """The plugin's normalised scores computed from scratch (no memo, no cached results)."""
    cycle = CycleContext(p, state, "berth")
    assert plugin.pre_score(cycle, nodes).is_success
    inv = gpu_inventory(state)
    free = np.where(inv.devices.usable[nodes], inv.devices.free_milli[nodes], 0)
    cpu = state.resources.allocatable_of(0, nodes) - state.resources.requested_of(0, nodes)
    workload = cycle.data["GpuFragmentation"][1]
    access = workload.model_access(
        [inv.devices.models[n][0] if inv.devices.models[n] else None for n in nodes.tolist()]
    )
    raw = plugin._raw(free, cpu, access, shape_of(p), workload)
    return plugin.normalize_score(cycle, nodes, raw)


def test_memoised_scores_equal_a_fresh_computation_while_pods_arrive() -> None:
    sched = scheduler(min_learned_pods := 3, minLearnedPods=min_learned_pods)
    framework = sched.frameworks["berth"]
    plugin = framework.plugins["GpuFragmentation"]
    state = state_with(
        sched, *(node(f"n{i}", gpus=(8, 4, 2)[i % 3], cpu=(64_000, 32_000, 16_000)[i % 3]) for i in range(6))
    )
    rng = random.Random(5)
    for i in range(40):
        kind = rng.choice(("whole", "share", "cpu"))
        p = pod(
            f"p{i}",
            whole=rng.choice((1, 2)) if kind == "whole" else 0,
            fraction=rng.choice((250, 500)) if kind == "share" else None,
            cpu=rng.choice((1000, 4000)),
        )
        cycle = CycleContext(p, state, "berth", framework)
        feasible = framework.find_feasible(p, state).feasible
        if feasible.size == 0:
            continue
        scores = framework.score(cycle, feasible)
        assert scores.error is None
        memoised = scores.per_plugin["GpuFragmentation"] // framework.weights["GpuFragmentation"]
        assert list(memoised) == list(fresh_scores(plugin, p, state, feasible)), i
        decision = framework.schedule(p, state)
        if decision.status == "placed":
            state.assume(p, decision.node, decision.gpu_devices, decision.gpu_milli)
    assert state.extension(WorkloadExtension.KEY).total >= 3  # the learned workload was in use


def test_scores_use_a_fixed_scale_not_min_max() -> None:
    from berth.core.gpu import BERTH_MEASURE, weight_scale

    sched = scheduler(learnFromCluster=False, milliGpuPerPoint=10)
    plugin = sched.frameworks["berth"].plugins["GpuFragmentation"]
    state = state_with(sched, node("a", gpus=2), node("b", gpus=2), node("c", gpus=2))
    state.assume(pod("x", fraction=500), "b", (0,), 500)
    nodes = state.nodes.order()
    q = pod("q", fraction=250)
    cycle = CycleContext(q, state, "berth")
    plugin.pre_score(cycle, nodes)
    increase = plugin.score(cycle, nodes) >> 6
    scores = plugin.normalize_score(cycle, nodes, plugin.score(cycle, nodes))
    milli = increase / weight_scale(plugin._configured, BERTH_MEASURE)
    # 50 points minus one per 10 milli-GPU of added fragmentation, whatever the other nodes.
    assert list(scores) == [int(np.clip(50 - np.floor(m / 10 + 0.5), 0, 100)) for m in milli]
    # Equal nodes tie below the maximum (min-max would give both 100), and the node with a
    # half-used GPU, where a quarter adds no fragmentation, scores best.
    assert scores[0] == scores[2] < 100 and scores[1] > scores[0]


def test_gpu_models_of_the_target_workload_are_honoured() -> None:
    # The only target shape needs an A100: idle T4s are pure fragment for it, so an
    # unconstrained pod should use a T4 and keep the A100s whole.
    shapes = [{"numGpu": 1, "gpuMilli": 1000, "cpuMilli": 0, "weight": 1, "gpuModels": ["A100"]}]
    sched = scheduler(learnFromCluster=False, targetWorkload=shapes)
    state = state_with(sched, node("a100", gpus=2, model="A100"), node("t4", gpus=2, model="T4"))
    plugin = sched.frameworks["berth"].plugins["GpuFragmentation"]
    nodes = state.nodes.order()
    scores = fresh_scores(plugin, pod("w", whole=1), state, nodes)
    assert scores[list(state.nodes.names()).index("t4")] > scores[list(state.nodes.names()).index("a100")]
    assert sched.schedule(pod("w", whole=1), state, "berth").node == "t4"
    # A pod asking for a model carries it into its learned shape.
    assert shape_of(pod("m", whole=1, models=("A100", "H100"))) == (1000, 1, 1000, frozenset({"A100", "H100"}))


def test_bucketed_counts_and_an_order_independent_learned_workload() -> None:
    assert [bucket_count(c) for c in (0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 17, 24, 100)] == [
        0,
        1,
        2,
        3,
        4,
        4,
        6,
        6,
        8,
        8,
        12,
        16,
        24,
        96,
    ]
    counts = {
        (1000, 1, 1000, frozenset()): 40,
        (1000, 1, 500, frozenset()): 30,
        (0, 0, 0, frozenset()): 1,
        (2000, 2, 1000, frozenset()): 25,
    }
    shuffled = dict(sorted(counts.items(), key=lambda item: random.Random(1).random()))
    learned = learned_workload(counts, 0.95)
    assert learned == learned_workload(shuffled, 0.95)
    assert [w for _, w in learned] == [32, 24, 24]  # the rare CPU-only shape is beyond 95 %


def test_the_learned_workload_follows_placed_pods_and_is_restored_exactly() -> None:
    sched = scheduler(minLearnedPods=2)
    state = state_with(sched, node("a"), node("b"))
    plugin = sched.frameworks["berth"].plugins["GpuFragmentation"]
    assert plugin._workload(state)[0] == 0  # nothing placed: the configured shapes
    state.assume(pod("p1", fraction=300, cpu=500), "a", (0,), 300)
    state.assume(pod("p2", fraction=300, cpu=500), "a", (0,), 300)
    learned_id, workload = plugin._workload(state)
    assert learned_id > 0 and list(workload.gpu_milli) == [300] and list(workload.cpu_milli) == [500]
    state.assume(pod("p3", whole=1), "b", (0,))
    state.remove_pod("p3")  # removing what was added restores the same learned workload
    assert plugin._workload(state)[0] == learned_id


def test_milestones_grow_by_a_quarter() -> None:
    terms = sorted({milestone(n) for n in range(0, 200)})
    assert terms == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 18, 22, 27, 33, 41, 51, 63, 78, 97, 121, 151, 188]
    assert milestone(187) == 151 and milestone(188) == 188


def test_the_learning_window_is_the_oldest_pods_whatever_the_order_of_events() -> None:
    # The window must be a pure function of the placed set: after any sequence of adds and
    # removes it holds the shapes of the milestone(n) oldest placed pods (creation time, UID).
    rng = random.Random(7)
    sched = scheduler(minLearnedPods=1)
    state = state_with(sched, node("a", gpus=8, cpu=10**9))
    shapes = [dict(fraction=250), dict(fraction=500), dict(whole=1), dict(cpu=3000)]
    placed: dict[str, PodInfo] = {}
    changes = 0
    before = None
    for step in range(400):
        if placed and rng.random() < 0.3:
            uid = rng.choice(sorted(placed))
            state.remove_pod(uid)
            del placed[uid]
        else:
            uid = f"p{step:03d}"
            kind = rng.choice(shapes)
            p = pod(uid, **kind).model_copy(update={"creation_time": T0 + timedelta(seconds=rng.randrange(50))})
            state.upsert_bound_pod(p.model_copy(update={"node_name": "a"}))
            placed[uid] = p
        extension = state.extension(WorkloadExtension.KEY)
        oldest = sorted(placed.values(), key=lambda q: (q.creation_time, q.uid))[: milestone(len(placed))]
        assert extension.window == Counter(shape_of(q) for q in oldest), step
        assert extension.total == len(placed)
        current = extension.workload(0.95)[0]
        changes += current != before
        before = current
    assert changes < 200  # most events leave the learned workload as it was


def test_cpu_only_pods_are_scored_only_when_there_are_gpus() -> None:
    sched = scheduler(learnFromCluster=False)
    plugin = sched.frameworks["berth"].plugins["GpuFragmentation"]
    with_gpus = state_with(sched, node("a"))
    without = state_with(sched, NodeInfo(name="c", allocatable={"cpu": 8000}))
    cpu_pod = pod("c", cpu=2000)
    assert plugin.pre_score(CycleContext(cpu_pod, with_gpus, "berth"), with_gpus.nodes.order()).is_success
    assert plugin.pre_score(CycleContext(cpu_pod, without, "berth"), without.nodes.order()).is_skip


def test_reserve_takes_the_device_fgd_chose() -> None:
    # Target: 300-milli shares only. A 250 share on the device with 300 free (bin-packing's
    # choice) would strand 50 milli; on the idle device it strands nothing.
    shapes = [{"numGpu": 1, "gpuMilli": 300, "cpuMilli": 0, "weight": 1}]
    for weight, expected in ((10, (0,)), (None, (1,))):
        sched = (
            scheduler(learnFromCluster=False, targetWorkload=shapes)
            if weight
            else Scheduler(
                parse_config(
                    {
                        "apiVersion": "berth.io/v1alpha1",
                        "kind": "BerthSchedulerConfiguration",
                        "profiles": [{"schedulerName": "berth"}],
                    }
                )
            )
        )
        state = state_with(sched, node("a", gpus=2))
        state.assume(pod("x", fraction=700), "a", (1,), 700)
        decision = sched.schedule(pod("q", fraction=250), state, "berth")
        assert decision.gpu_devices == expected, weight
    assert gpu_inventory(state).devices.describe(0)[1]["free_milli"] == 300


def test_the_raw_score_is_score_placements_of_the_node_row() -> None:
    sched = scheduler(learnFromCluster=False)
    plugin = sched.frameworks["berth"].plugins["GpuFragmentation"]
    state = state_with(sched, node("a", gpus=4, cpu=8000))
    state.assume(pod("x", fraction=500, cpu=6000), "a", (2,), 500)
    p = pod("q", whole=1, cpu=1000)
    cycle = CycleContext(p, state, "berth")
    plugin.pre_score(cycle, state.nodes.order())
    raw = plugin.score(cycle, state.nodes.order())
    workload: TargetWorkload = plugin._configured
    expected = score_placements(
        np.array([[1000, 1000, 500, 1000]]),
        np.array([2000]),
        np.ones((1, workload.size), dtype=bool),
        PodRequest(cpu_milli=1000, num_gpu=1, gpu_milli=1000),
        workload,
    )
    assert int(raw[0]) >> 6 == int(expected.increase[0])


def test_scores_from_cached_node_fragmentation_equal_score_placements() -> None:
    # _small scores a few nodes from F(state after) - F(state before), F looked up per node
    # state; it must give _raw's (score_placements') value and device exactly, on any input.
    rng = random.Random(11)
    plugin = scheduler().frameworks["berth"].plugins["GpuFragmentation"]
    levels = (0, 0, 100, 250, 300, 500, 750, 1000, 1000, 1000, -5, 1200)
    for trial in range(60):
        shapes = Counter()
        for _ in range(rng.randint(1, 8)):
            gpus = rng.choice((0, 1, 1, 2, 4))
            milli = 0 if gpus == 0 else (rng.choice((250, 500, 1000)) if gpus == 1 else 1000)
            models = frozenset(rng.sample(("A100", "T4"), rng.randint(0, 1))) if gpus else frozenset()
            shapes[(rng.choice((0, 500, 4000, 16000)), gpus, milli, models)] += rng.randint(1, 9)
        workload = _workload_of(learned_workload(shapes, 1.0))
        constrained = any(workload.allowed_models)
        width = rng.choice((1, 2, 8))
        fragments: dict = {}
        for _ in range(5):
            gpus = rng.choice((0, 1, 1, 2, 4, 8))
            milli = 0 if gpus == 0 else (rng.choice((250, 500, 1000)) if gpus == 1 else 1000)
            shape = (rng.choice((0, 500, 4000, 32000)), gpus, milli, frozenset())
            keys, free_rows, cpus, models = [], [], [], []
            for _ in range(rng.randint(1, 6)):
                free = [rng.choice(levels) for _ in range(width)]
                cpu = rng.choice((-1000, 0, 500, 4000, 20_000, 64_000))
                model = rng.choice(("A100", "T4")) if constrained else None
                keys.append((shape, trial + 1, cpu, model, *free))
                free_rows.append(free)
                cpus.append(cpu)
                models.append(model)
            access = workload.model_access(models) if constrained else None
            expected = plugin._raw(np.array(free_rows), np.array(cpus), access, shape, workload).tolist()
            got = plugin._raw_from_fragments(fragments, keys, shape, trial + 1, workload)
            assert got == expected, (trial, shape, keys)
