"""The AgentPool fields of the NeuroNetes seed, each acted on by the pure pool folds:
``spotMaxInterruptions``, ``fallbackTrigger``, ``spotStrategy`` (``instanceTypes``,
``onInterruption``, ``maxSpotPercent``), ``cacheAware.preloadStrategy`` (``minCachedReplicas``),
``prewarmPercent``, ``queueConfig`` and ``fastScheduling.maxNodesToScore``.

Placement cases run the real engine (:mod:`.fold_kit`); scaling cases the pure policy
(:func:`berth.cells.scaling.decide_scale`) over a fixed-room probe."""

from __future__ import annotations

import pytest
from berth.schemas import NodeInfo, NodeObserved, PlacePods, PolicyObserved, SpotInterruptionNotice
from berth.schemas.agentpool import LABEL_INSTANCE_TYPE, AgentPoolSpec
from berth.schemas.policy import AgentPoolInfo
from berth.schemas.samples import h100_node

from berth.cells.pool_placement import cached_nodes, holds_model
from berth.cells.pool_scaling import PoolState, capacity_order, count_interruption, place_replica, plan
from berth.cells.pools import PoolPolicy, parse_pools
from berth.cells.scaling import ScalingInput, decide_scale, need
from berth.cells.spot_drain import DrainState, on_spot, track_bound

from .fold_kit import at, context, position, replica, small_node
from .test_pool_cell import NS
from .test_pool_cell import Cell as PoolCell
from .test_pool_cell import notice as cell_notice
from .test_pool_cell import replica as cell_replica
from .test_scaling_policy import Room, lag, policy

KEY = "serving/llama"


def pool_state(**spec: object) -> PoolState:
    base = {"model": "llama-70b", "tokensPerSecondPerReplica": 1000, "ttftSloMs": 2000, "maxReplicas": 8}
    return PoolState.of(parse_pools({"pools": {KEY: {**base, **spec}}}))


def spot_pool(**cost: object) -> PoolState:
    return pool_state(scheduling={"costOptimization": {"spotEnabled": True, **cost}})


def typed(info: NodeInfo, instance_type: str) -> NodeInfo:
    return info.model_copy(update={"labels": {**info.labels, LABEL_INSTANCE_TYPE: instance_type}})


def labelled(info: NodeInfo, **labels: str) -> NodeInfo:
    return info.model_copy(update={"labels": {**info.labels, **labels}})


def bound(ctx, drain: DrainState, state: PoolState, *pods) -> None:
    for info in pods:
        track_bound(drain, state, info)
        ctx.engine.upsert_bound_pod(info)


# -- spotMaxInterruptions ----------------------------------------------------------------------


def test_spot_max_interruptions_within_an_hour_send_the_pool_to_on_demand_until_a_quiet_hour():
    state = spot_pool(spotMaxInterruptions=2)
    policy_ = state.pools[KEY]
    ctx = context(small_node("od-0"), small_node("spot-0", spot=True))
    assert capacity_order(state, ctx, KEY, policy_, moving=False) == ["spot", "on-demand"]
    assert count_interruption(state, ctx, KEY, at(0), position(0), at(0)) == []
    [suspended] = count_interruption(state, ctx, KEY, at(1800), position(1), at(1800))
    assert suspended.record.outcome == "spot-suspended"
    assert "2 spot interruptions within 3600s (threshold 2)" in suspended.record.message
    assert capacity_order(state, ctx, KEY, policy_, moving=False) == ["on-demand"]
    limit = policy_.cost.interruption_limit  # type: ignore[union-attr]  # not None in this test's setup
    assert not state.spot[KEY].quiet_since(at(1800 + 3599), limit)
    assert state.spot[KEY].quiet_since(at(1800 + 3600), limit)
    assert capacity_order(state, ctx, KEY, policy_, moving=False) == ["spot", "on-demand"]


