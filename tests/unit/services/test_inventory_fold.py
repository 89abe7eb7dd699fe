"""The inventory's pure folds: node state, GPU accounting and routing to cells, without Kafka."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from berth.schemas import (
    ForeignNodeObserved,
    ForeignNodeRemoved,
    GpuDevice,
    GpuDeviceSample,
    GpuTelemetry,
    LimitRangeInfo,
    LimitRangeItem,
    NodeInfo,
    NodeObserved,
    NodeRemoved,
    PodDeleted,
    PodGroupInfo,
    PodInfo,
    PodObserved,
    PolicyObserved,
    PolicyRemoved,
    PriorityClassInfo,
    SpotInterruptionNotice,
    Taint,
)
from berth.schemas.cells import CELL_LABEL, cell_of_pod
from berth.schemas.scheduler import HandOverPod, PodRouted
from berth.services.inventory.fold import (
    NODE_INPUT,
    NODE_STATE,
    InventoryChanged,
    NodeInput,
    NodeState,
    PodRoute,
    ToCell,
    ToNode,
    fold_hand_over,
    fold_node_input,
    fold_node_inputs,
    fold_pod_event,
    fold_pod_input,
    inventory_of,
    route_policy,
)

CELLS = 4
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def node(name: str = "gpu-a", *, cell: int = 1, gpus: int = 4, **update: Any) -> NodeInfo:
    return NodeInfo(
        name=name,
        labels={CELL_LABEL: str(cell)},
        allocatable={"cpu": 64000, "memory": 512 * 2**30, "nvidia.com/gpu": gpus},
        gpus=tuple(GpuDevice(index=i, model="H100", memory_mib=81920) for i in range(gpus)),
    ).model_copy(update=update)


def pod(
    name: str,
    *,
    node_name: str | None = None,
    devices: tuple[int, ...] = (),
    milli: int | None = None,
    whole: int = 0,
    scheduler: str = "berth",
    phase: str = "Pending",
    cell: int | None = None,
) -> PodInfo:
    requests = {"cpu": 1000}
    if whole:
        requests["nvidia.com/gpu"] = whole
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ml",
        name=name,
        scheduler_name=scheduler,
        requests=requests,
        gpu_fraction_milli=milli,
        node_name=node_name,
        gpu_devices=devices,
        phase=phase if not node_name or phase != "Pending" else "Running",
        node_selector={CELL_LABEL: str(cell)} if cell is not None else {},
        creation_time=T0,
    )


def observed(info: NodeInfo, t: float = 0) -> NodeInput:
    return NodeInput.of(NodeObserved(node=info, observed_at=at(t)))


def bound(p: PodInfo, t: float = 1, withdraw_from: int | None = None) -> NodeInput:
    assert p.node_name
    return NodeInput(node=p.node_name, event=PodObserved(pod=p, observed_at=at(t)), withdraw_from=withdraw_from)


def telemetry(name: str, t: float, *unhealthy: int, devices: int = 4) -> NodeInput:
    return NodeInput.of(
        GpuTelemetry(
            node=name,
            sampled_at=at(t),
            devices=tuple(
                GpuDeviceSample(index=i, utilization_pct=50.0, memory_used_mib=1024, healthy=i not in unhealthy)
                for i in range(devices)
            ),
        )
    )


def run(inputs: list[NodeInput], state: NodeState | None = None) -> tuple[NodeState, list[Any]]:
    """Fold inputs in order; returns the final state and all outputs."""
    outputs: list[Any] = []
    for item in inputs:
        folded = fold_node_input(state, item, CELLS)
        state = folded.state
        outputs.extend(folded.outputs)
    assert state is not None
    return state, outputs


def routed(outputs: list[Any]) -> list[tuple[int, str, str]]:
    """(cell, event type suffix, subject) of every ToCell output but the census, in order."""
    return [
        (o.cell, o.event.type.split(".")[-2], o.event.subject)
        for o in outputs
        if isinstance(o, ToCell) and not isinstance(o.event, (ForeignNodeObserved, ForeignNodeRemoved))
    ]


def census(outputs: list[Any]) -> list[tuple[int, str, str]]:
    """(cell, event type suffix, subject) of the census sent to the other cells, in order."""
    return [
        (o.cell, o.event.type.split(".")[-2], o.event.subject)
        for o in outputs
        if isinstance(o, ToCell) and isinstance(o.event, (ForeignNodeObserved, ForeignNodeRemoved))
    ]


def published(outputs: list[Any]) -> list[Any]:
    return [o.inventory for o in outputs if isinstance(o, InventoryChanged)]


# --- nodes -------------------------------------------------------------------------------------


def test_a_new_node_goes_to_its_cell_and_is_published():
    state, outputs = run([observed(node(cell=2))])
    assert routed(outputs) == [(2, "node-observed", "gpu-a")]
    [inventory] = published(outputs)
    assert inventory.cell == 2 and [d.free_milli for d in inventory.devices] == [1000] * 4
    assert inventory.updated_at == at(0) and not inventory.removed
    assert state.forwarded_cell == 2


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param({}, [], id="same node again: nothing forwarded"),
        pytest.param({"unschedulable": True}, [(2, "node-observed", "gpu-a")], id="cordoned"),
        pytest.param({"taints": ()}, [], id="equal value"),
    ],
)
def test_node_updates_are_forwarded_only_when_they_change_something(change, expected):
    state, _ = run([observed(node(cell=2))])
    _, outputs = run([observed(node(cell=2, **change), t=5)], state)
    assert routed(outputs) == expected
    assert bool(published(outputs)) == bool(expected)


def test_a_node_that_changes_cell_moves_with_its_pods_and_spot_notice():
    p = pod("p1", node_name="gpu-a", devices=(0,), whole=1)
    notice = SpotInterruptionNotice(node="gpu-a", issued_at=at(2), deadline=at(122))
    state, _ = run([observed(node(cell=1)), bound(p), NodeInput.of(notice)])
    _, outputs = run([observed(node(cell=3), t=10)], state)
    assert routed(outputs) == [
        (1, "node-removed", "gpu-a"),
        (3, "node-observed", "gpu-a"),
        (1, "pod-deleted", "ml/p1"),  # withdrawn from the old cell
        (3, "pod-observed", "ml/p1"),
        (3, "spot-interruption", "gpu-a"),
    ]
    assert published(outputs)[0].cell == 3


def test_node_removed_goes_to_its_cell_and_is_published_as_removed():
    state, _ = run([observed(node(cell=1))])
    state, outputs = run([NodeInput.of(NodeRemoved(name="gpu-a", observed_at=at(9)))], state)
    assert routed(outputs) == [(1, "node-removed", "gpu-a")]
    assert published(outputs)[0].removed
    # Seen again later: its cell learns it afresh.
    _, outputs = run([observed(node(cell=1), t=20)], state)
    assert routed(outputs) == [(1, "node-observed", "gpu-a")]
    assert not published(outputs)[0].removed


def test_removing_an_unknown_node_tells_nobody():
    state, outputs = run([NodeInput.of(NodeRemoved(name="ghost", observed_at=at(0)))])
    assert outputs == [] and state.removed


# --- pods on nodes: GPU accounting ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "free"),
    [
        pytest.param([], [1000, 1000, 1000, 1000], id="empty"),
        pytest.param([pod("w", node_name="gpu-a", devices=(0, 1), whole=2)], [0, 0, 1000, 1000], id="two whole"),
        pytest.param([pod("f", node_name="gpu-a", devices=(2,), milli=250)], [1000, 1000, 750, 1000], id="quarter"),
        pytest.param(
            [
                pod("f1", node_name="gpu-a", devices=(2,), milli=250),
                pod("f2", node_name="gpu-a", devices=(2,), milli=500),
            ],
            [1000, 1000, 250, 1000],
            id="packed",
        ),
        pytest.param(
            [pod("f", node_name="gpu-a", devices=(3,), milli=700), pod("w", node_name="gpu-a", devices=(3,), whole=1)],
            [1000, 1000, 1000, 0],
            id="overcommit→0",
        ),
        pytest.param([pod("f", node_name="gpu-a", milli=300)], [1000] * 4, id="share without device yet"),
        pytest.param(
            [pod("done", node_name="gpu-a", devices=(0,), whole=1, phase="Succeeded")],
            [1000] * 4,
            id="terminated holds nothing",
        ),
    ],
)
def test_free_milli_per_device(pods, free):
    state, _ = run([observed(node()), *[bound(p) for p in pods]])
    inventory = inventory_of(state, CELLS)
    assert [d.free_milli for d in inventory.devices] == free


def test_bind_and_unbind_update_allocations_and_requests():
    share = pod("f", node_name="gpu-a", devices=(1,), milli=250)
    whole = pod("w", node_name="gpu-a", devices=(2, 3), whole=2)
    state, outputs = run([observed(node(cell=1)), bound(share), bound(whole)])
    assert routed(outputs)[1:] == [(1, "pod-observed", "ml/f"), (1, "pod-observed", "ml/w")]
    inventory = published(outputs)[-1]
    assert [(a.pod, a.gpu_devices, a.gpu_milli) for a in inventory.allocations] == [
        ("ml/f", (1,), 250),
        ("ml/w", (2, 3), None),
    ]
    assert inventory.requested == {"cpu": 2000, "nvidia.com/gpu": 2}
    deleted = NodeInput(
        node="gpu-a", event=PodDeleted(uid="uid-w", namespace="ml", name="w", node_name="gpu-a", observed_at=at(30))
    )
    state, outputs = run([deleted], state)
    assert routed(outputs) == [(1, "pod-deleted", "ml/w")]
    inventory = published(outputs)[-1]
    assert [d.free_milli for d in inventory.devices] == [1000, 750, 1000, 1000]
    assert inventory.requested == {"cpu": 1000}


def test_a_pod_bound_before_its_node_is_known_waits_in_its_own_cell_then_follows_the_node():
    p = pod("early", node_name="gpu-a", devices=(0,), whole=1, cell=0)
    state, outputs = run([bound(p)])
    assert routed(outputs) == [(0, "pod-observed", "ml/early")]
    assert published(outputs) == []  # no node facts yet: nothing to publish
    _, outputs = run([observed(node(cell=2), t=5)], state)
    assert routed(outputs) == [
        (2, "node-observed", "gpu-a"),
        (0, "pod-deleted", "ml/early"),
        (2, "pod-observed", "ml/early"),
    ]
    assert [d.free_milli for d in published(outputs)[0].devices] == [0, 1000, 1000, 1000]


def test_a_bound_pod_is_withdrawn_from_the_cell_that_had_it_pending():
    state, _ = run([observed(node(cell=1))])
    p = pod("moved", node_name="gpu-a", devices=(0,), whole=1)
    _, outputs = run([bound(p, withdraw_from=3)], state)
    assert routed(outputs) == [(3, "pod-deleted", "ml/moved"), (1, "pod-observed", "ml/moved")]
    _, outputs = run([bound(p, withdraw_from=1)], state)
    assert routed(outputs) == [(1, "pod-observed", "ml/moved")]  # same cell: nothing to withdraw


def test_deleting_a_pod_the_node_never_had_is_silent():
    state, _ = run([observed(node())])
    gone = NodeInput(
        node="gpu-a", event=PodDeleted(uid="nope", namespace="ml", name="x", node_name="gpu-a", observed_at=at(3))
    )
    _, outputs = run([gone], state)
    assert outputs == []


# --- the node stage a batch at a time ----------------------------------------------------------------


def test_a_batch_sends_the_cells_what_one_input_at_a_time_sends_and_publishes_each_node_once():
    a, b = node("gpu-a", cell=1), node("gpu-b", cell=2)
    start, _ = run([observed(a)])
    other, _ = run([observed(b)])
    batch = [
        bound(pod("p1", node_name="gpu-a", devices=(0,)), t=1),
        bound(pod("p2", node_name="gpu-b", devices=(0,)), t=2),
        bound(pod("p3", node_name="gpu-a", devices=(1,)), t=3),
        bound(pod("p4", node_name="gpu-a", devices=(2,), milli=500), t=4),
    ]
    states = {"gpu-a": start, "gpu-b": other}
    folded = fold_node_inputs(states, batch, CELLS)

    one_by_one: dict[str, NodeState | None] = dict(states)
    for item, outputs in zip(batch, folded.outputs, strict=True):
        alone = fold_node_input(one_by_one[item.node], item, CELLS)
        one_by_one[item.node] = alone.state
        assert [o for o in outputs if isinstance(o, ToCell)] == [o for o in alone.outputs if isinstance(o, ToCell)]
    assert folded.states == one_by_one
    published = [[o.inventory for o in outputs if isinstance(o, InventoryChanged)] for outputs in folded.outputs]
    # Once per node, after the node's last input of the batch, with the node's state after it.
    assert [[inv.node.name for inv in sent] for sent in published] == [[], ["gpu-b"], [], ["gpu-a"]]
    assert published[3][0] == inventory_of(folded.states["gpu-a"], CELLS)
    assert [d.free_milli for d in published[3][0].devices] == [0, 0, 500, 1000]


def test_a_batch_that_leaves_a_nodes_inventory_as_it_was_publishes_nothing_for_it():
    start, _ = run([observed(node())])
    p = pod("p", node_name="gpu-a", devices=(0,))
    gone = NodeInput(node="gpu-a", event=PodDeleted(uid=p.uid, namespace=p.namespace, name=p.name, observed_at=at(2)))
    folded = fold_node_inputs({"gpu-a": start}, [bound(p, t=1), gone], CELLS)
    assert routed([o for outputs in folded.outputs for o in outputs]) == [
        (1, "pod-observed", "ml/p"),
        (1, "pod-deleted", "ml/p"),
    ]
    assert not any(isinstance(o, InventoryChanged) for outputs in folded.outputs for o in outputs)


def test_a_batch_can_bring_a_node_the_stage_has_never_seen():
    info = node("gpu-new", cell=3)
    folded = fold_node_inputs(
        {"gpu-new": None}, [observed(info), bound(pod("p", node_name="gpu-new", devices=(1,)))], CELLS
    )
    alone, outputs = run([observed(info), bound(pod("p", node_name="gpu-new", devices=(1,)))])
    assert folded.states == {"gpu-new": alone}
    assert [o for o in folded.outputs[1] if isinstance(o, InventoryChanged)] == [outputs[-1]]


# --- telemetry and spot notices ------------------------------------------------------------------


def test_telemetry_health_flip_forwards_the_effective_node_once():
    state, _ = run([observed(node(cell=1))])
    state, outputs = run([telemetry("gpu-a", 10, 2)], state)
    [(cell, kind, subject)] = routed(outputs)
    assert (cell, kind, subject) == (1, "node-observed", "gpu-a")
    forwarded = outputs[0].event
    assert [d.healthy for d in forwarded.node.gpus] == [True, True, False, True]
    assert forwarded.observed_at == at(10)
    assert not published(outputs)[0].devices[2].healthy
    # Same health again: utilisation is published, nothing goes to the cell.
    state, outputs = run([telemetry("gpu-a", 20, 2)], state)
    assert routed(outputs) == []
    assert published(outputs) == []  # same samples, same inventory
    # Recovered: forwarded again, healthy.
    _, outputs = run([telemetry("gpu-a", 30)], state)
    assert [d.healthy for d in outputs[0].event.node.gpus] == [True] * 4


def test_a_node_observed_after_telemetry_said_unhealthy_is_forwarded_unhealthy():
    state, outputs = run([telemetry("gpu-a", 0, 0), observed(node(cell=1), t=1)])
    [forwarded] = [o.event for o in outputs if isinstance(o, ToCell) and o.cell == 1]
    assert not forwarded.node.gpus[0].healthy


def test_telemetry_utilisation_is_published():
    state, outputs = run([observed(node()), telemetry("gpu-a", 5)])
    inventory = published(outputs)[-1]
    assert [(d.utilization_pct, d.memory_used_mib) for d in inventory.devices] == [(50.0, 1024)] * 4


def test_spot_notice_sets_draining_until_and_goes_to_the_cell_once():
    notice = SpotInterruptionNotice(node="gpu-a", issued_at=at(5), deadline=at(125), provider="aws")
    state, outputs = run([observed(node(cell=3)), NodeInput.of(notice)])
    assert routed(outputs)[-1] == (3, "spot-interruption", "gpu-a")
    assert published(outputs)[-1].draining_until == at(125)
    _, outputs = run([NodeInput.of(notice)], state)
    assert routed(outputs) == []  # a repeated notice is not news


def test_spot_notice_before_the_node_is_delivered_with_the_node_unless_expired():
    notice = SpotInterruptionNotice(node="gpu-a", issued_at=at(0), deadline=at(30))
    _, outputs = run([NodeInput.of(notice), observed(node(cell=2), t=10)])
    assert routed(outputs) == [(2, "node-observed", "gpu-a"), (2, "spot-interruption", "gpu-a")]
    _, outputs = run([NodeInput.of(notice), observed(node(cell=2), t=60)])
    assert routed(outputs) == [(2, "node-observed", "gpu-a")]


# --- pod stage -----------------------------------------------------------------------------------


def pod_event(p: PodInfo, t: float = 0) -> PodObserved:
    return PodObserved(pod=p, observed_at=at(t))


def test_pending_berth_pods_go_to_their_cell_and_others_are_ignored():
    pending = pod("wait", cell=2)
    folded = fold_pod_event(None, pod_event(pending), CELLS)
    assert folded.state == PodRoute(cell=2, home=2)  # pinned by its cell label: no round of cells
    assert [(o.cell, o.event) for o in folded.outputs] == [(2, pod_event(pending))]
    foreign = pod("theirs", scheduler="default-scheduler")
    assert fold_pod_event(None, pod_event(foreign), CELLS).outputs == ()
    assert fold_pod_event(None, pod_event(foreign), CELLS).state is None


@pytest.mark.parametrize("scheduler", ["berth", "default-scheduler"])
def test_bound_pods_of_any_scheduler_go_to_their_node_stage(scheduler):
    p = pod("run", node_name="gpu-b", devices=(0,), whole=1, scheduler=scheduler)
    folded = fold_pod_event(None, pod_event(p), CELLS)
    assert folded.state == PodRoute(node="gpu-b")
    [out] = folded.outputs
    assert isinstance(out, ToNode) and out.node == "gpu-b" and out.payload.withdraw_from is None


def test_a_pending_pod_once_bound_carries_the_cell_to_withdraw_from():
    route = fold_pod_event(None, pod_event(pod("p", cell=3)), CELLS).state
    folded = fold_pod_event(route, pod_event(pod("p", node_name="gpu-a", devices=(0,), whole=1, cell=3), 1), CELLS)
    [out] = folded.outputs
    assert out.payload.withdraw_from == 3 and folded.state == PodRoute(node="gpu-a")


def test_an_older_pending_event_seen_again_after_the_binding_changes_nothing():
    # At-least-once input: after a crash the stage re-reads events its table already folded.
    route = PodRoute(node="gpu-a")
    folded = fold_pod_event(route, pod_event(pod("p", cell=3)), CELLS)
    assert folded.state == route and folded.outputs == ()


def test_pod_deleted_goes_where_the_pod_was_last_routed():
    deleted = PodDeleted(uid="uid-p", namespace="ml", name="p", observed_at=at(9))
    pending_route = PodRoute(cell=2)
    folded = fold_pod_event(pending_route, deleted, CELLS)
    assert folded.state is None and [(o.cell, o.event) for o in folded.outputs] == [(2, deleted)]
    folded = fold_pod_event(PodRoute(node="gpu-a"), deleted, CELLS)
    [out] = folded.outputs
    assert out.node == "gpu-a" and out.payload.event.node_name == "gpu-a"  # filled in for the node stage
    assert fold_pod_event(None, deleted, CELLS).outputs == ()


def test_a_pending_pod_whose_cell_changes_is_withdrawn_from_the_old_one():
    route = PodRoute(cell=cell_of_pod(pod("p"), CELLS))
    moved = pod("p", cell=(route.cell + 1) % CELLS)
    folded = fold_pod_event(route, pod_event(moved), CELLS)
    assert [(o.cell, o.event.type.split(".")[-2]) for o in folded.outputs] == [
        (route.cell, "pod-deleted"),
        ((route.cell + 1) % CELLS, "pod-observed"),
    ]


def hand_over(route: PodRoute, t: float = 5, **update: Any) -> HandOverPod:
    fields = {
        "command_id": f"c-{route.hop}",
        "decision_id": f"d-{route.hop}",
        "cell": route.cell,
        "pod_uid": "uid-free",
        "namespace": "ml",
        "name": "free",
        "hop": route.hop,
        "issued_at": at(t),
    }
    return HandOverPod(**{**fields, **update})


def test_an_unpinned_pending_pod_opens_a_round_in_its_hashed_cell():
    free = pod("free")
    folded = fold_pod_event(None, pod_event(free), CELLS)
    home = cell_of_pod(free, CELLS)
    [out] = folded.outputs
    assert out.cell == home and out.event == PodRouted(
        pod=free, tried=(home,), cells=CELLS, hop=0, route_partition=0, round_started_at=at(0), observed_at=at(0)
    )
    assert folded.state == PodRoute(cell=home, home=home, pod=free, tried=(home,), round_started_at=at(0))
    # With one cell there is nowhere to go: a plain observation, as before rounds existed.
    [single] = fold_pod_event(None, pod_event(free), 1).outputs
    assert single.event == pod_event(free)


def test_hand_overs_walk_the_cells_in_order_then_start_a_new_round():
    free = pod("free")
    route = fold_pod_event(None, pod_event(free), CELLS).state
    home = route.cell
    visited = [home]
    for step in range(1, CELLS):
        folded = fold_hand_over(route, hand_over(route, t=step), CELLS)
        withdrawn, routed = folded.outputs
        # The handing cell forgets the pod first, then the next untried cell gets it.
        assert withdrawn.cell == route.cell and isinstance(withdrawn.event, PodDeleted)
        assert isinstance(routed.event, PodRouted) and routed.cell == (route.cell + 1) % CELLS
        assert routed.event.hop == step and routed.event.round_started_at == at(0)
        route = folded.state
        visited.append(route.cell)
    assert (
        sorted(visited) == list(range(CELLS))
        and PodRouted(
            pod=free, tried=route.tried, cells=CELLS, round_started_at=at(0), observed_at=at(0)
        ).round_complete
    )
    # Every cell tried: the last one hands it on for a new round that starts now.
    folded = fold_hand_over(route, hand_over(route, t=70), CELLS)
    routed = folded.outputs[1].event
    assert routed.tried == (route.cell, (route.cell + 1) % CELLS) and routed.round_started_at == at(70)
    assert not routed.round_complete


def test_an_update_of_a_pod_in_a_round_goes_to_the_cell_holding_it_and_is_handed_on():
    free = pod("free")
    route = fold_pod_event(None, pod_event(free), CELLS).state
    route = fold_hand_over(route, hand_over(route), CELLS).state
    changed = free.model_copy(update={"labels": {"team": "a"}})
    folded = fold_pod_event(route, pod_event(changed, 6), CELLS)
    assert [(o.cell, o.event) for o in folded.outputs] == [(route.cell, pod_event(changed, 6))]
    assert folded.state.pod == changed and folded.state.tried == route.tried
    routed = fold_hand_over(folded.state, hand_over(folded.state, t=7), CELLS).outputs[1].event
    assert routed.pod == changed  # the next cell sees the pod as it is now


@pytest.mark.parametrize("stale", ["hop", "cell", "bound", "deleted"])
def test_a_stale_hand_over_changes_nothing(stale):
    free = pod("free")
    route = fold_pod_event(None, pod_event(free), CELLS).state
    request = hand_over(route)
    if stale == "hop":  # repeated after the pod was already passed on (a re-decided batch)
        route = fold_hand_over(route, request, CELLS).state
        request = request.model_copy(update={"cell": route.cell})
    elif stale == "cell":
        request = request.model_copy(update={"cell": (route.cell + 1) % CELLS})
    elif stale == "bound":
        route = fold_pod_event(route, pod_event(pod("free", node_name="gpu-a", devices=(0,), whole=1), 2), CELLS).state
    else:
        route = fold_pod_event(
            route, PodDeleted(uid="uid-free", namespace="ml", name="free", observed_at=at(2)), CELLS
        ).state
    folded = fold_hand_over(route, request, CELLS)
    assert folded.state == route and folded.outputs == ()


def test_a_round_keeps_the_pod_topic_partition_its_hand_overs_return_to():
    free = pod("free")
    route = fold_pod_event(None, pod_event(free), CELLS, partition=3).state
    [_, routed] = fold_pod_input(route, hand_over(route, route_partition=3), CELLS).outputs
    assert routed.event.route_partition == 3
    [first] = fold_pod_input(None, pod_event(free), CELLS, partition=3).outputs
    assert first.event.route_partition == 3


# --- policies ------------------------------------------------------------------------------------


def test_every_policy_goes_everywhere_pod_groups_too():
    # A gang whose members select a node pool lives in the pool's cell, not the group's.
    group = PolicyObserved(
        kind="PodGroup", pod_group=PodGroupInfo(namespace="ml", name="train", min_member=8), observed_at=T0
    )
    removed = PolicyRemoved(kind="PodGroup", namespace="ml", name="train", observed_at=T0)
    for event in (
        group,
        removed,
        PolicyObserved(kind="PriorityClass", priority_class=PriorityClassInfo(name="high", value=1000), observed_at=T0),
        PolicyObserved(
            kind="LimitRange",
            limit_range=LimitRangeInfo(namespace="ml", name="lr", limits=(LimitRangeItem(),)),
            observed_at=T0,
        ),
        PolicyRemoved(kind="PriorityClass", name="high", observed_at=T0),
    ):
        assert [o.cell for o in route_policy(event, CELLS)] == [0, 1, 2, 3]


# --- state survives its changelog encoding ----------------------------------------------------------


def test_node_state_and_inputs_round_trip_through_json():
    p = pod("f", node_name="gpu-a", devices=(1,), milli=250)
    notice = SpotInterruptionNotice(node="gpu-a", issued_at=at(5), deadline=at(125))
    state, _ = run([observed(node()), bound(p), telemetry("gpu-a", 3, 1), NodeInput.of(notice)])
    assert NODE_STATE.validate_json(NODE_STATE.dump_json(state)) == state
    item = bound(p, withdraw_from=2)
    assert NODE_INPUT.validate_json(NODE_INPUT.dump_json(item)) == item


# --- the agents, in-process (faust's test_context: no broker) ------------------------------------


@pytest.fixture
def service():
    from berth.services.inventory.app import Layout, create_app

    from berth.bus.streams import RecordingOutbox

    built = create_app(
        Layout(cells=CELLS, pod_partitions=4, node_partitions=4),
        app_options={"store": "memory://", "broker": "kafka://127.0.0.1:1"},
        outbox=RecordingOutbox(),
        app_id="berth-inventory-unit",
    )
    built.app.finalize()
    built.app.flow_control.resume()
    return built


async def put(agent, event=None, *, raw: tuple[bytes, bytes] | None = None, headers=None):
    from berth.schemas.envelope import encode

    if raw is not None:
        key, value = raw
    else:
        record = encode(event, source="test")
        key, value, headers = record.key, record.value, record.headers
    await agent.put(value, key=key, headers=headers or [])


async def put_on(agent, topic: str, event=None, *, raw: tuple[bytes, bytes] | None = None, partition: int = 0):
    """``put`` onto one topic of an agent that reads several (faust's test wrapper names none)."""
    agent._get_strtopic = lambda channel: topic
    from berth.schemas.envelope import encode

    if raw is not None:
        (key, value), headers = raw, []
    else:
        record = encode(event, source="test")
        key, value, headers = record.key, record.value, record.headers
    await agent.put(value, key=key, headers=headers, partition=partition)


async def test_agents_route_a_bound_pod_through_the_node_stage(service):
    from berth.schemas.topics import DEAD_LETTER, DECISION_INPUTS, INVENTORY_STATE
    from berth.services.inventory.app import NODE_INPUTS

    outbox = service.outbox
    async with service.agents["berth.cluster.nodes.v1"].test_context() as nodes:
        await put(nodes, NodeObserved(node=node(cell=2), observed_at=at(0)))
    async with service.agents["pods"].test_context() as pods:
        await put_on(pods, "berth.cluster.pods.v1", pod_event(pod("p", node_name="gpu-a", devices=(1,), milli=500)))
        await put_on(pods, "berth.cluster.pods.v1", raw=(b"k", b"{not json"))
    handed_over = outbox.on(NODE_INPUTS)
    assert [item.key for item in handed_over] == [b"gpu-a", b"gpu-a"]  # node fact, then the pod
    async with service.agents["node-stage"].test_context() as stage:
        for item in handed_over:
            await put(stage, raw=(item.key, item.value))
    assert [(p.partition, p.event.type.split(".")[-2]) for p in outbox.on(DECISION_INPUTS.name)] == [
        (2, "node-observed"),
        (0, "foreign-node-observed"),
        (1, "foreign-node-observed"),
        (3, "foreign-node-observed"),
        (2, "pod-observed"),
    ]
    inventory = outbox.on(INVENTORY_STATE.name)[-1].event
    assert [d.free_milli for d in inventory.devices] == [1000, 500, 1000, 1000]
    [letter] = outbox.on(DEAD_LETTER.name)
    assert letter.event.source_topic == "berth.cluster.pods.v1" and "missing header" in letter.event.reason
    # The event ids are derived from the input's position: stable across reprocessing.
    ids = [p.event_id for p in outbox.on(DECISION_INPUTS.name)]
    assert len(set(ids)) == 5 and all(ids)


async def test_agents_pass_a_handed_over_pod_to_the_next_cell(service):
    from berth.schemas.topics import DECISION_INPUTS

    outbox = service.outbox
    free = pod("free")
    home = cell_of_pod(free, CELLS)
    async with service.agents["pods"].test_context() as pods:
        await put_on(pods, "berth.cluster.pods.v1", pod_event(free), partition=2)
        [opened] = outbox.on(DECISION_INPUTS.name)
        assert opened.event.route_partition == 2  # where the cell must send the pod back
        await put_on(
            pods, "berth.scheduler.handovers.v1", hand_over(PodRoute(cell=home, hop=0), route_partition=2), partition=2
        )
    routed = [(p.partition, p.event.type.split(".")[-2]) for p in outbox.on(DECISION_INPUTS.name)]
    assert routed == [(home, "pod-routed"), (home, "pod-deleted"), ((home + 1) % CELLS, "pod-routed")]
    assert service.pod_routes.get("uid-free").cell == (home + 1) % CELLS


def test_the_hand_over_topic_must_be_split_like_the_pod_topic():
    from berth.services.inventory.app import Layout

    from berth.bus.streams import StartupError

    counts = {
        "berth.scheduler.inputs.v1": 2,
        "berth.cluster.pods.v1": 4,
        "berth.scheduler.handovers.v1": 4,
        "berth.cluster.nodes.v1": 4,
    }
    assert Layout.of(counts) == Layout(cells=2, pod_partitions=4, node_partitions=4)
    with pytest.raises(StartupError, match="must have as many"):
        Layout.of({**counts, "berth.scheduler.handovers.v1": 3})


# --- the census of the other cells' nodes --------------------------------------------------------


def test_every_other_cell_gets_a_new_nodes_census_after_its_own_cell_got_the_node():
    _, outputs = run([observed(node(cell=2, taints=(), unschedulable=False))])
    assert [(o.cell, o.event.type.split(".")[-2]) for o in outputs if isinstance(o, ToCell)] == [
        (2, "node-observed"),
        (0, "foreign-node-observed"),
        (1, "foreign-node-observed"),
        (3, "foreign-node-observed"),
    ]
    sent = next(o.event for o in outputs if isinstance(o, ToCell) and o.cell == 0)
    assert (sent.name, sent.cell, sent.labels, sent.taints, sent.unschedulable) == (
        "gpu-a",
        2,
        {CELL_LABEL: "2"},
        (),
        False,
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param({"labels": {CELL_LABEL: "2", "team": "ml"}}, True, id="labelled"),
        pytest.param({"taints": (Taint(key="dedicated", effect="NoSchedule"),)}, True, id="tainted"),
        pytest.param({"unschedulable": True}, True, id="cordoned"),
        pytest.param({"allocatable": {"cpu": 1000}}, False, id="capacity only"),
        pytest.param({"annotations": {"x": "y"}}, False, id="annotation only"),
    ],
)
def test_the_census_is_sent_again_only_when_labels_taints_or_the_cordon_change(change, expected):
    state, _ = run([observed(node(cell=2))])
    _, outputs = run([observed(node(cell=2, **change), t=5), telemetry("gpu-a", 6, 1)], state)
    assert census(outputs) == ([(c, "foreign-node-observed", "gpu-a") for c in (0, 1, 3)] if expected else [])


