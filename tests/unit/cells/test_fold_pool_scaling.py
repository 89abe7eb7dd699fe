"""The pool-scaling fold (berth.cells.pool_scaling), called directly on PoolState over a real
engine: members, AgentPool policies, replica counts, spot suspension, capacity classes, replica
templates, scale decisions, replica placement and scaling on lag."""

from __future__ import annotations

from typing import Any

import pytest
from berth.schemas import PolicyObserved, PoolLagState, ScalePool
from berth.schemas.policy import AgentPoolInfo
from pydantic import ValidationError

from berth.cells.pool_scaling import (
    PoolState,
    capacity_order,
    count_interruption,
    current_replicas,
    drop_agent_pool,
    member_gone,
    on_agent_pool,
    on_lag,
    outstanding,
    place_replica,
    replica_template,
    scale,
    spot_suspended,
    track_member,
)
from berth.cells.pools import PoolPolicy, parse_pools
from berth.cells.queue import observe_pending
from berth.cells.spot import SpotHistory

from .fold_kit import T0, at, context, pending, position, replica, small_node

KEY = "serving/llama"
SCALABLE = {"tokensPerSecondPerReplica": 1000, "ttftSloMs": 2000, "maxReplicas": 4}


def policy(cost: dict[str, Any] | None = None, **spec: Any) -> PoolPolicy:
    """The pools file's policy of serving/llama: SCALABLE, with ``spec`` over it and ``cost`` as
    its costOptimization block."""
    document = {**SCALABLE, **spec}
    if cost is not None:
        document["scheduling"] = {"costOptimization": cost}
    return parse_pools({"pools": {KEY: document}})[KEY]


def pools_state(*policies: PoolPolicy) -> PoolState:
    return PoolState.of({KEY: policies[0]} if policies else {})


def agent_pool(spec: dict[str, Any] | None, name: str = "llama") -> PolicyObserved:
    info = AgentPoolInfo(namespace="serving", name=name, spec=spec) if spec is not None else None
    return PolicyObserved(kind="AgentPool", agent_pool=info, observed_at=T0)


def lag_state(*, tokens: int = 40000, ready: int | None = 1, seconds: float = 10) -> PoolLagState:
    return PoolLagState(
        pool="llama",
        namespace="serving",
        tokens_in_queue=tokens,
        token_rate=4000,
        smoothed_token_rate=4000,
        expected_ttft_ms=tokens / 4,
        ready_replicas=ready,
        updated_at=at(seconds),
    )


def bound_members(state: PoolState, ctx, *nodes: str) -> None:
    """One bound replica of serving/llama per node name, held by the engine too."""
    for index, name in enumerate(nodes):
        member = replica("llama", index, node_name=name)
        track_member(state, member)
        ctx.engine.upsert_bound_pod(member)


def scale_commands(decisions) -> list[tuple[int, int]]:
    return [(c.previous_replicas, c.replicas) for d in decisions for c in d.commands if isinstance(c, ScalePool)]


# -- members ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "results", "members"),
    [
        pytest.param([pending("plain", node_name="n1")], [(None, False)], {}, id="not-a-replica"),
        pytest.param([replica("llama", 0, node_name="n1")], [(KEY, True)], {KEY: {"uid-llama-0"}}, id="new-replica"),
        pytest.param(
            [replica("llama", 0, node_name="n1"), replica("llama", 0, node_name="n2")],
            [(KEY, True), (KEY, False)],
            {KEY: {"uid-llama-0"}},
            id="seen-again-is-not-new",
        ),
        pytest.param(
            [replica("llama", 0, node_name="n1"), replica("mistral", 0, node_name="n1")],
            [(KEY, True), ("serving/mistral", True)],
            {KEY: {"uid-llama-0"}, "serving/mistral": {"uid-mistral-0"}},
            id="two-pools",
        ),
    ],
)
def test_track_member(pods, results, members):
    state = pools_state()
    assert [track_member(state, info) for info in pods] == results
    assert {key: set(by_uid) for key, by_uid in state.members.items()} == members
    latest = {info.uid: info for info in pods}
    assert all(stored == latest[uid] for by_uid in state.members.values() for uid, stored in by_uid.items())


