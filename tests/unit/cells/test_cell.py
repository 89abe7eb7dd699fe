"""The decision cell's own logic (queues, assumed overlay, gangs, spot, pools) behind a fake engine."""

from __future__ import annotations

import json
from datetime import timedelta

from berth.schemas import (
    CommandResult,
    CordonNode,
    InputPosition,
    NodeObserved,
    PlacePods,
    PodDeleted,
    PodGroupInfo,
    PodObserved,
    PolicyObserved,
    PoolLagState,
    ScalePool,
    SpotInterruptionNotice,
)
from berth.schemas.samples import T0, h100_node

from berth.cells import Cell, CellConfig, PoolPolicy

from .fake_engine import FakeEngine

TOPIC = "berth.scheduler.inputs.v1"


class Feed:
    """Feeds events to a cell at consecutive offsets, collecting decisions."""

    def __init__(self, cell: Cell) -> None:
        self.cell, self.offset, self.decisions = cell, 0, []

    def __call__(self, event):
        out = self.cell.handle(event, InputPosition(topic=TOPIC, partition=0, offset=self.offset))
        self.offset += 1
        self.decisions.extend(out)
        return out


def node(name: str, gpus: int = 8, **update):
    base = h100_node(name)
    allocatable = dict(base.allocatable) | {"nvidia.com/gpu": gpus}
    return NodeObserved(node=base.model_copy(update={"allocatable": allocatable, **update}), observed_at=T0)


def pod(name: str, gpus: int = 1, *, priority: int = 0, group: str | None = None, node_name=None, seconds=0):
    from berth.schemas import PodInfo

    info = PodInfo(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name="berth",
        priority=priority,
        requests={"cpu": 1000, "memory": 2**30, "nvidia.com/gpu": gpus},
        pod_group=group,
        node_name=node_name,
        creation_time=T0,
    )
    return PodObserved(pod=info, observed_at=T0 + timedelta(seconds=seconds))


def placements(decisions):
    return [(p.name, p.node) for d in decisions for c in d.commands if isinstance(c, PlacePods) for p in c.placements]


def test_pods_are_placed_and_nothing_is_allocated_twice_before_the_cluster_confirms():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-a", gpus=1))
    first = feed(pod("p1"))
    second = feed(pod("p2"))
    assert placements(first) == [("p1", "gpu-a")]
    assert second[0].record.outcome == "unschedulable" and not second[0].commands
    assert "Insufficient" in second[0].record.message


def test_queue_order_is_priority_then_arrival():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(pod("low", priority=1))
    feed(pod("high", priority=100))
    feed(pod("mid", priority=50))
    decisions = feed(node("gpu-a", gpus=2))
    assert placements(decisions) == [("high", "gpu-a"), ("mid", "gpu-a")]


def test_a_failed_binding_releases_the_assumption_and_the_pod_is_retried():
    engine = FakeEngine()
    feed = Feed(Cell(0, CellConfig(), engine=engine))
    feed(node("gpu-a", gpus=1))
    [placed] = feed(pod("p1"))
    command = placed.commands[-1]
    retried = feed(
        CommandResult(
            command_id=command.command_id,
            decision_id=command.decision_id,
            command_type=command.type,
            status="conflict",
            reason="node gone",
            applied_at=T0,
        )
    )
    assert "remove uid-p1" in engine.calls
    assert placements(retried) == [("p1", "gpu-a")]
    assert retried[0].record.decision_id != placed.record.decision_id


def test_a_conflict_arriving_after_the_bound_echo_does_not_release_the_real_binding():
    engine = FakeEngine()
    feed = Feed(Cell(0, CellConfig(), engine=engine))
    feed(node("gpu-a", gpus=1))
    [placed] = feed(pod("p1"))
    feed(pod("p1", node_name="gpu-a"))
    command = placed.commands[-1]
    feed(
        CommandResult(
            command_id=command.command_id,
            decision_id=command.decision_id,
            command_type=command.type,
            status="conflict",
            reason="already bound",
            applied_at=T0,
        )
    )
    assert "uid-p1" in engine.pods and "remove uid-p1" not in engine.calls


def test_an_older_pending_event_delivered_again_after_the_binding_is_ignored():
    # Inputs are at-least-once: a restarted inventory re-forwards events it had already sent.
    engine = FakeEngine()
    feed = Feed(Cell(0, CellConfig(), engine=engine))
    feed(node("gpu-a", gpus=1))
    feed(node("gpu-b", gpus=1))
    feed(pod("p1"))
    feed(pod("p1", node_name="gpu-a"))
    assert feed(pod("p1")) == []
    assert engine.pods["uid-p1"][0] == "gpu-a"
    assert placements(feed(pod("p2"))) == [("p2", "gpu-b")]


