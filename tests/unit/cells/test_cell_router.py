"""The cell's router (berth.cells.cell.HANDLERS): every kind of cell input has a handler, and each
handler calls the folds that care about its input in the documented order — then the open spot
moves advance, a cluster change requeues the unschedulable pods, and the scheduling round runs."""

from __future__ import annotations

import typing
from collections.abc import Callable
from datetime import timedelta
from functools import wraps

import pytest
from berth.schemas import (
    CellTick,
    CommandResult,
    NodeObserved,
    NodeRemoved,
    PlacePods,
    PodDeleted,
    PodInfo,
    PodObserved,
    PodRouted,
    PolicyObserved,
    PolicyRemoved,
    PoolLagState,
    SpotInterruptionNotice,
)
from berth.schemas.policy import AgentPoolInfo, PodGroupInfo
from berth.schemas.samples import one_of_each
from berth.schemas.topics import DECISION_INPUTS, CellInput

from berth import cells
from berth.cells import cell as cell_module
from berth.cells import gangs, handovers, pool_scaling, queue, spot_drain
from berth.cells.cell import HANDLERS
from berth.cells.nodes import reserve, show
from berth.cells.pools import parse_pools

from .fold_kit import T0, at, pending, position, replica, routed, small_node

KEY = "serving/llama"
POOLS = parse_pools(
    {
        "pools": {
            KEY: {
                "tokensPerSecondPerReplica": 1000,
                "ttftSloMs": 2000,
                "maxReplicas": 8,
                "scheduling": {"costOptimization": {"spotEnabled": True}},
            }
        }
    }
)
SPIED = {
    handovers: ("take_back", "is_given_up", "on_routed", "on_tick"),
    queue: (
        "is_schedulable_here",
        "observe_pending",
        "observe_bound",
        "pod_deleted",
        "on_result",
        "requeue_unschedulable",
    ),
    gangs: ("member_bound", "member_deleted", "pod_group_observed", "pod_group_removed"),
    spot_drain: ("track_bound", "pod_gone", "on_spot", "advance_moves"),
    pool_scaling: ("on_agent_pool", "drop_agent_pool", "on_lag"),
    cell_module: ("observe_node", "forget_node", "release_reservations", "schedule_round"),
}
"""Module → the functions the router reaches through it (the node-book functions and the
scheduling round are imported into the cell module by name)."""
ENGINE_SPIED = ("upsert_policy", "remove_policy", "remove_pod", "delete_pod")


# -- coverage -----------------------------------------------------------------------------------


def test_handlers_cover_every_cell_input_kind():
    union = typing.get_args(CellInput)[0]
    kinds = set(typing.get_args(union))
    assert set(HANDLERS) == kinds == set(DECISION_INPUTS.event_types.values())


def test_every_handler_returns_decisions_and_whether_the_cluster_changed():
    cell = new_cell()
    by_kind = {type(event): event for event in one_of_each()}
    by_kind[PodRouted] = routed(pending("p"))
    by_kind[CellTick] = CellTick(issued_at=T0)
    for offset, kind in enumerate(sorted(HANDLERS, key=lambda k: k.__name__)):
        decisions, changed = HANDLERS[kind](cell, by_kind[kind], position(offset), T0)
        assert isinstance(decisions, list) and isinstance(changed, bool), kind


# -- order --------------------------------------------------------------------------------------


def new_cell() -> cells.Cell:
    return cells.Cell(0, cells.CellConfig(pools=POOLS))


@pytest.fixture
def spied(monkeypatch) -> Callable[[cells.Cell], list[str]]:
    """Installs spies on the folds (and the cell's engine) that log each call by name, calling
    through; returns a function that installs them for a cell and gives its log."""

    def install(cell: cells.Cell) -> list[str]:
        log: list[str] = []

        def spy(name: str, function: Callable) -> Callable:
            @wraps(function)
            def logged(*args, **kwargs):
                log.append(name)
                return function(*args, **kwargs)

            return logged

        for module, names in SPIED.items():
            short = module.__name__.rsplit(".", 1)[-1]
            for name in names:
                label = name if module is cell_module else f"{short}.{name}"
                monkeypatch.setattr(module, name, spy(label, getattr(module, name)))
        for name in ENGINE_SPIED:
            monkeypatch.setattr(cell.engine, name, spy(f"engine.{name}", getattr(cell.engine, name)))
        return log

    return install


def feed(cell: cells.Cell, *events) -> list:
    decisions = []
    for event in events:
        decisions.extend(cell.handle(event, position(cell.decisions_made + len(decisions) + 100)))
    return decisions


def observed(info: PodInfo) -> PodObserved:
    return PodObserved(pod=info, observed_at=T0)


def deleted(info: PodInfo) -> PodDeleted:
    return PodDeleted(uid=info.uid, namespace=info.namespace, name=info.name, node_name=info.node_name, observed_at=T0)