def test_interruptions_more_than_an_hour_apart_do_not_count_together():
    state = spot_pool(spotMaxInterruptions=2)
    ctx = context(small_node("od-0"))
    assert count_interruption(state, ctx, KEY, at(0), position(0), at(0)) == []
    assert count_interruption(state, ctx, KEY, at(3601), position(1), at(3601)) == []
    assert not state.spot[KEY].suspended


def test_spot_max_interruptions_and_an_interruption_threshold_are_one_or_the_other():
    with pytest.raises(ValueError, match="either spotMaxInterruptions"):
        spot_pool(spotMaxInterruptions=2, interruptionThreshold={"count": 3, "window": "1h"})


# -- fallbackTrigger ---------------------------------------------------------------------------


def _fallback(trigger: dict | None, state, room: Room, **cost: object):
    block = {"fallbackModel": "small", **cost, **({"fallbackTrigger": trigger} if trigger is not None else {})}
    verdict = decide_scale(
        ScalingInput(
            policy=policy(scheduling={"costOptimization": block}),
            lag=state,
            current=2,
            probe=room,
            pool_cost_per_hour=20.0,
            priced_replicas=2,
        )
    )
    assert verdict is not None
    return verdict


@pytest.mark.parametrize(
    ("trigger", "fallback"),
    [
        pytest.param(None, 10, id="no-trigger-everything-short"),
        pytest.param({"costExceeded": True, "sloAtRisk": False}, 2, id="cost-only-the-budget-cut"),
        pytest.param({"costExceeded": False, "sloAtRisk": True}, 8, id="slo-only-the-room-short"),
        pytest.param({"costExceeded": False, "sloAtRisk": False}, None, id="neither"),
    ],
)
def test_fallback_trigger_picks_which_shortfall_goes_to_the_fallback_model(trigger, fallback):
    # SLO at risk (30 s of queue against a 2 s SLO): 15 wanted, room for 5 more, budget for 3 more.
    verdict = _fallback(trigger, lag(30_000), Room(spot=0, on_demand=5), maxCostPerHour=50)
    assert verdict.replicas == 5
    assert (verdict.fallback.replicas if verdict.fallback else None) == fallback


def test_with_the_slo_met_a_short_of_room_pool_keeps_as_is_under_slo_at_risk():
    # Demand asks for 10 (steady) but nothing is queued: the SLO holds.
    met = lag(0, rate=7000)
    verdict = _fallback({"sloAtRisk": True}, met, Room(spot=0, on_demand=3))
    assert verdict.replicas == 5 and verdict.fallback is None
    assert "fallback model small not asked for 5 replica(s) (the SLO is met)" in verdict.reason
    # Without a trigger every shortfall goes to the fallback model, as before.
    assert _fallback(None, met, Room(spot=0, on_demand=3)).fallback.replicas == 5  # type: ignore[union-attr]  # not None in this test's setup


def test_cost_exceeded_false_keeps_the_over_budget_cut_from_the_fallback_model():
    over = {"maxCostPerHour": 10}
    assert _fallback(None, lag(1_000), Room(), **over).fallback is not None
    verdict = _fallback({"costExceeded": False}, lag(1_000), Room(), **over)
    assert verdict.replicas == 1 and verdict.fallback is None


# -- spotStrategy ------------------------------------------------------------------------------


def test_spot_strategy_max_spot_percent_caps_the_spot_replicas():
    cost = {"spotEnabled": True, "spotStrategy": {"maxSpotPercent": 50}}
    room = Room()
    verdict = decide_scale(
        ScalingInput(policy=policy(scheduling={"costOptimization": cost}), lag=lag(30_000), current=2, probe=room)
    )
    assert verdict is not None and verdict.replicas == 15
    # floor(50 % of 15) spot, the rest on on-demand nodes.
    assert room.asked == [(7, "spot"), (6, "on-demand")]
    assert sum(r.spot for r in verdict.placed_on) == 7


