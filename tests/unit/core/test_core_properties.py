"""Properties (hypothesis): determinism, order independence, score bounds, no over-allocation."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.core.config import default_config
from berth.core.framework import MAX_NODE_SCORE
from berth.core.scheduler import Scheduler
from berth.core.state import ClusterState

from .builders import (
    GI,
    HOST,
    ZONE,
    expr,
    node,
    node_affinity,
    pod,
    pod_affinity,
    pod_term,
    spread,
    taint,
    term,
    toleration,
)

ZONES = ("z1", "z2", "z3")
APPS = ("web", "db", "cache")
SCHEDULER = Scheduler(default_config())
WEIGHTS = SCHEDULER.frameworks["berth"].weights

nodes_strategy = st.lists(
    st.builds(
        lambda i, cpu, mem, gpus, zone, tainted, cordoned: node(
            f"node-{i:02d}",
            cpu=cpu,
            memory=mem * GI,
            pods=6,
            gpu=gpus,
            labels={ZONE: zone} if zone else {},
            taints=(taint("dedicated", "gpu"),) if tainted else (),
            unschedulable=cordoned,
        ),
        st.integers(0, 99),
        st.sampled_from([1000, 2000, 4000]),
        st.sampled_from([2, 4, 8]),
        st.sampled_from([0, 4, 8]),
        st.sampled_from((None, *ZONES)),
        st.booleans(),
        st.integers(0, 9).map(lambda n: n == 0),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda n: n.name,
)


@st.composite
def pods_strategy(draw):
    count = draw(st.integers(1, 10))
    pods = []
    for i in range(count):
        app = draw(st.sampled_from(APPS))
        kind = draw(
            st.sampled_from(["plain", "gpu", "selector", "anti", "affinity", "spread", "soft-spread", "tolerant"])
        )
        fields: dict = {}
        requests = {}
        if kind == "gpu":
            requests["nvidia.com/gpu"] = draw(st.integers(1, 4))
            fields["tolerations"] = (toleration("dedicated", "Exists"),)
        elif kind == "selector":
            fields["affinity"] = node_affinity([term(expr(ZONE, "In", draw(st.sampled_from(ZONES))))])
        elif kind == "anti":
            fields["affinity"] = pod_affinity(anti_required=[pod_term({"app": app}, HOST)])
        elif kind == "affinity":
            fields["affinity"] = pod_affinity(preferred=[(draw(st.integers(1, 100)), pod_term({"app": app}, ZONE))])
        elif kind == "spread":
            fields["topology_spread_constraints"] = (spread(1, ZONE, {"app": app}),)
        elif kind == "soft-spread":
            fields["topology_spread_constraints"] = (spread(1, ZONE, {"app": app}, hard=False),)
        elif kind == "tolerant":
            fields["tolerations"] = (toleration(operator="Exists"),)
        pods.append(
            pod(
                f"pod-{i:02d}",
                cpu=draw(st.sampled_from([0, 100, 500, 1500])),
                memory=draw(st.sampled_from([0, GI, 3 * GI])),
                labels={"app": app},
                requests=requests,
                **fields,
            )
        )
    return pods


def _run(nodes, pods, *, node_order=None, seed_pods=()):
    """Build a state (nodes in ``node_order``), place ``seed_pods`` and schedule ``pods`` one by
    one, assuming each placement; returns the decisions' JSON and the final state."""
    state = ClusterState()
    for n in node_order if node_order is not None else nodes:
        state.upsert_node(n)
    for p, where, devices in seed_pods:
        state.assume(p, where, devices)
    out = []
    for p in pods:
        decision = SCHEDULER.schedule(p, state)
        out.append(decision.to_json())
        if decision.status == "placed":
            state.assume(p, decision.node, decision.gpu_devices, decision.gpu_milli)
    return out, state


PROPERTY_SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("BERTH_CORE_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY_SETTINGS
@given(nodes=nodes_strategy, pods=pods_strategy())
def test_same_inputs_give_byte_identical_decisions(nodes, pods) -> None:
    first, state1 = _run(nodes, pods)
    second, state2 = _run(nodes, pods)
    assert first == second
    assert state1.snapshot_hash() == state2.snapshot_hash()


@PROPERTY_SETTINGS
@given(nodes=nodes_strategy, pods=pods_strategy(), data=st.data())
def test_node_and_pod_insertion_order_does_not_matter(nodes, pods, data) -> None:
    # Seed the cluster with the first pods' placements, in two different orders.
    seeded, rest = pods[: len(pods) // 2], pods[len(pods) // 2 :]
    decisions, state = _run(nodes, seeded)
    placements = [
        (p, state.pods.get(p.uid).node_name, state.pods.get(p.uid).gpu_devices)
        for p in seeded
        if state.pods.get(p.uid) is not None
    ]
    shuffled_nodes = data.draw(st.permutations(nodes))
    shuffled_seed = data.draw(st.permutations(placements))
    a, state_a = _run(nodes, rest, seed_pods=placements)
    b, state_b = _run(nodes, rest, node_order=shuffled_nodes, seed_pods=shuffled_seed)
    assert state_a.snapshot_hash() == state_b.snapshot_hash()
    assert a == b


@PROPERTY_SETTINGS
@given(nodes=nodes_strategy, pods=pods_strategy())
def test_scores_stay_within_bounds(nodes, pods) -> None:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for p in pods:
        decision = SCHEDULER.schedule(p, state)
        for entry in decision.top_scores:
            for plugin, value in entry.scores:
                assert 0 <= value <= MAX_NODE_SCORE * WEIGHTS[plugin], (plugin, value)
            assert entry.total == sum(v for _, v in entry.scores)
        if decision.status == "placed":
            state.assume(p, decision.node, decision.gpu_devices)


@PROPERTY_SETTINGS
@given(nodes=nodes_strategy, pods=pods_strategy())
def test_never_over_allocates(nodes, pods) -> None:
    # Copies of the pods, again and again, until nodes fill up.
    copies = [p.model_copy(update={"uid": f"{p.uid}-{k}", "name": f"{p.name}-{k}"}) for k in range(4) for p in pods]
    _, state = _run(nodes, copies)
    for name in state.nodes.names():
        slot = state.nodes.slot_of(name)
        for column, resource in enumerate(state.resources.names):
            requested = int(state.resources.requested[slot, column])
            allocatable = int(state.resources.allocatable[slot, column])
            assert requested <= allocatable, (name, resource, requested, allocatable)


@PROPERTY_SETTINGS
@given(nodes=nodes_strategy, pods=pods_strategy())
def test_memoised_results_equal_fresh_computation(nodes, pods) -> None:
    # One long-lived state (its node memo warm and updated incrementally) against a state
    # rebuilt from scratch before every pod (cold memo): the decisions must be identical.
    warm = ClusterState()
    for n in nodes:
        warm.upsert_node(n)
    placed: list = []
    for p in pods * 2:
        p = p.model_copy(update={"uid": f"{p.uid}-{len(placed)}"})
        cold = ClusterState()
        for n in reversed(nodes):
            cold.upsert_node(n)
        for q, where, devices in placed:
            cold.assume(q, where, devices)
        a, b = SCHEDULER.schedule(p, warm), SCHEDULER.schedule(p, cold)
        assert a.to_json() == b.to_json()
        if a.status == "placed":
            warm.assume(p, a.node, a.gpu_devices)
            placed.append((p, a.node, a.gpu_devices))
        # Churn: drop the oldest placement now and then (memo rows must be invalidated).
        if len(placed) > 3 and len(placed) % 3 == 0:
            gone, _, _ = placed.pop(0)
            warm.remove_pod(gone.uid)
