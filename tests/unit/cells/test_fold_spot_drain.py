"""The spot-drain fold (berth.cells.spot_drain), called directly on DrainState over a real engine:
where bound pods run, which bound replicas count as replacements, a notice's cordon/surge/drain,
evicting old replicas as replacements bind, and giving surge replicas back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from berth.schemas import CordonNode, EvictPod, OwnerReference, ScalePool, SpotInterruptionNotice

from berth.cells.pool_scaling import PoolState
from berth.cells.pools import parse_pools
from berth.cells.spot import PoolMove
from berth.cells.spot_drain import DrainState, advance_moves, on_spot, pod_gone, track_bound

from .fold_kit import T0, at, context, pending, position, replica, small_node

KEY = "serving/llama"
DEADLINE = T0 + timedelta(minutes=2)
SPOT = {"spotEnabled": True}


def pools(cost=None) -> PoolState:
    spec = {
        "tokensPerSecondPerReplica": 1000,
        "ttftSloMs": 2000,
        "maxReplicas": 8,
        "scheduling": {"costOptimization": cost or SPOT},
    }
    return PoolState.of(parse_pools({"pools": {KEY: spec}}))


def move(olds=("uid-llama-0",), surge_left: int = 1, replacements: int = 0, evicted=()) -> PoolMove:
    return PoolMove(
        node="spot-0",
        deadline=DEADLINE,
        olds=list(olds),
        surge_left=surge_left,
        replacements=replacements,
        evicted=set(evicted),
    )


def bound_on(ctx, state: DrainState, pool_state: PoolState, *pods) -> None:
    """Pods observed bound: the drain and the pools track them, the engine holds them."""
    for info in pods:
        track_bound(state, pool_state, info)
        ctx.engine.upsert_bound_pod(info)


def notice(node: str = "spot-0") -> SpotInterruptionNotice:
    return SpotInterruptionNotice(node=node, issued_at=at(10), deadline=at(130))


def batch(name: str = "batch", **fields):
    return pending(name, namespace="ml", cpu=500, node_name="spot-0", phase="Running", **fields)


def commands(decisions, kind) -> list:
    return [c for d in decisions for c in d.commands if isinstance(c, kind)]


def outcomes(decisions) -> list[tuple[str, str]]:
    return [(d.record.outcome, d.record.subject) for d in decisions]


# -- track_bound --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("with_move", "observed", "replacements"),
    [
        pytest.param(True, [replica("llama", 1, node_name="od-0")], 1, id="new-replica-elsewhere"),
        pytest.param(
            True,
            [replica("llama", 1, node_name="od-0"), replica("llama", 2, node_name="od-1")],
            2,
            id="two-replacements",
        ),
        pytest.param(True, [replica("llama", 1, node_name="od-0")] * 2, 1, id="seen-twice-counts-once"),
        pytest.param(True, [replica("llama", 1, node_name="spot-0")], 0, id="new-replica-on-the-reclaimed-node"),
        pytest.param(True, [replica("llama", 0, node_name="spot-0")], 0, id="old-replica-echo"),
        pytest.param(True, [replica("llama", 5, node_name="od-0")], 0, id="an-old-replica-not-seen-before"),
        pytest.param(True, [replica("mistral", 1, node_name="od-0")], 0, id="another-pool"),
        pytest.param(True, [pending("plain", node_name="od-0")], 0, id="not-a-replica"),
        pytest.param(False, [replica("llama", 1, node_name="od-0")], None, id="no-open-move"),
    ],
)
def test_track_bound_counts_a_replacement_only_for_a_new_replica_off_the_reclaimed_node(
    with_move, observed, replacements
):
    state, pool_state = DrainState(), pools()
    track_bound(state, pool_state, replica("llama", 0, node_name="spot-0"))
    if with_move:
        state.moves[KEY] = move(olds=("uid-llama-0", "uid-llama-5"))
    for info in observed:
        track_bound(state, pool_state, info)
    assert (state.moves[KEY].replacements if with_move else None) == replacements
    last = observed[-1]
    assert state.pod_node[last.uid] == last.node_name
    assert state.node_pods[last.node_name][last.uid] == last


def test_track_bound_follows_a_pod_to_its_new_node():
    state, pool_state = DrainState(), pools()
    track_bound(state, pool_state, pending("p", node_name="n1"))
    track_bound(state, pool_state, pending("p", node_name="n2"))
    assert (state.pod_node, state.node_pods) == (
        {"uid-default-p": "n2"},
        {"n1": {}, "n2": {"uid-default-p": pending("p", node_name="n2")}},
    )


# -- pod_gone -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uid", "surge_left", "given_back", "olds_left", "surge_after"),
    [
        pytest.param("uid-llama-0", 2, True, ["uid-llama-1"], 1, id="old-replica-reclaimed"),
        pytest.param("uid-llama-1", 2, False, ["uid-llama-0"], 2, id="old-replica-we-evicted"),
        pytest.param("uid-llama-2", 2, False, ["uid-llama-0", "uid-llama-1"], 2, id="a-replacement"),
        pytest.param("uid-llama-0", 0, False, ["uid-llama-1"], 0, id="no-surge-left"),
        pytest.param("uid-default-plain", 2, False, ["uid-llama-0", "uid-llama-1"], 2, id="not-a-replica"),
    ],
)
def test_pod_gone_gives_a_surge_replica_back_only_for_an_old_replica_not_evicted_by_us(
    uid, surge_left, given_back, olds_left, surge_after
):
    ctx = context(small_node("spot-0", spot=True), small_node("od-0"))
    state, pool_state = DrainState(), pools()
    bound_on(
        ctx,
        state,
        pool_state,
        replica("llama", 0, node_name="spot-0"),
        replica("llama", 1, node_name="spot-0"),
        replica("llama", 2, node_name="od-0"),
        pending("plain", node_name="od-0"),
    )
    pool_state.replicas[KEY] = 3
    state.moves[KEY] = move(olds=("uid-llama-0", "uid-llama-1"), surge_left=surge_left, evicted=("uid-llama-1",))
    decisions = pod_gone(state, pool_state, ctx, uid, position(7), at(20))
    assert uid not in state.pod_node
    assert all(uid not in on_node for on_node in state.node_pods.values())
    assert (state.moves[KEY].olds, state.moves[KEY].surge_left) == (olds_left, surge_after)
    if given_back:
        assert outcomes(decisions) == [("scaled", KEY)]
        assert decisions[0].record.message == (
            "3 → 2 replicas: old replica left spot node spot-0 (reclaimed): surge replica given back"
        )
        assert [(c.previous_replicas, c.replicas) for c in commands(decisions, ScalePool)] == [(3, 2)]
        assert pool_state.replicas[KEY] == 2
    else:
        assert decisions == []
        assert pool_state.replicas[KEY] == 3


def test_pod_gone_closes_a_move_whose_last_old_replica_left():
    ctx = context(small_node("spot-0", spot=True))
    state, pool_state = DrainState(), pools()
    bound_on(ctx, state, pool_state, replica("llama", 0, node_name="spot-0"))
    state.moves[KEY] = move(surge_left=0, evicted=("uid-llama-0",))
    assert pod_gone(state, pool_state, ctx, "uid-llama-0", position(1), T0) == []
    assert state.moves == {}


def test_pod_gone_of_an_unknown_pod_changes_nothing():
    ctx = context()
    state, pool_state = DrainState(), pools()
    state.moves[KEY] = move()
    assert pod_gone(state, pool_state, ctx, "ghost", position(1), T0) == []
    assert state.moves[KEY] == move()


# -- advance_moves ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replacements", "surge_left", "evicted", "given_back", "surge_after"),
    [
        pytest.param(0, 2, [], [], 2, id="nothing-bound-yet"),
        pytest.param(1, 2, ["uid-llama-0"], [(3, 2)], 1, id="one-replacement"),
        pytest.param(2, 2, ["uid-llama-0", "uid-llama-1"], [(3, 2), (2, 1)], 0, id="two-replacements"),
        pytest.param(2, 1, ["uid-llama-0", "uid-llama-1"], [(3, 2)], 0, id="one-surge-to-give-back"),
        pytest.param(5, 2, ["uid-llama-0", "uid-llama-1"], [(3, 2), (2, 1)], 0, id="more-replacements-than-olds"),
    ],
)
def test_advance_moves_evicts_one_old_replica_per_replacement(
    replacements, surge_left, evicted, given_back, surge_after
):
    ctx = context(small_node("spot-0", spot=True), small_node("od-0"))
    state, pool_state = DrainState(), pools()
    bound_on(ctx, state, pool_state, replica("llama", 0, node_name="spot-0"), replica("llama", 1, node_name="spot-0"))
    pool_state.replicas[KEY] = 3
    state.moves[KEY] = move(olds=("uid-llama-0", "uid-llama-1"), surge_left=surge_left, replacements=replacements)
    decisions = advance_moves(state, pool_state, ctx, position(3), at(20))
    assert outcomes(decisions) == [("evicting", f"serving/{uid[4:]}") for uid in evicted]
    assert [(c.pod_uid, c.node) for c in commands(decisions, EvictPod)] == [(uid, "spot-0") for uid in evicted]
    assert [(c.previous_replicas, c.replicas) for c in commands(decisions, ScalePool)] == given_back
    for decision in decisions:
        assert {c.decision_id for c in decision.commands} == {decision.record.decision_id}
    open_move = state.moves[KEY]  # olds leave the move when the cluster deletes them
    assert (open_move.replacements, open_move.evicted, open_move.surge_left) == (0, set(evicted), surge_after)
    assert pool_state.replicas[KEY] == 3 - len(given_back)


def test_advance_moves_skips_an_old_replica_it_no_longer_sees_on_the_node():
    ctx = context(small_node("spot-0", spot=True))
    state, pool_state = DrainState(), pools()
    state.moves[KEY] = move(replacements=1)
    assert advance_moves(state, pool_state, ctx, position(3), T0) == []
    assert (state.moves[KEY].evicted, state.moves[KEY].replacements, state.moves[KEY].surge_left) == (
        {"uid-llama-0"},
        0,
        1,
    )


def test_advance_moves_closes_a_finished_move():
    state = DrainState(moves={KEY: move(olds=(), surge_left=0)})
    assert advance_moves(state, pools(), context(), position(3), T0) == []
    assert state.moves == {}


# -- on_spot ------------------------------------------------------------------------------------


def test_on_spot_cordons_surges_the_pools_and_drains_the_other_pods():
    ctx = context(small_node("spot-0", spot=True), small_node("od-0", cpu=1000))
    state, pool_state = DrainState(), pools()
    daemon = batch("agent", owner=OwnerReference(kind="DaemonSet", name="agent"))
    bound_on(
        ctx,
        state,
        pool_state,
        replica("llama", 0, node_name="spot-0"),
        replica("llama", 1, node_name="spot-0"),
        batch(),
        daemon,
    )
    decisions = on_spot(state, pool_state, ctx, notice(), position(5), at(10))
    assert outcomes(decisions) == [("cordoned", "spot-0"), ("scaled", KEY), ("evicting", "ml/batch")]
    [cordon] = commands(decisions, CordonNode)
    assert (cordon.node, cordon.decision_id) == ("spot-0", decisions[0].record.decision_id)
    assert decisions[0].record.message == (
        "spot interruption notice: node reclaimed at 09:02:10 (120s notice); cordoned"
    )
    # Room for one of the two replicas on od-0: a surge of one.
    assert [(c.previous_replicas, c.replicas) for c in commands(decisions, ScalePool)] == [(2, 3)]
    assert "surge 1 replacement(s) for serving/llama-0, serving/llama-1" in decisions[1].record.message
    assert [c.pod_uid for c in commands(decisions, EvictPod)] == ["uid-ml-batch"]
    assert state.moves == {
        KEY: PoolMove(node="spot-0", deadline=at(130), olds=["uid-llama-0", "uid-llama-1"], surge_left=1)
    }
    assert ctx.nodes.cordoned == {"spot-0"}
    assert ctx.engine.state.nodes.get("spot-0").unschedulable
    assert (pool_state.replicas[KEY], pool_state.scaled_at[KEY]) == (3, at(10))


def test_on_spot_without_room_elsewhere_holds_the_replicas():
    ctx = context(small_node("spot-0", spot=True))
    state, pool_state = DrainState(), pools()
    bound_on(ctx, state, pool_state, replica("llama", 0, node_name="spot-0"))
    decisions = on_spot(state, pool_state, ctx, notice(), position(5), at(10))
    assert outcomes(decisions) == [("cordoned", "spot-0"), ("held", KEY)]
    assert "no room elsewhere for serving/llama-0" in decisions[1].record.message
    assert state.moves == {}


def test_on_spot_counts_the_interruption_before_the_surge():
    ctx = context(small_node("spot-0", spot=True), small_node("spot-1", spot=True), small_node("od-0"))
    state = DrainState()
    pool_state = pools({**SPOT, "interruptionThreshold": {"count": 1, "window": 600}})
    bound_on(ctx, state, pool_state, replica("llama", 0, node_name="spot-0"))
    decisions = on_spot(state, pool_state, ctx, notice(), position(5), at(10))
    assert outcomes(decisions) == [("cordoned", "spot-0"), ("spot-suspended", KEY), ("scaled", KEY)]
    assert "room on od-0 (on-demand)" in decisions[2].record.message


@pytest.mark.parametrize("case", ["unknown-node", "already-cordoned"])
def test_on_spot_acts_once_per_known_node(case):
    ctx = context(small_node("spot-0", spot=True), small_node("od-0"))
    state, pool_state = DrainState(), pools()
    bound_on(ctx, state, pool_state, replica("llama", 0, node_name="spot-0"))
    if case == "already-cordoned":
        assert on_spot(state, pool_state, ctx, notice(), position(5), at(10))
        before = (dict(state.moves), dict(pool_state.replicas))
    else:
        before = ({}, {})
    target = "spot-9" if case == "unknown-node" else "spot-0"
    assert on_spot(state, pool_state, ctx, notice(target), position(6), at(11)) == []
    assert (state.moves, pool_state.replicas) == before
    assert ctx.nodes.cordoned == ({"spot-0"} if case == "already-cordoned" else set())
