"""maxCostPerHour in the decision cell: a pool already over its budget is scaled down to what the
budget pays for, priced from the replicas the cell knows placed (the real placement engine)."""

from __future__ import annotations

from berth.schemas import ScalePool

from .test_pool_cell import Cell, commands, lag, node, pools, replica

LLAMA = {
    "tokensPerSecondPerReplica": 1000,
    "ttftSloMs": 2000,
    "maxReplicas": 10,
    "modelLoadSeconds": 0,
    "scheduling": {"costOptimization": {"maxCostPerHour": 40}},
}


def test_a_pool_over_its_budget_is_scaled_down_with_the_reason():
    cell = Cell(pools(llama=LLAMA))
    for event in (
        node("od-0"),
        node("od-1"),
        replica("llama", 0, node_name="od-0"),
        replica("llama", 1, node_name="od-0"),
        replica("llama", 2, node_name="od-1"),
    ):
        cell(event)
    # Three 4-GPU replicas, each half of a 31.50/h node: 47.25/h > 40/h. A quiet queue.
    decisions = cell(lag("llama", 0, 500, 60, ready=3))
    [scale] = commands(decisions, ScalePool)
    assert (scale.previous_replicas, scale.replicas) == (3, 2)
    assert "over budget: 3 replicas at 15.75/h each cost 47.25/h, above maxCostPerHour 40; 2 fit" in scale.reason
    # The cluster has not removed the replica yet: the cell does not shrink the pool again.
    assert commands(cell(lag("llama", 0, 500, 65, ready=3)), ScalePool) == []