def test_max_spot_percent_given_twice_must_agree():
    with pytest.raises(ValueError, match="disagree"):
        spot_pool(maxSpotPercent=80, spotStrategy={"maxSpotPercent": 50})
    assert spot_pool(maxSpotPercent=50, spotStrategy={"maxSpotPercent": 50}).pools[KEY].cost.spot_percent_cap == 50  # type: ignore[union-attr]  # not None in this test's setup


def test_instance_types_spread_spot_replicas_and_keep_them_off_other_types():
    state = spot_pool(spotStrategy={"instanceTypes": ["p4d.24xlarge", "p3dn.24xlarge"]})
    nodes = [
        typed(small_node("a-p4d", spot=True), "p4d.24xlarge"),
        typed(small_node("b-p4d", spot=True), "p4d.24xlarge"),
        typed(small_node("c-p3dn", spot=True), "p3dn.24xlarge"),
        typed(small_node("d-g5", spot=True, cpu=16_000), "g5.48xlarge"),
    ]
    ctx = context(*nodes)
    found = plan(ctx, replica("llama", 0), state.pools[KEY], 4, ["spot"], state=state, key=KEY)
    kinds = [ctx.nodes.nodes[r.node].labels[LABEL_INSTANCE_TYPE] for r in found]
    assert kinds == ["p4d.24xlarge", "p3dn.24xlarge", "p4d.24xlarge", "p3dn.24xlarge"]


def test_a_replica_goes_to_the_instance_type_with_fewest_of_the_pools_spot_replicas():
    state = spot_pool(spotStrategy={"instanceTypes": ["p4d.24xlarge", "p3dn.24xlarge"]})
    ctx = context(
        typed(small_node("a-p4d", spot=True, cpu=16_000), "p4d.24xlarge"),
        typed(small_node("b-p3dn", spot=True), "p3dn.24xlarge"),
        small_node("c-od", cpu=16_000),
    )
    bound(ctx, DrainState(), state, replica("llama", 0, node_name="a-p4d"), replica("llama", 1, node_name="c-od"))
    outcome = place_replica(state, ctx, replica("llama", 2), KEY, moving=False)
    assert outcome.placements[0].node == "b-p3dn"


def _reclaim(on_interruption: str | None, on_demand_cpu: int):
    strategy = {"spotStrategy": {"onInterruption": on_interruption}} if on_interruption else {}
    state = spot_pool(**strategy)
    spot_nodes = (small_node("spot-0", spot=True), small_node("spot-1", spot=True))
    ctx = context(*spot_nodes, small_node("od-0", cpu=on_demand_cpu))
    drain = DrainState()
    bound(ctx, drain, state, replica("llama", 0, node_name="spot-0"), replica("llama", 1, node_name="od-0", cpu=1))
    notice = SpotInterruptionNotice(node="spot-0", issued_at=at(10), deadline=at(130))
    decisions = on_spot(drain, state, ctx, notice, position(), at(10))
    return state, ctx, [(d.record.outcome, d.record.message) for d in decisions]


def test_on_interruption_migrate_to_on_demand_replaces_on_on_demand_only():
    state, ctx, outcomes = _reclaim("migrate-to-on-demand", on_demand_cpu=4000)
    assert outcomes[1][0] == "scaled" and "room on od-0 (on-demand)" in outcomes[1][1]
    assert capacity_order(state, ctx, KEY, state.pools[KEY], moving=True) == ["on-demand"]
    # The replacement, placed while the pool moves, lands on the on-demand node.
    outcome = place_replica(state, ctx, replica("llama", 2), KEY, moving=True)
    assert outcome.placements[0].node == "od-0"
    # No on-demand room: held, never a spot replacement.
    _, _, outcomes = _reclaim("migrate-to-on-demand", on_demand_cpu=500)
    assert outcomes[1][0] == "held"


