"""Cell routing: every producer of decision inputs must agree on where an object belongs."""

from __future__ import annotations

from berth.schemas.cells import cell_of_node, cell_of_pod, cell_of_pod_group, cell_of_pool, stable_hash
from berth.schemas.samples import fractional_pod, h100_node, training_pod


def test_explicit_cell_label_wins_and_wraps():
    node = h100_node().model_copy(update={"labels": {"berth.io/cell": "5"}})
    assert cell_of_node(node, 4) == 1
    pod = fractional_pod().model_copy(update={"node_selector": {"berth.io/cell": "2"}})
    assert cell_of_pod(pod, 4) == 2


def test_node_pool_keeps_a_pool_together_and_pods_selecting_it_follow():
    nodes = [h100_node(f"n-{i}").model_copy(update={"labels": {"berth.io/node-pool": "h100"}}) for i in range(10)]
    assert len({cell_of_node(node, 8) for node in nodes}) == 1
    pod = fractional_pod().model_copy(update={"node_selector": {"berth.io/node-pool": "h100"}})
    assert cell_of_pod(pod, 8) == cell_of_node(nodes[0], 8)


def test_gang_members_share_a_cell():
    members = [training_pod(f"train-{i}") for i in range(8)]
    cells = {cell_of_pod(pod, 16) for pod in members}
    assert cells == {cell_of_pod_group("ml", "train", 16)}


def test_routing_is_stable_across_processes_and_spreads():
    # blake2b, not Python's salted hash(): a fixed value proves it.
    assert stable_hash("node/gpu-0") == 0xF217651C439D8F6D
    spread = {cell_of_node(h100_node(f"gpu-{i}"), 4) for i in range(64)}
    assert spread == {0, 1, 2, 3}
    assert cell_of_pool("serving", "llama-70b", 1) == 0