@pytest.mark.parametrize(
    ("uid", "pool", "left"),
    [
        pytest.param("uid-llama-0", KEY, {"uid-llama-1"}, id="replica"),
        pytest.param("uid-other", None, {"uid-llama-0", "uid-llama-1"}, id="not-a-replica"),
    ],
)
def test_member_gone(uid, pool, left):
    state = pools_state()
    track_member(state, replica("llama", 0, node_name="n1"))
    track_member(state, replica("llama", 1, node_name="n1"))
    assert member_gone(state, uid) == pool
    assert (set(state.members[KEY]), uid in state.pod_pool) == (left, False)


# -- AgentPools ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file_policy", "spec", "moving", "max_replicas", "replicas"),
    [
        pytest.param(None, {**SCALABLE, "maxReplicas": 6, "replicas": 3}, (), 6, 3, id="cluster-only-pool"),
        pytest.param(policy(), {"maxReplicas": 9}, (), 9, None, id="spec-over-the-file"),
        pytest.param(policy(), {"maxReplicas": 9, "replicas": 2}, (KEY,), 9, None, id="count-kept-while-moving"),
        pytest.param(policy(), {"replicas": 2}, (), 4, 2, id="kubectl-scale"),
    ],
)
def test_on_agent_pool_sets_the_policy(file_policy, spec, moving, max_replicas, replicas):
    ctx = context()
    state = pools_state(file_policy) if file_policy is not None else pools_state()
    assert on_agent_pool(state, ctx, agent_pool(spec), position(1), T0, moving) == []
    assert state.pools[KEY].max_replicas == max_replicas
    assert state.replicas.get(KEY) == replicas


def test_on_agent_pool_not_scalable_and_not_in_the_file_is_not_scaled():
    ctx = context()
    state = pools_state()
    state.pools[KEY] = policy()  # e.g. a scalable spec seen before
    assert on_agent_pool(state, ctx, agent_pool({"maxReplicas": 3}), position(1), T0, ()) == []
    assert KEY not in state.pools


def test_an_agent_pool_event_without_its_object_never_reaches_the_fold():
    # The contract refuses it at the consumer's door (it goes to the dead-letter topic), so the
    # fold never sees a PolicyObserved of kind AgentPool without its AgentPool.
    with pytest.raises(ValidationError, match="must carry agent_pool"):
        agent_pool(None)


@pytest.mark.parametrize(
    ("file_policy", "suffix"),
    [
        pytest.param(None, "", id="cluster-only"),
        pytest.param(policy(), "; the pools file's policy stays", id="file-policy-stays"),
    ],
)
def test_on_agent_pool_invalid_is_held_once(file_policy, suffix):
    ctx = context()
    state = pools_state(file_policy) if file_policy is not None else pools_state()
    before = dict(state.pools)
    invalid = agent_pool({**SCALABLE, "minReplicas": 5, "maxReplicas": 2})
    [held] = on_agent_pool(state, ctx, invalid, position(1), T0, ())
    message = held.record.message
    assert (held.record.outcome, held.record.subject, held.commands) == ("held", KEY, ())
    assert message.startswith(f"AgentPool {KEY} ignored: ") and message.endswith(suffix)
    assert "minReplicas (5) must not exceed maxReplicas (2)" in message
    assert state.pools == before
    assert on_agent_pool(state, ctx, invalid, position(2), T0, ()) == []  # unchanged: not repeated


@pytest.mark.parametrize(
    ("in_file", "left"),
    [
        pytest.param(True, {KEY: policy()}, id="back-to-the-file"),
        pytest.param(False, {}, id="gone"),
    ],
)
def test_drop_agent_pool(in_file, left):
    state = pools_state(policy()) if in_file else pools_state()
    state.pools[KEY] = policy(maxReplicas=9)
    drop_agent_pool(state, KEY)
    assert state.pools == left