POD = pending("p")
BOUND = pending("p", node_name="n1", phase="Running")


def plain(event) -> Callable[[cells.Cell], object]:
    return lambda cell: event


def given_up(event) -> Callable[[cells.Cell], object]:
    def setup(cell: cells.Cell):
        cell.handovers.handed_over[POD.uid] = 1
        return event

    return setup


def evicting(event) -> Callable[[cells.Cell], object]:
    def setup(cell: cells.Cell):
        cell.queue.evicting[POD.uid] = (BOUND, "cmd-1")
        reserve(cell.nodes, "n1", POD.uid)
        return event

    return setup


def failed_placement(cell: cells.Cell):
    """A pod placed by the cell, then its binding fails."""
    [placed] = [
        c
        for d in feed(cell, NodeObserved(node=small_node("n1"), observed_at=T0), observed(POD))
        for c in d.commands
        if isinstance(c, PlacePods)
    ]
    return CommandResult(
        command_id=placed.command_id,
        decision_id=placed.decision_id,
        command_type=placed.type,
        status="failed",
        reason="gone",
        applied_at=T0,
    )


def spot_with_a_replica(cell: cells.Cell):
    """A pool replica on a spot node, room on an on-demand node: the notice opens a move."""
    feed(
        cell,
        NodeObserved(node=small_node("spot-0", spot=True), observed_at=T0),
        NodeObserved(node=small_node("od-0"), observed_at=T0),
        observed(replica("llama", 0, node_name="spot-0")),
    )
    return SpotInterruptionNotice(node="spot-0", issued_at=at(10), deadline=at(130))


def tick_with_an_open_move(cell: cells.Cell):
    cell.handle(spot_with_a_replica(cell), position(50))
    assert cell.drain.moves
    return CellTick(issued_at=at(11))


POD_GROUP = PolicyObserved(
    kind="PodGroup", pod_group=PodGroupInfo(namespace="ns", name="g", min_member=2), observed_at=T0
)
AGENT_POOL = PolicyObserved(
    kind="AgentPool",
    agent_pool=AgentPoolInfo(namespace="serving", name="llama", spec={"maxReplicas": 3}),
    observed_at=T0,
)
LAG = PoolLagState(
    pool="llama",
    namespace="serving",
    tokens_in_queue=10,
    token_rate=100.0,
    smoothed_token_rate=100.0,
    ready_replicas=1,
    updated_at=T0,
)
PENDING_HERE = ["queue.is_schedulable_here", "handovers.is_given_up", "queue.observe_pending"]
REQUEUE = "queue.requeue_unschedulable"
ROUND = "schedule_round"


