"""Inference pools in the decision cell over the real placement engine: spot moves, suspension,
capacity-checked scaling with fallbacks, and AgentPools from the cluster."""

from __future__ import annotations

from datetime import timedelta

from berth.schemas import (
    EvictPod,
    InputPosition,
    NodeObserved,
    OwnerReference,
    PlacePods,
    PodDeleted,
    PodInfo,
    PodObserved,
    PolicyObserved,
    PoolLagState,
    ScalePool,
    SpotInterruptionNotice,
)
from berth.schemas.policy import AgentPoolInfo
from berth.schemas.samples import T0, h100_node

from berth import cells
from berth.cells.pools import PoolPolicy, parse_pools

NS = "serving"


class Cell:
    def __init__(self, pools: dict[str, PoolPolicy] | None = None) -> None:
        self.cell = cells.Cell(0, cells.CellConfig(pools=pools or {}))
        self.offset = 0

    def __call__(self, event):
        out = self.cell.handle(event, InputPosition(topic="t", partition=0, offset=self.offset))
        self.offset += 1
        return out


def node(name: str, *, spot: bool = False):
    return NodeObserved(node=h100_node(name, spot=spot), observed_at=T0)


def replica(pool: str, index: int, *, node_name: str | None = None, gpus: int = 4, seconds: float = 0):
    info = PodInfo(
        uid=f"uid-{pool}-{index}",
        namespace=NS,
        name=f"{pool}-{index}",
        scheduler_name="berth",
        priority=100,
        requests={"cpu": 4000, "memory": 2**34, "nvidia.com/gpu": gpus},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
        owner=OwnerReference(api_version="berth.io/v1alpha1", kind="AgentPool", name=pool, controller=True),
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        creation_time=T0 + timedelta(seconds=index),
    )
    return PodObserved(pod=info, observed_at=T0 + timedelta(seconds=seconds))


def lag(pool: str, tokens: int, rate: float, seconds: float, ready: int | None = None):
    return PoolLagState(
        pool=pool,
        namespace=NS,
        tokens_in_queue=tokens,
        token_rate=rate,
        smoothed_token_rate=rate,
        expected_ttft_ms=tokens / rate * 1000 if rate else None,
        ready_replicas=ready,
        updated_at=T0 + timedelta(seconds=seconds),
    )


def notice(node_name: str, seconds: float = 10, notice_s: float = 120):
    at = T0 + timedelta(seconds=seconds)
    return SpotInterruptionNotice(node=node_name, issued_at=at, deadline=at + timedelta(seconds=notice_s))


def commands(decisions, kind):
    return [c for d in decisions for c in d.commands if isinstance(c, kind)]


def outcomes(decisions):
    return [(d.record.outcome, d.record.subject) for d in decisions]


def pools(**specs):
    return parse_pools({"pools": {f"{NS}/{name}": spec for name, spec in specs.items()}})


LLAMA = {
    "tokensPerSecondPerReplica": 1000,
    "ttftSloMs": 2000,
    "maxReplicas": 8,
    "scheduling": {"costOptimization": {"spotEnabled": True, "maxSpotPercent": 100}},
}


def test_spot_notice_surges_on_demand_replacements_then_evicts_and_gives_the_surge_back():
    cell = Cell(pools(llama=LLAMA))
    for event in (
        node("spot-0", spot=True),
        node("spot-1", spot=True),
        node("od-0"),
        replica("llama", 0, node_name="spot-0"),
        replica("llama", 1, node_name="spot-1"),
    ):
        assert cell(event) == []
    at_notice = cell(notice("spot-0"))
    assert outcomes(at_notice) == [("cordoned", "spot-0"), ("scaled", "serving/llama")]
    [surge] = commands(at_notice, ScalePool)
    assert (surge.previous_replicas, surge.replicas) == (2, 3)
    assert "surge 1 replacement(s) for serving/llama-0" in at_notice[1].record.message

    # The pool's controller creates the replacement; it goes to the on-demand node first, though
    # spot-1 has room and is cheaper.
    [placed] = commands(cell(replica("llama", 2, seconds=12)), PlacePods)
    assert placed.placements[0].node == "od-0"

    # Bound: the old replica is evicted and the surge replica given back, in one decision.
    bound = cell(replica("llama", 2, node_name="od-0", seconds=13))
    assert outcomes(bound) == [("evicting", "serving/llama-0")]
    [evict] = commands(bound, EvictPod)
    assert (evict.pod_uid, evict.node) == ("uid-llama-0", "spot-0")
    [give_back] = commands(bound, ScalePool)
    assert (give_back.previous_replicas, give_back.replicas) == (3, 2)
    assert (
        cell(
            PodDeleted(
                uid="uid-llama-0",
                namespace=NS,
                name="llama-0",
                node_name="spot-0",
                observed_at=T0 + timedelta(seconds=14),
            )
        )
        == []
    )
    assert cell.cell.drain.moves == {}