# -- replica counts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "ready", "bound", "waiting", "pool_policy", "current"),
    [
        pytest.param(5, 3, 1, 1, policy(), 5, id="count-asked-for"),
        pytest.param(None, 3, 1, 1, policy(), 3, id="ready-replicas-of-the-lag"),
        pytest.param(None, None, 1, 1, policy(), 2, id="bound-and-pending"),
        pytest.param(None, None, 0, 0, policy(replicas=4), 4, id="policy-initial"),
        pytest.param(None, None, 0, 0, policy(minReplicas=0), 1, id="at-least-one"),
        pytest.param(None, None, 0, 0, None, 0, id="no-policy"),
    ],
)
def test_current_replicas(asked, ready, bound, waiting, pool_policy, current):
    ctx = context(small_node("n1"))
    state = pools_state()
    if asked is not None:
        state.replicas[KEY] = asked
    bound_members(state, ctx, *["n1"] * bound)
    for index in range(waiting):
        observe_pending(ctx.queue, replica("llama", 10 + index), position(index))
    lag = lag_state(ready=ready) if ready is not None else None
    assert current_replicas(state, ctx, KEY, pool_policy, lag) == current


@pytest.mark.parametrize(
    ("current", "bound", "waiting", "missing"),
    [
        pytest.param(3, 1, 0, 2, id="two-asked-for-not-seen"),
        pytest.param(3, 1, 1, 1, id="pending-counts"),
        pytest.param(1, 2, 0, 0, id="more-than-asked"),
    ],
)
def test_outstanding(current, bound, waiting, missing):
    ctx = context(small_node("n1"))
    state = pools_state(policy())
    bound_members(state, ctx, *["n1"] * bound)
    for index in range(waiting):
        observe_pending(ctx.queue, replica("llama", 10 + index), position(index))
    template = replica("llama", 99)
    assert outstanding(state, ctx, KEY, template, current) == [template] * missing
    assert outstanding(state, ctx, KEY, None, current) == []


def test_replica_template_is_the_newest_replica_known_as_pending():
    ctx = context(small_node("n1"))
    state = pools_state(policy())
    bound_members(state, ctx, "n1", "n1")
    observe_pending(ctx.queue, replica("llama", 1, seconds=-10), position(1))  # older than both
    template = replica_template(state, ctx, KEY, policy())
    assert template == replica("llama", 1, node_name="n1").model_copy(update={"node_name": None, "phase": "Pending"})


@pytest.mark.parametrize(
    ("pool_policy", "built"),
    [
        pytest.param(policy(gpuRequirements={"count": 1}), True, id="from-gpu-requirements"),
        pytest.param(policy(), False, id="nothing-says-what-it-is"),
    ],
)
def test_replica_template_without_replicas_known(pool_policy, built):
    template = replica_template(pools_state(pool_policy), context(), KEY, pool_policy)
    assert (template is not None) is built
    if built:
        assert (template.namespace, template.requests.get("nvidia.com/gpu"), template.phase) == (
            "serving",
            1,
            "Pending",
        )


# -- spot interruptions -------------------------------------------------------------------------


THRESHOLD = {"spotEnabled": True, "interruptionThreshold": {"count": 2, "window": 60}}


@pytest.mark.parametrize(
    ("cost", "seconds", "suspends"),
    [
        pytest.param(THRESHOLD, [0], [False], id="first"),
        pytest.param(THRESHOLD, [0, 30], [False, True], id="second-within-the-window"),
        pytest.param(THRESHOLD, [0, 90], [False, False], id="second-after-the-window"),
        pytest.param(THRESHOLD, [0, 30, 40], [False, True, False], id="suspended-once"),
        pytest.param({"spotEnabled": True}, [0, 1, 2], [False, False, False], id="no-threshold"),
    ],
)
def test_count_interruption(cost, seconds, suspends):
    ctx = context()
    state = pools_state(policy(cost))
    results = [count_interruption(state, ctx, KEY, at(s), position(i), at(s)) for i, s in enumerate(seconds)]
    assert [bool(r) for r in results] == suspends
    assert spot_suspended(state, KEY) is any(suspends)
    for decisions in results:
        for decision in decisions:
            assert (decision.record.outcome, decision.record.subject, decision.record.message) == (
                "spot-suspended",
                KEY,
                "2 spot interruptions within 60s (threshold 2): the pool's replicas go "
                "to on-demand nodes until 60s pass without one",
            )