def test_a_removed_node_leaves_the_census_of_the_other_cells():
    state, _ = run([observed(node(cell=2))])
    state, outputs = run([NodeInput.of(NodeRemoved(name="gpu-a", observed_at=at(5)))], state)
    assert routed(outputs) == [(2, "node-removed", "gpu-a")]
    assert census(outputs) == [(c, "foreign-node-removed", "gpu-a") for c in (0, 1, 3)]
    assert state.census is None
    _, outputs = run([NodeInput.of(NodeRemoved(name="gpu-a", observed_at=at(6)))], state)
    assert census(outputs) == []  # once


def test_a_node_moving_to_another_cell_is_foreign_to_its_old_cell_and_not_to_its_new_one():
    state, _ = run([observed(node(cell=1))])
    _, outputs = run([observed(node(cell=3), t=5)], state)
    assert routed(outputs)[:2] == [(1, "node-removed", "gpu-a"), (3, "node-observed", "gpu-a")]
    assert census(outputs) == [(c, "foreign-node-observed", "gpu-a") for c in (0, 1, 2)]
    assert {o.event.cell for o in outputs if isinstance(o, ToCell) and isinstance(o.event, ForeignNodeObserved)} == {3}


def test_a_node_state_written_before_the_census_existed_sends_it_on_its_next_observation():
    state, _ = run([observed(node(cell=2))])
    old = NODE_STATE.validate_json(NODE_STATE.dump_json(state.model_copy(update={"census": None, "census_cells": 0})))
    _, outputs = run([observed(node(cell=2), t=5)], old)
    assert routed(outputs) == [] and len(census(outputs)) == 3
