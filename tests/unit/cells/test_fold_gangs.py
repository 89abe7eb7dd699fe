"""The gang fold (berth.cells.gangs), called directly on GangState: PodGroups observed and
removed, bound members counted, and try_gang holding or placing a gang."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from berth.schemas import PolicyObserved
from berth.schemas.policy import PodGroupInfo, PriorityClassInfo

from berth.cells.gangs import (
    GangAttempt,
    GangState,
    member_bound,
    member_deleted,
    pod_group_observed,
    pod_group_removed,
    try_gang,
)
from berth.cells.queue import drop_from_active, observe_pending
from berth.cells.records import CellDecision
from berth.core.config import default_document
from berth.core.engine import Engine, Outcome

from .fold_kit import T0, context, pending, position, small_node

GROUP = ("ns", "g")


class GangRecordingEngine(Engine):
    """The real engine, remembering the ``min_member`` each gang was asked to place with."""

    def __init__(self) -> None:
        super().__init__(default_document())
        self.gang_calls: list[tuple[tuple[str, ...], int]] = []

    def schedule_gang(self, pods: Sequence, min_member: int, *, profile: str | None = None) -> Outcome:
        self.gang_calls.append((tuple(p.uid for p in pods), min_member))
        return super().schedule_gang(pods, min_member, profile=profile)


def pod_group(min_member: int, namespace: str = "ns", name: str = "g") -> PolicyObserved:
    group = PodGroupInfo(namespace=namespace, name=name, min_member=min_member)
    return PolicyObserved(kind="PodGroup", pod_group=group, observed_at=T0)


def member(index: int, *, group: str = "g", namespace: str = "ns", cpu: int = 500, **fields):
    return pending(f"m{index}", namespace=namespace, uid=f"m{index}", cpu=cpu, pod_group=group, **fields)


def gang_setup(pending_members: int, bound_members: int, min_member: int | None, *, cpu: int = 500):
    """A context whose queue holds ``pending_members`` members of ns/g (all active), with
    ``bound_members`` members counted bound and the PodGroup known when ``min_member``."""
    ctx = context(small_node("n1"), small_node("n2"), over=GangRecordingEngine())
    state = GangState()
    if min_member is not None:
        pod_group_observed(state, pod_group(min_member))
    for index in range(pending_members):
        observe_pending(ctx.queue, member(index, cpu=cpu), position(index))
    for index in range(bound_members):
        member_bound(state, member(100 + index, node_name="n1", phase="Running"))
    return ctx, state


def attempt(ctx, state, offset: int = 50):
    return try_gang(state, ctx.queue, ctx.engine, ctx.recorder, GROUP, position(offset), T0)


# -- PodGroups ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "known"),
    [
        pytest.param(pod_group(3), {GROUP: 3}, id="pod-group"),
        pytest.param(pod_group(2, namespace="other"), {("other", "g"): 2}, id="keyed-by-namespace"),
        pytest.param(
            PolicyObserved(kind="PriorityClass", priority_class=PriorityClassInfo(name="g", value=1), observed_at=T0),
            {},
            id="other-kind-ignored",
        ),
    ],
)
def test_pod_group_observed(event, known):
    state = GangState()
    pod_group_observed(state, event)
    assert state.min_member == known


def test_pod_group_observed_again_replaces_min_member():
    state = GangState()
    pod_group_observed(state, pod_group(3))
    pod_group_observed(state, pod_group(5))
    assert state.min_member == {GROUP: 5}


@pytest.mark.parametrize(
    ("kind", "namespace", "name", "left"),
    [
        pytest.param("PodGroup", "ns", "g", {}, id="removed"),
        pytest.param("PodGroup", "ns", "other", {GROUP: 3}, id="another-group"),
        pytest.param("PriorityClass", "ns", "g", {GROUP: 3}, id="another-kind"),
    ],
)
def test_pod_group_removed(kind, namespace, name, left):
    state = GangState()
    pod_group_observed(state, pod_group(3))
    pod_group_removed(state, kind, namespace, name)
    assert state.min_member == left


# -- bound members ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "bound"),
    [
        pytest.param([member(1, node_name="n1")], {GROUP: {"m1"}}, id="member"),
        pytest.param([member(1, node_name="n1"), member(1, node_name="n1")], {GROUP: {"m1"}}, id="counted-once"),
        pytest.param([member(1, node_name="n1"), member(2, node_name="n2")], {GROUP: {"m1", "m2"}}, id="two"),
        pytest.param([pending("solo", node_name="n1")], {}, id="not-a-gang-member"),
    ],
)
def test_member_bound(pods, bound):
    state = GangState()
    for info in pods:
        member_bound(state, info)
    assert state.bound == bound


def test_member_deleted_discards_from_every_group():
    state = GangState()
    member_bound(state, member(1, node_name="n1"))
    member_bound(state, member(2, node_name="n1"))
    member_deleted(state, "m1")
    member_deleted(state, "unknown")
    assert state.bound == {GROUP: {"m2"}}


# -- try_gang -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pending_members", "bound_members", "min_member", "message"),
    [
        pytest.param(1, 0, None, 'pod group "ns/g" not found', id="group-unknown"),
        pytest.param(1, 0, 3, "waiting for gang ns/g: 1/3 members pending or running", id="one-of-three"),
        pytest.param(1, 1, 3, "waiting for gang ns/g: 2/3 members pending or running", id="bound-members-count"),
        pytest.param(2, 0, 3, "waiting for gang ns/g: 2/3 members pending or running", id="two-of-three"),
    ],
)
def test_try_gang_holds_until_min_member_are_pending_or_running(pending_members, bound_members, min_member, message):
    ctx, state = gang_setup(pending_members, bound_members, min_member)
    held = attempt(ctx, state)
    assert isinstance(held, CellDecision)
    record = held.record
    uids = [f"m{i}" for i in range(pending_members)]
    assert (record.outcome, record.subject, record.message, held.commands) == ("held", "ns/g", message, ())
    assert record.pods == tuple(f"ns/{uid}" for uid in uids)
    assert (ctx.queue.active, ctx.queue.unschedulable) == ([], set(uids))
    assert all(ctx.queue.pending[uid].last_message == message for uid in uids)
    assert ctx.engine.gang_calls == []


def test_try_gang_does_not_repeat_an_unchanged_hold():
    ctx, state = gang_setup(1, 0, 3)
    assert isinstance(attempt(ctx, state, offset=1), CellDecision)
    assert attempt(ctx, state, offset=2) is None
    observe_pending(ctx.queue, member(1), position(3))  # the message changes: 2/3
    again = attempt(ctx, state, offset=4)
    assert isinstance(again, CellDecision)
    assert again.record.message == "waiting for gang ns/g: 2/3 members pending or running"


def test_try_gang_without_members_records_nothing():
    ctx, state = gang_setup(1, 0, 3)
    ctx.queue.pending["m0"].in_flight = "cmd-1"  # the only member is placed already
    assert attempt(ctx, state) is None


@pytest.mark.parametrize(
    ("pending_members", "bound_members", "min_member", "asked"),
    [
        pytest.param(3, 0, 3, 3, id="all-pending"),
        pytest.param(1, 2, 3, 1, id="bound-members-lower-the-ask"),
        pytest.param(2, 1, 3, 2, id="some-bound"),
        pytest.param(1, 5, 2, 1, id="at-least-one"),
    ],
)
def test_try_gang_places_the_members_with_min_member_less_bound(pending_members, bound_members, min_member, asked):
    ctx, state = gang_setup(pending_members, bound_members, min_member)
    snapshot = ctx.engine.snapshot_hash()
    result = attempt(ctx, state)
    assert isinstance(result, GangAttempt)
    uids = tuple(f"m{i}" for i in range(pending_members))
    assert ctx.engine.gang_calls == [(uids, asked)]
    assert tuple(entry.pod.uid for entry in result.members) == uids
    assert (result.subject, result.name, result.snapshot) == ("ns/g", "g", snapshot)
    assert result.outcome.placed and len(result.outcome.placements) == pending_members
    assert ctx.queue.active == []


def test_try_gang_members_go_in_queue_order_and_skip_other_groups_and_in_flight():
    ctx, state = gang_setup(0, 0, 2)
    observe_pending(ctx.queue, member(1, priority=0), position(1))
    observe_pending(ctx.queue, member(2, priority=10), position(2))
    observe_pending(ctx.queue, member(3), position(3))
    observe_pending(ctx.queue, member(4, group="other"), position(4))
    observe_pending(ctx.queue, member(5, namespace="elsewhere"), position(5))
    drop_from_active(ctx.queue, ctx.queue.pending["m3"])
    ctx.queue.pending["m3"].in_flight = "cmd-1"  # placed already, as the scheduling round leaves it
    result = attempt(ctx, state)
    assert isinstance(result, GangAttempt)
    assert [entry.pod.uid for entry in result.members] == ["m2", "m1"]
    assert sorted(uid for _, uid in ctx.queue.active) == ["m4", "m5"]


def test_try_gang_that_does_not_fit_is_an_unplaced_attempt():
    ctx, state = gang_setup(2, 0, 2, cpu=5000)
    result = attempt(ctx, state)
    assert isinstance(result, GangAttempt)
    assert not result.outcome.placed
    assert ctx.engine.state.pods.get("m0") is None


def test_a_member_left_out_of_a_placed_gang_is_tried_again_when_the_cluster_changes():
    """minMember 2 of three members, room for two: the third waits as unschedulable pods do and
    is placed once a node is added (it used to be neither active nor unschedulable, for good)."""
    from berth.schemas import NodeObserved, PodObserved

    from berth.cells import Cell, CellConfig

    cell = Cell(0, CellConfig())
    members = [pending(f"m{i}", cpu=1000, namespace="ns", pod_group="g") for i in range(3)]
    inputs = [
        NodeObserved(node=small_node("n1", cpu=2000), observed_at=T0),
        *(PodObserved(pod=member, observed_at=T0) for member in members),
        PolicyObserved(kind="PodGroup", pod_group=PodGroupInfo(namespace="ns", name="g", min_member=2), observed_at=T0),
    ]
    decided = [d for offset, event in enumerate(inputs) for d in cell.handle(event, position(offset))]
    placed = [d for d in decided if d.record.outcome == "placed"]
    assert [d.record.pods for d in placed] == [("ns/m0", "ns/m1")]
    assert "uid-ns-m2" in cell.queue.unschedulable

    later = cell.handle(NodeObserved(node=small_node("n2", cpu=2000), observed_at=T0), position(len(inputs)))
    assert [(d.record.outcome, d.record.subject, d.record.node) for d in later] == [("placed", "ns/g", "n2")]
