"""AgentPool events (new on the policies topic) pass through the consumers already in place:
the inventory routes them to every cell, and a real decision cell takes them without effect on
placement (the engine ignores the kind for now)."""

from __future__ import annotations

from datetime import UTC, datetime

from berth.schemas import InputPosition
from berth.schemas.cluster import NodeObserved
from berth.schemas.policy import AgentPoolInfo, PolicyObserved, PolicyRemoved
from berth.schemas.samples import h100_node
from berth.services.inventory.fold import route_policy

from berth.cells import Cell, CellConfig

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POOL = PolicyObserved(
    kind="AgentPool",
    observed_at=T0,
    agent_pool=AgentPoolInfo(namespace="serving", name="llama", spec={"replicas": 2, "ttftSloMs": 500}),
)
GONE = PolicyRemoved(kind="AgentPool", namespace="serving", name="llama", observed_at=T0)


def test_the_inventory_sends_agent_pools_to_every_cell():
    assert [route.cell for route in route_policy(POOL, 3)] == [0, 1, 2]
    assert [route.cell for route in route_policy(GONE, 3)] == [0, 1, 2]


def test_a_decision_cell_takes_agent_pool_events_without_changing_its_snapshot():
    cell = Cell(0, CellConfig())
    engine = cell.engine
    position = iter(range(100))

    def feed(event):
        return cell.handle(event, InputPosition(topic="berth.scheduler.inputs.v1", partition=0, offset=next(position)))

    feed(NodeObserved(node=h100_node("gpu-1"), observed_at=T0))
    before = engine.snapshot_hash()
    assert feed(POOL) == []
    assert engine.snapshot_hash() == before
    assert feed(GONE) == []
    assert engine.snapshot_hash() == before