def test_spot_suspended_of_a_pool_never_interrupted():
    assert spot_suspended(pools_state(policy()), KEY) is False


# -- capacity classes ---------------------------------------------------------------------------


SPOT = {"spotEnabled": True}
POOL_NODES = (small_node("spot-0", spot=True), small_node("spot-1", spot=True), small_node("od-0"), small_node("od-1"))


@pytest.mark.parametrize(
    ("cost", "moving", "suspended", "on_nodes", "order"),
    [
        pytest.param(None, False, False, (), ["any"], id="no-cost-policy"),
        pytest.param(None, True, False, (), ["on-demand", "any"], id="no-cost-policy-moving"),
        pytest.param({"enabled": False, "spotEnabled": True}, False, False, (), ["any"], id="cost-policy-disabled"),
        pytest.param({"spotEnabled": False}, False, False, (), ["on-demand"], id="spot-disabled"),
        pytest.param({"spotEnabled": False}, True, False, (), ["on-demand"], id="spot-disabled-moving"),
        pytest.param(SPOT, False, False, (), ["spot", "on-demand"], id="spot-first"),
        pytest.param(SPOT, True, False, (), ["on-demand", "spot"], id="moving-on-demand-first"),
        pytest.param(SPOT, False, True, (), ["on-demand"], id="spot-suspended"),
        pytest.param(SPOT, True, True, (), ["on-demand"], id="spot-suspended-moving"),
        pytest.param({**SPOT, "maxSpotPercent": 0}, False, False, (), ["on-demand"], id="max-spot-0"),
        pytest.param({**SPOT, "maxSpotPercent": 50}, False, False, (), ["on-demand"], id="max-spot-50-first-replica"),
        pytest.param(
            {**SPOT, "maxSpotPercent": 50},
            False,
            False,
            ("od-0",),
            ["spot", "on-demand"],
            id="max-spot-50-second-replica-may-be-spot",
        ),
        pytest.param(
            {**SPOT, "maxSpotPercent": 50},
            False,
            False,
            ("spot-0",),
            ["on-demand"],
            id="max-spot-50-one-on-spot-already",
        ),
        pytest.param(
            {**SPOT, "maxSpotPercent": 50},
            False,
            False,
            ("spot-0", "od-0", "od-1"),
            ["spot", "on-demand"],
            id="max-spot-50-two-of-four",
        ),
        pytest.param(
            {**SPOT, "maxSpotPercent": 50},
            True,
            False,
            ("spot-0", "od-0"),
            ["on-demand"],
            id="max-spot-50-moving-over-the-share",
        ),
        pytest.param(
            {**SPOT, "maxSpotPercent": 100},
            False,
            False,
            ("spot-0", "spot-1"),
            ["spot", "on-demand"],
            id="max-spot-100",
        ),
        pytest.param(
            {**SPOT, "maxSpotPercent": 50},
            False,
            False,
            ("gone",),
            ["on-demand"],
            id="replica-on-an-unknown-node-not-counted",
        ),
    ],
)
def test_capacity_order(cost, moving, suspended, on_nodes, order):
    ctx = context(*POOL_NODES)
    pool_policy = policy(cost)
    state = pools_state(pool_policy)
    for index, name in enumerate(on_nodes):
        track_member(state, replica("llama", index, node_name=name))
    if suspended:
        state.spot[KEY] = SpotHistory(times=[T0], suspended_since=T0)
    assert capacity_order(state, ctx, KEY, pool_policy, moving=moving) == order


def test_capacity_order_without_a_policy():
    state = pools_state()
    assert capacity_order(state, context(), KEY, None, moving=False) == ["any"]
    assert capacity_order(state, context(), KEY, None, moving=True) == ["on-demand", "any"]


