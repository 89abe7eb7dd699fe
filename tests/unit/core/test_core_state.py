"""ClusterState: incremental accounting, the snapshot hash, indexes and extensions."""

from __future__ import annotations

import numpy as np
import pytest

from berth.core.framework import StateExtension
from berth.core.labels import compile_selector
from berth.core.placed_pods import PlacedPod
from berth.core.resource_columns import CPU, MEMORY, PODS
from berth.core.state import ClusterState

from .builders import GI, node, pod, selector, state_of, taint


def _row(state: ClusterState, name: str) -> dict[str, int]:
    slot = state.nodes.slot_of(name)
    return {r: int(state.resources.requested[slot, state.resources.column(r)]) for r in state.resources.names}


def test_assume_and_forget_account_requests() -> None:
    state = state_of(node("a"))
    p = pod("p", cpu=250, memory=GI, requests={"nvidia.com/gpu": 1})
    state.assume(p, "a", (3,))
    assert _row(state, "a") == {"cpu": 250, "memory": GI, "ephemeral-storage": 0, "pods": 1, "nvidia.com/gpu": 1}
    assert state.pods.get(p.uid).gpu_devices == (3,)
    assert state.forget(p.uid)
    assert _row(state, "a")["cpu"] == 0 and _row(state, "a")["pods"] == 0
    assert not state.forget(p.uid)


def test_bound_pods_replace_assumptions_and_forget_leaves_them() -> None:
    state = state_of(node("a"), node("b"))
    p = pod("p", cpu=100)
    state.assume(p, "a")
    state.upsert_bound_pod(p.model_copy(update={"node_name": "b", "phase": "Running"}))
    assert _row(state, "a")["cpu"] == 0 and _row(state, "b")["cpu"] == 100
    assert not state.forget(p.uid)  # bound, not assumed
    state.remove_pod(p.uid)
    assert _row(state, "b")["cpu"] == 0


def test_observe_pod_drops_finished_pods() -> None:
    state = state_of(node("a"))
    running = pod("p", node_name="a", phase="Running")
    state.observe_pod(running)
    assert len(state.pods) == 1
    state.observe_pod(running.model_copy(update={"phase": "Succeeded"}))
    assert len(state.pods) == 0


def test_nonzero_requests_for_scoring() -> None:
    state = state_of(node("a"))
    state.assume(pod("p", cpu=0), "a")
    slot = state.nodes.slot_of("a")
    assert state.resources.nonzero_requested[slot, CPU] == 100
    assert state.resources.nonzero_requested[slot, MEMORY] == 200 * 2**20
    assert state.resources.requested[slot, CPU] == 0 and state.resources.requested[slot, PODS] == 1


def test_pods_seen_before_their_node_are_accounted_when_it_arrives() -> None:
    state = ClusterState()
    state.upsert_bound_pod(pod("p", cpu=300, node_name="late"))
    state.upsert_node(node("late"))
    assert _row(state, "late")["cpu"] == 300
    state.remove_node("late")
    assert len(state.pods) == 1
    state.upsert_node(node("late"))
    assert _row(state, "late")["cpu"] == 300


def test_node_update_keeps_requests_and_reindexes_labels_and_taints() -> None:
    state = state_of(node("a", labels={"gpu": "h100"}))
    state.assume(pod("p", cpu=100), "a")
    state.upsert_node(node("a", labels={"gpu": "a100"}, taints=(taint("k"),), unschedulable=True))
    slot = state.nodes.slot_of("a")
    assert state.labels.value(("gpu"), int(state.labels.codes("gpu")[slot])) == "a100"
    assert state.taints.hard_nodes == 1 and state.unschedulable_nodes == 1
    assert _row(state, "a")["cpu"] == 100
    state.upsert_node(node("a"))
    assert state.taints.hard_nodes == 0 and state.unschedulable_nodes == 0
    assert state.labels.codes("gpu")[slot] == 0


def test_order_is_by_name_whatever_the_insertion_order() -> None:
    state = state_of(node("c"), node("a"), node("b"))
    assert state.nodes.names_of(state.nodes.order()) == ["a", "b", "c"]
    state.remove_node("a")
    state.upsert_node(node("aa"))
    assert state.nodes.names_of(state.nodes.order()) == ["aa", "b", "c"]


def test_grows_beyond_the_initial_capacity() -> None:
    state = state_of(*(node(f"n{i:03d}", labels={"i": str(i)}) for i in range(200)))
    assert state.capacity >= 200 and len(state.nodes) == 200
    assert state.nodes.names_of(state.nodes.order())[:2] == ["n000", "n001"]
    slot = state.nodes.slot_of("n150")
    assert state.labels.value("i", int(state.labels.codes("i")[slot])) == "150"