def test_on_interruption_migrate_falls_back_to_spot_and_none_surges_nothing():
    _, _, outcomes = _reclaim(None, on_demand_cpu=500)
    assert outcomes[1][0] == "scaled" and "room on spot-1 (spot)" in outcomes[1][1]
    _, _, outcomes = _reclaim("none", on_demand_cpu=4000)
    assert outcomes[1][0] == "held" and "onInterruption none" in outcomes[1][1]


# -- preloadStrategy ---------------------------------------------------------------------------

PRELOAD = {
    "enabled": True,
    "cacheHitWeight": 0,
    "preloadStrategy": {"nodes": {"labelSelector": {"matchLabels": {"node-pool": "gpu-primary"}}}},
}


def test_a_node_holds_the_model_by_its_cached_models_label_annotation_or_the_preload_selector():
    spec = AgentPoolSpec.model_validate({"model": "llama-70b", "scheduling": {"cacheAware": PRELOAD}})
    by_label = labelled(small_node("a"), **{"berth.io/cached-models": "mistral-7b, llama-70b"})
    by_annotation = small_node("b").model_copy(update={"annotations": {"berth.io/cached-models": "llama-70b"}})
    by_selector = labelled(small_node("c"), **{"node-pool": "gpu-primary"})
    other = labelled(small_node("d"), **{"node-pool": "gpu-spare", "berth.io/cached-models": "llama-8b"})
    assert [holds_model(n, spec) for n in (by_label, by_annotation, by_selector, other)] == [True, True, True, False]
    assert cached_nodes(spec, {n.name: n for n in (other, by_selector, by_label)}) == ("a", "c")


@pytest.mark.parametrize(("minimum", "expected"), [(2, "c-primary"), (1, "a-big"), (0, "a-big")])
def test_min_cached_replicas_keeps_that_many_replicas_on_nodes_with_the_model(minimum, expected):
    cache = {**PRELOAD, "preloadStrategy": {**PRELOAD["preloadStrategy"], "minCachedReplicas": minimum}}
    state = pool_state(scheduling={"cacheAware": cache})
    ctx = context(small_node("a-big", cpu=16_000), labelled(small_node("c-primary"), **{"node-pool": "gpu-primary"}))
    bound(ctx, DrainState(), state, replica("llama", 0, node_name="c-primary"))
    # One replica on a cached node: a minimum of 2 puts the next there too, although a-big is emptier.
    assert place_replica(state, ctx, replica("llama", 1), KEY, moving=False).placements[0].node == expected


# -- prewarmPercent, queueConfig ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "tokens", "expected"),
    [
        pytest.param({}, 30_000, 15, id="need-alone"),
        pytest.param({"prewarmPercent": 10}, 30_000, 17, id="ceil-1.5-warm"),
        pytest.param({"prewarmPercent": 50}, 6_000, 5, id="need-3-plus-2-warm"),
        pytest.param({"prewarmPercent": 10, "maxReplicas": 16}, 30_000, 16, id="within-maxReplicas"),
    ],
)
def test_prewarm_percent_keeps_ceil_need_times_p_over_100_extra_replicas(extra, tokens, expected):
    inputs = ScalingInput(policy=policy(**extra), lag=lag(tokens), current=1, probe=Room())
    assert need(inputs).replicas == expected
    verdict = decide_scale(inputs)
    assert verdict is not None and verdict.replicas == expected


@pytest.mark.parametrize(
    ("queue", "tokens", "expected"),
    [
        pytest.param({"autoscaleOnLag": True, "maxLagThreshold": 100}, 5_100, 5, id="lag-3100-above-100"),
        pytest.param({"autoscaleOnLag": False, "maxLagThreshold": 100}, 5_100, 3, id="off-the-drain-term"),
        pytest.param({"autoscaleOnLag": True, "maxLagThreshold": 100}, 2_050, None, id="lag-50-within"),
    ],
)
def test_queue_config_scales_on_lag_above_max_lag_threshold(queue, tokens, expected):
    verdict = decide_scale(ScalingInput(policy=policy(queueConfig=queue), lag=lag(tokens), current=2, probe=Room()))
    assert (verdict.replicas if verdict else None) == expected
    if expected == 5:
        assert verdict.reason.startswith("queue lag: 5100 tokens queued, 2 replicas take 2000 tokens/s: lag 3100")