# -- scale --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "replicas", "scaled_at", "part"),
    [
        pytest.param(2, 3, at(5), None, id="up"),
        pytest.param(3, 1, None, "give-back/uid-x", id="down-with-a-part"),
    ],
)
def test_scale_records_and_commands(current, replicas, scaled_at, part):
    ctx = context()
    state = pools_state(policy())
    decision = scale(state, ctx, KEY, current, replicas, "because", position(4), T0, scaled_at=scaled_at, part=part)
    assert state.replicas[KEY] == replicas
    assert state.scaled_at.get(KEY) == scaled_at
    record = decision.record
    assert (record.outcome, record.subject, record.message) == (
        "scaled",
        KEY,
        f"{current} → {replicas} replicas: because",
    )
    [command] = decision.commands
    assert (
        command.decision_id,
        command.namespace,
        command.pool,
        command.previous_replicas,
        command.replicas,
        command.reason,
    ) == (record.decision_id, "serving", "llama", current, replicas, "because")
    other = scale(pools_state(policy()), ctx, KEY, current, replicas, "because", position(4), T0, part="other")
    assert other.record.decision_id != record.decision_id  # a part tells two decisions of one input apart


# -- placing a replica --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cost", "moving", "nodes", "where"),
    [
        pytest.param(SPOT, False, POOL_NODES, "spot", id="spot-first"),
        pytest.param(SPOT, True, POOL_NODES, "on-demand", id="moving-on-demand-first"),
        pytest.param({"spotEnabled": False}, False, POOL_NODES, "on-demand", id="spot-disabled"),
        pytest.param(
            SPOT,
            True,
            (small_node("spot-0", spot=True), small_node("od-0", cpu=500)),
            "spot",
            id="moving-falls-back-to-spot",
        ),
        pytest.param({"spotEnabled": False}, False, (small_node("spot-0", spot=True),), None, id="no-on-demand-room"),
    ],
)
def test_place_replica_follows_the_capacity_order(cost, moving, nodes, where):
    ctx = context(*nodes)
    state = pools_state(policy(cost))
    outcome = place_replica(state, ctx, replica("llama", 0), KEY, moving=moving)
    if where is None:
        assert not outcome.placed and outcome.message
        return
    [placement] = outcome.placements
    assert ctx.nodes.nodes[placement.node].capacity_type == where


# -- lag ----------------------------------------------------------------------------------------


def test_on_lag_of_an_unknown_pool_decides_nothing():
    ctx = context(small_node("n1"))
    state = pools_state()
    assert on_lag(state, ctx, lag_state(), position(1), T0, ()) == []
    assert state.memory == {}


@pytest.mark.parametrize(
    ("node_cpu", "asked", "outcomes", "scaled"),
    [
        pytest.param(4000, None, ["scaled"], [(1, 4)], id="room-for-max-replicas"),
        pytest.param(2000, None, ["scaled"], [(1, 2)], id="capacity-for-one-more"),
        pytest.param(1000, None, ["held"], [], id="no-room"),
        pytest.param(4000, 12, ["scaled"], [(12, 4)], id="above-max-replicas"),
    ],
)
def test_on_lag_scales_within_the_room_there_is(node_cpu, asked, outcomes, scaled):
    ctx = context(small_node("n1", cpu=node_cpu), *([small_node("n2")] if node_cpu == 4000 else []))
    state = pools_state(policy())
    bound_members(state, ctx, "n1")
    if asked is not None:
        state.replicas[KEY] = asked
    decisions = on_lag(state, ctx, lag_state(), position(1), at(10), ())
    assert [d.record.outcome for d in decisions] == outcomes
    assert scale_commands(decisions) == scaled
    if scaled:
        assert state.replicas[KEY] == scaled[-1][1]
        assert state.scaled_at[KEY] == at(10)


def test_on_lag_does_not_repeat_an_unchanged_hold_and_counts_outstanding_replicas():
    ctx = context(small_node("n1", cpu=2000))
    state = pools_state(policy())
    bound_members(state, ctx, "n1")
    first = on_lag(state, ctx, lag_state(seconds=10), position(1), at(10), ())
    assert scale_commands(first) == [(1, 2)]
    # The replica asked for is not here yet: its room is spoken for, so none can be added.
    second = on_lag(state, ctx, lag_state(seconds=11), position(2), at(11), ())
    assert [d.record.outcome for d in second] == ["held"]
    assert "none can be added" in second[0].record.message
    assert on_lag(state, ctx, lag_state(seconds=12), position(3), at(12), ()) == []