def test_snapshot_hash_is_order_independent_and_restored_by_inverse_operations() -> None:
    nodes = [node("a"), node("b", labels={"x": "y"}), node("c", gpu=8)]
    pods = [(pod("p1", cpu=100), "a"), (pod("p2", labels={"k": "v"}), "b")]
    first = state_of(*nodes, placed=pods)
    second = state_of(*reversed(nodes), placed=list(reversed(pods)))
    assert first.snapshot_hash() == second.snapshot_hash()
    before = first.snapshot_hash()
    extra = pod("p3", cpu=5)
    first.assume(extra, "c", (1,))
    assert first.snapshot_hash() != before
    first.forget(extra.uid)
    assert first.snapshot_hash() == before
    first.upsert_node(node("a", labels={"new": "label"}))
    assert first.snapshot_hash() != before
    first.upsert_node(node("a"))
    assert first.snapshot_hash() == before
    first.upsert_namespace("team", {"a": "b"})
    assert first.snapshot_hash() != before
    first.remove_namespace("team")
    assert first.snapshot_hash() == before


def test_placement_is_part_of_the_hash() -> None:
    a = state_of(node("a"), node("b"), placed=[(pod("p"), "a")])
    b = state_of(node("a"), node("b"), placed=[(pod("p"), "b")])
    assert a.snapshot_hash() != b.snapshot_hash()


def test_pods_matching_uses_namespace_and_labels() -> None:
    state = state_of(
        node("a"),
        placed=[
            (pod("w1", labels={"app": "web", "tier": "1"}), "a"),
            (pod("w2", labels={"app": "web"}, namespace="other"), "a"),
            (pod("d1", labels={"app": "db"}), "a"),
        ],
    )
    web = compile_selector(selector({"app": "web"}))
    assert [p.pod.name for p in state.pods.matching(["default"], web)] == ["w1"]
    assert [p.pod.name for p in state.pods.matching(None, web)] == ["w1", "w2"]
    tiered = compile_selector(selector(None, ("tier", "Exists", ())))
    assert [p.pod.name for p in state.pods.matching(None, tiered)] == ["w1"]
    not_web = compile_selector(selector(None, ("app", "NotIn", ("web",))))
    assert [p.pod.name for p in state.pods.matching(["default"], not_web)] == ["d1"]
    assert state.pods.matching(None, compile_selector(None)) == []


class _Recorder(StateExtension):
    KEY = "recorder"

    def __init__(self) -> None:
        self.capacity = 0
        self.held: dict[str, int | None] = {}
        self.nodes: dict[int, str] = {}

    def grow(self, capacity: int) -> None:
        self.capacity = capacity

    def node_upserted(self, slot, node, previous) -> None:
        self.nodes[slot] = node.name

    def node_removed(self, slot, node) -> None:
        del self.nodes[slot]

    def pod_added(self, slot, placed: PlacedPod) -> None:
        self.held[placed.uid] = slot

    def pod_removed(self, slot, placed: PlacedPod) -> None:
        del self.held[placed.uid]


def test_extensions_are_replayed_on_attach_and_kept_current() -> None:
    state = state_of(node("a"), node("b"), placed=[(pod("p"), "b")])
    recorder = _Recorder()
    state.attach(recorder)
    assert sorted(recorder.nodes.values()) == ["a", "b"]
    assert recorder.held == {pod("p").uid: state.nodes.slot_of("b")}
    state.assume(pod("q"), "a")
    state.remove_pod(pod("p").uid)
    assert recorder.held == {pod("q").uid: state.nodes.slot_of("a")}
    for i in range(100):
        state.upsert_node(node(f"x{i}"))
    assert recorder.capacity == state.capacity
    with pytest.raises(ValueError):
        state.attach(_Recorder())
    assert state.ensure_extension(_Recorder) is recorder


def test_label_int_values_follow_go_parse_int() -> None:
    state = state_of(
        node("a", labels={"n": "42"}),
        node("b", labels={"n": "-7"}),
        node("c", labels={"n": "4.2"}),
        node("d", labels={"n": " 1"}),
    )
    numbers, valid = state.labels.int_values("n")
    codes = state.labels.codes("n")
    got = {
        name: (bool(valid[codes[state.nodes.slot_of(name)]]), int(numbers[codes[state.nodes.slot_of(name)]]))
        for name in "abcd"
    }
    assert got == {"a": (True, 42), "b": (True, -7), "c": (False, 0), "d": (False, 0)}
    assert np.array_equal(state.labels.codes("missing")[:4], np.zeros(4))