def test_without_room_elsewhere_the_replicas_stay_until_the_reclaim_and_other_pods_are_drained():
    cell = Cell(pools(llama=LLAMA))
    plain = PodInfo(
        uid="uid-batch",
        namespace="ml",
        name="batch",
        scheduler_name="berth",
        node_name="spot-0",
        phase="Running",
        requests={"cpu": 1000},
        creation_time=T0,
    )
    for event in (
        node("spot-0", spot=True),
        replica("llama", 0, node_name="spot-0", gpus=8),
        PodObserved(pod=plain, observed_at=T0),
    ):
        cell(event)
    decisions = cell(notice("spot-0"))
    assert outcomes(decisions) == [("cordoned", "spot-0"), ("held", "serving/llama"), ("evicting", "ml/batch")]
    assert "no room elsewhere" in decisions[1].record.message
    assert commands(decisions, ScalePool) == []
    assert [c.pod_uid for c in commands(decisions, EvictPod)] == ["uid-batch"]


def test_interruptions_past_the_threshold_suspend_spot_for_the_pool_until_a_quiet_window():
    spec = {
        **LLAMA,
        "scheduling": {
            "costOptimization": {"spotEnabled": True, "interruptionThreshold": {"count": 2, "window": "1h"}}
        },
    }
    cell = Cell(pools(llama=spec))
    for event in (
        node("spot-0", spot=True),
        node("spot-1", spot=True),
        node("spot-2", spot=True),
        node("od-0"),
        replica("llama", 0, node_name="spot-0"),
        replica("llama", 1, node_name="spot-1"),
    ):
        cell(event)
    assert ("spot-suspended", "serving/llama") not in outcomes(cell(notice("spot-0", seconds=10)))
    second = cell(notice("spot-1", seconds=20))
    assert ("spot-suspended", "serving/llama") in outcomes(second)
    # Suspended: even outside a move a new replica must not go to spot-2.
    cell.cell.drain.moves.clear()
    [placed] = commands(cell(replica("llama", 5, seconds=30)), PlacePods)
    assert placed.placements[0].node == "od-0"
    assert ("spot-resumed", "serving/llama") not in outcomes(cell(lag("llama", 0, 100, 1800)))
    assert ("spot-resumed", "serving/llama") in outcomes(cell(lag("llama", 0, 100, 20 + 3600)))


def test_scale_up_never_asks_for_more_than_fits_and_sends_the_rest_to_the_fallback_model():
    big = {
        "tokensPerSecondPerReplica": 1000,
        "ttftSloMs": 2000,
        "maxReplicas": 10,
        "modelLoadSeconds": 0,
        "scheduling": {"costOptimization": {"fallbackModel": "llama-8b"}},
    }
    small = {
        "model": "llama-8b",
        "tokensPerSecondPerReplica": 4000,
        "ttftSloMs": 2000,
        "maxReplicas": 4,
        "gpuRequirements": {"count": 1},
    }
    cell = Cell(pools(llama=big, **{"llama-small": small}))
    for event in (node("od-0"), replica("llama", 0, node_name="od-0")):
        cell(event)
    # 20,000 tokens → 10 replicas wanted; the node's 8 GPUs hold one more 4-GPU replica.
    decisions = cell(lag("llama", 20_000, 1000, 60, ready=1))
    scales = {c.pool: c for c in commands(decisions, ScalePool)}
    assert (scales["llama"].previous_replicas, scales["llama"].replicas) == (1, 2)
    assert "capacity for 1 of 9 more replica(s)" in decisions[0].record.message
    # The rest (8 replicas × 1000 tokens/s) would go to the small model, but no GPU is left.
    assert "llama-small" not in scales
    # A new node: the replica asked for before (not created yet) keeps its room, so the big pool
    # gets two more; the rest goes to the small model's pool.
    cell(node("od-1"))
    decisions = cell(lag("llama", 20_000, 1000, 120, ready=1))
    scales = {c.pool: c for c in commands(decisions, ScalePool)}
    assert (scales["llama"].previous_replicas, scales["llama"].replicas) == (2, 4)
    assert "llama-small" not in scales


