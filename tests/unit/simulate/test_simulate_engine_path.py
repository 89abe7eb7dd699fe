"""`berth simulate` and the decision service place single pods by the same steps
(berth.core.engine.Engine.schedule): same nodes, devices and victims, preemption included."""

from __future__ import annotations

import random

from berth.core.config import default_document
from berth.core.engine import Engine
from berth.simulate import Session
from tests.unit.core.builders import node, pod


def test_session_and_decision_engine_place_pods_alike() -> None:
    rng = random.Random(8)
    nodes = [node(f"n{i}", cpu=rng.choice((2000, 4000))) for i in range(6)]
    pods = [pod(f"p{i}", cpu=rng.choice((500, 1000, 1500)), priority=rng.choice((0, 0, 100))) for i in range(40)]
    session = Session.of(nodes, [], config=None)
    engine = Engine(default_document())
    for n in nodes:
        engine.upsert_node(n)
    preempted = 0
    for p in pods:
        expected = session.place_one(p)
        outcome = engine.schedule(p)
        placed = outcome.placements[0].node if outcome.placements else None
        assert placed == expected.node, p.name
        assert tuple(v.key for v in outcome.victims) == expected.victims, p.name
        preempted += bool(expected.victims)
        assert engine.snapshot_hash() == session.engine.snapshot_hash()
    assert preempted  # the preemption path ran