def test_queue_config_needs_a_threshold_to_autoscale():
    with pytest.raises(ValueError, match="autoscaleOnLag needs maxLagThreshold"):
        PoolPolicy.model_validate(
            {"tokensPerSecondPerReplica": 1, "ttftSloMs": 1, "queueConfig": {"autoscaleOnLag": True}}
        )


# -- fastScheduling ----------------------------------------------------------------------------


def test_fast_scheduling_max_nodes_to_score_caps_the_replicas_cycle_deterministically():
    def placed(limit: int | None):
        fast = {"fastScheduling": {"maxNodesToScore": limit}} if limit else {}
        state = pool_state(scheduling=fast)
        ctx = context(*(small_node(f"n-{i}") for i in range(8)))
        outcome = place_replica(state, ctx, replica("llama", 0), KEY, moving=False)
        return outcome.placements[0].node, outcome.decision.feasible_nodes

    assert placed(None)[1] == 8
    node_name, feasible = placed(2)
    assert feasible == 2
    assert placed(2) == (node_name, 2)


# -- through the cell's router: inputs only, byte for byte -------------------------------------


def test_the_seeds_spot_pool_from_the_cluster_decides_from_its_inputs_alone():
    """The seed's spot-pool (its spotStrategy, spotMaxInterruptions in place of its 3-per-hour
    threshold, with a token rate and SLO so that it scales) observed from the cluster: two notices
    within the hour take it off spot, its replacement goes on-demand only, and the same inputs
    give the same decisions, byte for byte (what ``berth audit replay`` relies on)."""
    spec = {
        "model": "llama-70b",
        "tokensPerSecondPerReplica": 1000,
        "ttftSloMs": 4000,
        "maxReplicas": 8,
        "scheduling": {
            "costOptimization": {
                "spotEnabled": True,
                "sloHeadroomMs": 2000,
                "spotMaxInterruptions": 2,
                "spotStrategy": {
                    "instanceTypes": ["p4d.24xlarge", "p3dn.24xlarge"],
                    "onInterruption": "migrate-to-on-demand",
                    "maxSpotPercent": 80,
                },
            }
        },
    }
    observed = PolicyObserved(
        kind="AgentPool", observed_at=at(0), agent_pool=AgentPoolInfo(namespace=NS, name="llama", spec=spec)
    )

    def node_event(name: str, instance_type: str, spot: bool) -> NodeObserved:
        return NodeObserved(node=typed(h100_node(name, spot=spot), instance_type), observed_at=at(0))

    def run() -> list:
        cell = PoolCell()
        events = [
            observed,
            node_event("a-spot", "p4d.24xlarge", True),
            node_event("b-spot", "p3dn.24xlarge", True),
            node_event("c-spot", "p4d.24xlarge", True),
            node_event("d-od", "p4d.24xlarge", False),
            cell_replica("llama", 0, node_name="a-spot"),
            cell_replica("llama", 1, node_name="b-spot"),
            cell_notice("a-spot", seconds=10),
            cell_notice("b-spot", seconds=1800),
            cell_replica("llama", 2, seconds=1810),
        ]
        return [decision for event in events for decision in cell(event)]

    first = run()
    assert [(d.record.model_dump_json(), [c.model_dump_json() for c in d.commands]) for d in first] == [
        (d.record.model_dump_json(), [c.model_dump_json() for c in d.commands]) for d in run()
    ]
    assert ("spot-suspended", f"{NS}/llama") in [(d.record.outcome, d.record.subject) for d in first]
    [placed] = [c for d in first for c in d.commands if isinstance(c, PlacePods)]
    assert placed.placements[0].node == "d-od"