@pytest.mark.parametrize(
    ("setup", "calls"),
    [
        pytest.param(
            plain(NodeObserved(node=small_node("n1"), observed_at=T0)),
            ["observe_node", REQUEUE, ROUND],
            id="node-observed",
        ),
        pytest.param(plain(NodeRemoved(name="n1", observed_at=T0)), ["forget_node", ROUND], id="node-removed"),
        pytest.param(plain(observed(POD)), [*PENDING_HERE, ROUND], id="pod-pending"),
        pytest.param(
            plain(observed(POD.model_copy(update={"scheduler_name": "other"}))),
            ["queue.is_schedulable_here", ROUND],
            id="pod-of-another-scheduler",
        ),
        pytest.param(
            given_up(observed(POD)),
            ["queue.is_schedulable_here", "handovers.is_given_up", ROUND],
            id="pod-pending-given-up-is-ignored",
        ),
        pytest.param(
            plain(observed(BOUND)),
            ["handovers.take_back", "queue.observe_bound", "spot_drain.track_bound", "gangs.member_bound", ROUND],
            id="pod-bound",
        ),
        pytest.param(
            evicting(observed(BOUND)),
            ["handovers.take_back", "queue.observe_bound", ROUND],
            id="victim-still-bound-changes-nothing",
        ),
        pytest.param(
            plain(routed(POD)), ["handovers.take_back", *PENDING_HERE, "handovers.on_routed", ROUND], id="pod-routed"
        ),
        pytest.param(
            given_up(deleted(POD)), ["handovers.take_back", ROUND], id="deleted-after-hand-over-only-taken-back"
        ),
        pytest.param(
            plain(deleted(BOUND)),
            [
                "handovers.take_back",
                "spot_drain.pod_gone",
                "queue.pod_deleted",
                "gangs.member_deleted",
                "engine.delete_pod",
                REQUEUE,
                ROUND,
            ],
            id="pod-deleted",
        ),
        pytest.param(
            evicting(deleted(BOUND)),
            [
                "handovers.take_back",
                "spot_drain.pod_gone",
                "queue.pod_deleted",
                "release_reservations",
                "gangs.member_deleted",
                "engine.delete_pod",
                REQUEUE,
                ROUND,
            ],
            id="victim-deleted",
        ),
        pytest.param(
            plain(POD_GROUP),
            ["engine.upsert_policy", "gangs.pod_group_observed", REQUEUE, ROUND],
            id="pod-group-observed",
        ),
        pytest.param(plain(AGENT_POOL), ["pool_scaling.on_agent_pool", ROUND], id="agent-pool-observed"),
        pytest.param(
            plain(PolicyRemoved(kind="PodGroup", namespace="ns", name="g", observed_at=T0)),
            ["engine.remove_policy", "gangs.pod_group_removed", REQUEUE, ROUND],
            id="pod-group-removed",
        ),
        pytest.param(
            plain(PolicyRemoved(kind="AgentPool", namespace="serving", name="llama", observed_at=T0)),
            ["pool_scaling.drop_agent_pool", ROUND],
            id="agent-pool-removed",
        ),
        pytest.param(
            plain(CommandResult(command_id="cmd-x", decision_id="d", command_type="x", status="failed", applied_at=T0)),
            ["queue.on_result", "release_reservations", ROUND],
            id="result-of-nothing-in-flight",
        ),
        pytest.param(
            failed_placement,
            ["queue.on_result", "engine.remove_pod", "release_reservations", REQUEUE, ROUND],
            id="failed-placement-releases-capacity",
        ),
        pytest.param(
            plain(SpotInterruptionNotice(node="n9", issued_at=T0, deadline=T0 + timedelta(minutes=2))),
            ["spot_drain.on_spot", ROUND],
            id="spot-notice-unknown-node",
        ),
        pytest.param(
            spot_with_a_replica,
            ["spot_drain.on_spot", "spot_drain.advance_moves", ROUND],
            id="spot-notice-opens-a-move",
        ),
        pytest.param(plain(LAG), ["pool_scaling.on_lag", ROUND], id="lag-state"),
        pytest.param(plain(CellTick(issued_at=T0)), ["handovers.on_tick", ROUND], id="tick"),
        pytest.param(
            tick_with_an_open_move,
            ["handovers.on_tick", "spot_drain.advance_moves", ROUND],
            id="any-input-advances-open-moves",
        ),
        pytest.param(
            plain(next(e for e in one_of_each() if type(e).__name__ == "GpuTelemetry")), [ROUND], id="not-a-cell-input"
        ),
    ],
)
def test_router_calls_the_folds_in_order(spied, setup, calls):
    cell = new_cell()
    event = setup(cell)
    log = spied(cell)
    cell.handle(event, position(1000))
    assert log == calls


def test_a_pod_deleted_after_its_hand_over_is_only_taken_back():
    cell = new_cell()
    feed(cell, NodeObserved(node=small_node("n1"), observed_at=T0))
    cell.handovers.handed_over[POD.uid] = 3
    # State other folds would change for a deleted pod: none of it may move.
    cell.queue.evicting[POD.uid] = (BOUND, "cmd-1")
    reserve(cell.nodes, "n1", POD.uid)
    show(cell.nodes, cell.engine, "n1")
    cell.gangs.bound[("ns", "g")] = {POD.uid}
    cell.drain.pod_node[POD.uid] = "n1"
    cell.pools.pod_pool[POD.uid] = KEY
    cell.engine.upsert_bound_pod(BOUND)
    assert cell.handle(deleted(POD), position(1)) == []
    assert cell.handovers.handed_over == {}
    assert (cell.queue.evicting, cell.nodes.reserving, cell.gangs.bound, cell.drain.pod_node, cell.pools.pod_pool) == (
        {POD.uid: (BOUND, "cmd-1")},
        {"n1": {POD.uid}},
        {("ns", "g"): {POD.uid}},
        {POD.uid: "n1"},
        {POD.uid: KEY},
    )
    assert cell.engine.state.pods.get(POD.uid) is not None
    assert cell.engine.state.nodes.get("n1").unschedulable


@pytest.mark.parametrize(
    ("kind", "event", "changed"),
    [
        pytest.param(NodeObserved, NodeObserved(node=small_node("n1"), observed_at=T0), True, id="node-observed"),
        pytest.param(NodeRemoved, NodeRemoved(name="n1", observed_at=T0), False, id="node-removed"),
        pytest.param(PodObserved, observed(POD), False, id="pod-observed"),
        pytest.param(PodDeleted, deleted(POD), True, id="pod-deleted"),
        pytest.param(PolicyObserved, POD_GROUP, True, id="policy-observed"),
        pytest.param(PolicyObserved, AGENT_POOL, False, id="agent-pool-observed"),
        pytest.param(CellTick, CellTick(issued_at=T0), False, id="tick"),
    ],
)
def test_which_inputs_count_as_a_cluster_change(kind, event, changed):
    assert HANDLERS[kind](new_cell(), event, position(1), T0)[1] is changed