def test_unchanged_unschedulable_verdicts_are_not_repeated_and_new_capacity_places_the_pod():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-a", gpus=1))
    feed(pod("big", gpus=4))
    assert feed(node("gpu-a", gpus=1, labels={"x": "y"})) == []  # retried, same verdict: silent
    decisions = feed(node("gpu-b", gpus=8))
    assert placements(decisions) == [("big", "gpu-b")]
    freed = feed(PodDeleted(uid="uid-big", namespace="ml", name="big", observed_at=T0))
    assert freed == []


def test_gangs_wait_for_min_member_then_go_as_one_command():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-a", gpus=8))
    feed(
        PolicyObserved(
            kind="PodGroup", pod_group=PodGroupInfo(namespace="ml", name="train", min_member=3), observed_at=T0
        )
    )
    held = feed(pod("t0", gpus=2, group="train"))
    assert held[0].record.outcome == "held" and "1/3" in held[0].record.message
    assert feed(pod("t1", gpus=2, group="train"))[0].record.message.endswith("2/3 members pending or running")
    [decision] = feed(pod("t2", gpus=2, group="train"))
    [command] = decision.commands
    assert decision.record.subject == "ml/train" and command.pod_group == "train"
    assert sorted(p.name for p in command.placements) == ["t0", "t1", "t2"]
    assert sorted(decision.record.pods) == ["ml/t0", "ml/t1", "ml/t2"]


def test_a_gang_that_cannot_fit_names_its_members_in_the_verdict():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-a", gpus=2))
    feed(
        PolicyObserved(
            kind="PodGroup", pod_group=PodGroupInfo(namespace="ml", name="wide", min_member=2), observed_at=T0
        )
    )
    feed(pod("w0", gpus=2, group="wide"))
    [decision] = feed(pod("w1", gpus=2, group="wide"))
    assert decision.record.outcome == "unschedulable" and decision.record.subject == "ml/wide"
    assert sorted(decision.record.pods) == ["ml/w0", "ml/w1"]
    # Single pods keep an empty list (their subject is the pod), so their hashes did not change.
    [single] = feed(pod("solo", gpus=4))
    assert single.record.pods == ()


def test_spot_notice_cordons_the_node_and_keeps_new_pods_off_it():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-a", gpus=8))
    feed(node("gpu-b", gpus=8))
    [decision] = feed(SpotInterruptionNotice(node="gpu-a", issued_at=T0, deadline=T0 + timedelta(seconds=120)))
    assert decision.record.outcome == "cordoned"
    assert isinstance(decision.commands[0], CordonNode) and decision.commands[0].node == "gpu-a"
    assert placements(feed(pod("p1"))) == [("p1", "gpu-b")]
    assert feed(SpotInterruptionNotice(node="gpu-a", issued_at=T0, deadline=T0 + timedelta(seconds=60))) == []


def test_pools_scale_up_by_the_token_rule_and_down_to_the_stabilized_need_after_cooldown():
    policy = PoolPolicy(
        tokens_per_second_per_replica=1000, ttft_slo_ms=2000, min_replicas=1, max_replicas=20, cooldown_s=300
    )
    feed = Feed(Cell(0, CellConfig(pools={"serving/llama": policy}), engine=FakeEngine()))

    def lag(tokens, rate, seconds, ready=2):
        ttft = tokens / rate * 1000 if rate else None
        return PoolLagState(
            pool="llama",
            namespace="serving",
            tokens_in_queue=tokens,
            token_rate=rate,
            smoothed_token_rate=rate,
            expected_ttft_ms=ttft,
            ready_replicas=ready,
            updated_at=T0 + timedelta(seconds=seconds),
        )

    [up] = feed(lag(30_000, 2000, 0))  # 15 s to first token; ceil(30000 / (1000 × 2)) = 15
    assert isinstance(up.commands[0], ScalePool) and up.commands[0].replicas == 15
    assert up.commands[0].previous_replicas == 2
    assert feed(lag(100, 7_000, 60)) == []  # queue short, but still cooling down
    # 7,000 tokens/s at 70 % of 1,000 each: 10 replicas, in one step (the window's highest need).
    [down] = feed(lag(100, 7_000, 301))
    assert down.commands[0].replicas == 10 and "10 is the need now (steady)" in down.record.message


def test_same_inputs_give_byte_identical_decisions():
    def run():
        feed = Feed(Cell(3, CellConfig(), engine=FakeEngine()))
        for event in [node("gpu-a", gpus=2), pod("p1"), pod("p2", gpus=2), node("gpu-b"), pod("p3", gpus=8)]:
            feed(event)
        return [
            json.dumps(d.record.model_dump(mode="json"), sort_keys=True)
            + "".join(c.model_dump_json() for c in d.commands)
            for d in feed.decisions
        ]

    first, second = run(), run()
    assert first == second and len(first) == 4
    records = [json.loads(line.split("}{")[0] + "}") if "}{" in line else json.loads(line) for line in first]
    assert len({r["decision_hash"] for r in records}) == 4
