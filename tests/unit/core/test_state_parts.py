"""The parts of ClusterState on their own: the contracts the state relies on when it composes them."""

from __future__ import annotations

import numpy as np
from berth.schemas.policy import PriorityClassInfo

from berth.core.hashing import DIGEST_MODULUS
from berth.core.node_labels import LabelIndex, TaintIndex
from berth.core.node_slots import NodeSlots
from berth.core.policy_store import PolicyStore

from .builders import node, taint


def test_policy_store_digest_changes_cancel_out() -> None:
    store = PolicyStore()
    added = store.upsert_namespace("ml", {"team": "a"})
    assert added != 0 and store.upsert_namespace("ml", {"team": "a"}) == 0
    relabelled = store.upsert_namespace("ml", {"team": "b"})
    high = PriorityClassInfo(name="high", value=10)
    policy = store.upsert_policy("PriorityClass", "", "high", high)
    assert store.of_kind("PriorityClass") == [("", "high", high)] and store.get("PriorityClass", "", "high") == high
    removed = store.remove_namespace("ml") + store.remove_policy("PriorityClass", "", "high")
    assert (added + relabelled + policy + removed) % DIGEST_MODULUS == 0
    assert store.remove_namespace("ml") == 0 and store.namespace_names() == set()


def test_node_slots_reuse_the_lowest_free_slot_and_keep_name_order() -> None:
    slots = NodeSlots(3)
    for name in ("c", "a", "b"):
        slots.put(slots.claim(name), node(name))
    assert slots.full and list(slots.names_of(slots.order())) == ["a", "b", "c"]
    assert not slots.order_is_identity()
    assert slots.release("a") == 1 and slots.release("a") is None
    assert slots.get("a") is None and slots.get(1) is None
    slots.grow(5)
    assert not slots.full and slots.claim("d") == 1 and slots.slot_bound == 3
    slots.put(1, node("d"))
    assert list(slots.names()) == ["b", "c", "d"] and slots.name_of(slots.slot_of("d")) == "d"  # type: ignore[arg-type]  # "d" holds a slot


def test_label_index_codes_survive_growth_and_unindexing() -> None:
    labels = LabelIndex(2)
    labels.index(0, {"zone": "z1", "n": "7"})
    labels.index(1, {"zone": "z2"})
    labels.grow(4)
    labels.index(3, {"zone": "z1"})
    codes = labels.codes("zone")
    assert codes.shape == (4,) and codes[0] == codes[3] != codes[1] and codes[2] == 0
    labels.unindex(0, ["zone", "n"])
    assert labels.codes("zone")[0] == 0 and labels.value("zone", int(codes[3])) == "z1"
    assert labels.domain_count("zone") == 3 and labels.value_code("zone", "z9") == -1
    assert np.array_equal(labels.codes("absent"), np.zeros(4))


def test_taint_index_counts_nodes_per_kind_of_taint() -> None:
    taints = TaintIndex(2)
    hard, soft = taint("gpu"), taint("spot", effect="PreferNoSchedule")
    taints.index(0, (hard, soft))
    taints.index(1, (soft,))
    assert (taints.hard_nodes, taints.soft_nodes) == (1, 2)
    assert taints.table.shape == (2, 2) and list(taints.table[1]) == [1, -1]
    taints.unindex(0, (hard, soft))
    assert (taints.hard_nodes, taints.soft_nodes) == (0, 1) and list(taints.table[0]) == [-1, -1]
    assert taints.distinct == (hard, soft)