def test_the_cost_ceiling_stops_the_pool_and_the_fallback_model_takes_the_rest():
    big = {
        "tokensPerSecondPerReplica": 1000,
        "ttftSloMs": 2000,
        "maxReplicas": 10,
        "modelLoadSeconds": 0,
        "scheduling": {"costOptimization": {"fallbackModel": "llama-8b", "maxCostPerHour": 40}},
    }
    small = {
        "model": "llama-8b",
        "tokensPerSecondPerReplica": 4000,
        "ttftSloMs": 2000,
        "maxReplicas": 4,
        "gpuRequirements": {"count": 1},
    }
    cell = Cell(pools(llama=big, **{"llama-small": small}))
    for event in (node("od-0"), node("od-1"), replica("llama", 0, node_name="od-0")):
        cell(event)
    decisions = cell(lag("llama", 20_000, 1000, 60, ready=1))
    scales = {c.pool: c for c in commands(decisions, ScalePool)}
    # A 4-GPU replica is half of a 31.50/h node: 15.75/h. 40/h pays for the one running and one more.
    assert (scales["llama"].previous_replicas, scales["llama"].replicas) == (1, 2)
    assert "maxCostPerHour 40 allows 1 of 3" in decisions[0].record.message
    # 8 replicas short × 1000 tokens/s = 8000 tokens/s = 2 replicas of the small model (4000 each).
    assert (scales["llama-small"].previous_replicas, scales["llama-small"].replicas) == (1, 3)
    assert "fallback for serving/llama (8 replica(s) short)" in decisions[1].record.message


def test_an_agent_pool_from_the_cluster_adds_a_pool_and_a_bad_one_is_reported_once():
    cell = Cell()
    spec = {
        "model": "m",
        "replicas": 1,
        "tokensPerSecondPerReplica": 1000,
        "ttftSloMs": 1000,
        "maxReplicas": 5,
        "modelLoadSeconds": 0,
    }
    observed = PolicyObserved(
        kind="AgentPool", observed_at=T0, agent_pool=AgentPoolInfo(namespace=NS, name="chat", spec=spec)
    )
    assert cell(observed) == []
    [scaled] = cell(lag("chat", 4000, 1000, 5))
    assert scaled.record.outcome == "scaled" and commands([scaled], ScalePool)[0].replicas == 4
    bad = PolicyObserved(
        kind="AgentPool",
        observed_at=T0,
        agent_pool=AgentPoolInfo(namespace=NS, name="chat", spec={**spec, "minReplicas": 9}),
    )
    [held] = cell(bad)
    assert held.record.outcome == "held"
    assert "minReplicas (9) must not exceed maxReplicas (5)" in held.record.message
    assert cell(bad) == []


def test_pool_decisions_are_deterministic():
    def run():
        cell = Cell(pools(llama=LLAMA))
        out = []
        for event in (
            node("spot-0", spot=True),
            node("od-0"),
            replica("llama", 0, node_name="spot-0"),
            lag("llama", 3000, 1000, 5),
            notice("spot-0"),
            replica("llama", 3, seconds=12),
            replica("llama", 3, node_name="od-0", seconds=13),
        ):
            out.extend(cell(event))
        return out

    first, second = run(), run()
    assert [(d.record.model_dump_json(), [c.model_dump_json() for c in d.commands]) for d in first] == [
        (d.record.model_dump_json(), [c.model_dump_json() for c in d.commands]) for d in second
    ]
    assert [d.record.outcome for d in first] == ["scaled", "cordoned", "scaled", "placed", "evicting"]
    ids = [d.record.decision_id for d in first] + [c.command_id for d in first for c in d.commands]
    assert len(ids) == len(set(ids))
