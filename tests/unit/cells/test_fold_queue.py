"""The pending-pod queue fold (berth.cells.queue), called directly on a QueueState: activeQ order,
the unschedulable set, bound/pending observations, deletions and command results."""

from __future__ import annotations

import pytest
from berth.schemas import CommandResult, OwnerReference, PlacePods, ScalePool

from berth.cells.queue import (
    PendingPod,
    QueueState,
    activate,
    forget_pod,
    is_schedulable_here,
    observe_bound,
    observe_pending,
    on_result,
    pod_deleted,
    queue_key,
    requeue_unschedulable,
    shape,
)

from .fold_kit import SCHEDULER, T0, engine, pending, position, small_node

PLACE = PlacePods.model_fields["type"].default
SCALE = ScalePool.model_fields["type"].default


def active_uids(queue: QueueState) -> list[str]:
    return [uid for _, uid in queue.active]


def fed(*pods: tuple[str, int, int]) -> QueueState:
    """A queue fed ``(name, priority, offset)`` pending pods, in the order given."""
    queue = QueueState(scheduler_name=SCHEDULER)
    for name, priority, offset in pods:
        observe_pending(queue, pending(name, priority=priority, uid=name), position(offset))
    return queue


# -- order -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "order"),
    [
        pytest.param([("a", 0, 1), ("b", 0, 2), ("c", 0, 3)], ["a", "b", "c"], id="same-priority-by-arrival"),
        pytest.param([("c", 0, 3), ("a", 0, 1), ("b", 0, 2)], ["a", "b", "c"], id="arrival-is-offset-not-feed-order"),
        pytest.param([("low", 0, 1), ("high", 100, 2)], ["high", "low"], id="priority-beats-arrival"),
        pytest.param(
            [("a", 5, 1), ("b", 10, 9), ("c", 5, 0), ("d", -1, 0)], ["b", "c", "a", "d"], id="priority-then-arrival"
        ),
        pytest.param([("y", 0, 4), ("x", 0, 4)], ["x", "y"], id="tie-broken-by-uid"),
    ],
)
def test_active_is_ordered_by_priority_then_arrival_then_uid(pods, order):
    queue = fed(*pods)
    assert active_uids(queue) == order
    assert queue.active == sorted(queue.active)
    assert [key for key, _ in queue.active] == [queue_key(queue.pending[uid]) for uid in order]


@pytest.mark.parametrize(
    ("setup", "uid", "active"),
    [
        pytest.param("none", "a", ["a", "b"], id="already-active-is-idempotent"),
        pytest.param("dropped", "a", ["a", "b"], id="back-at-its-place"),
        pytest.param("in-flight", "a", ["b"], id="in-flight-stays-out"),
        pytest.param("none", "ghost", ["a", "b"], id="unknown-uid-ignored"),
    ],
)
def test_activate(setup, uid, active):
    queue = fed(("a", 0, 1), ("b", 0, 2))
    if setup in ("dropped", "in-flight"):
        queue.active = [item for item in queue.active if item[1] != "a"]
    if setup == "in-flight":
        queue.pending["a"].in_flight = "cmd-1"
    activate(queue, uid)
    assert active_uids(queue) == active


def test_forget_pod_drops_it_from_pending_active_and_unschedulable():
    queue = fed(("a", 0, 1), ("b", 0, 2))
    queue.unschedulable.add("a")
    forget_pod(queue, "a")
    assert ("a" in queue.pending, "a" in queue.unschedulable, active_uids(queue)) == (False, False, ["b"])
    forget_pod(queue, "a")  # a second time changes nothing
    assert active_uids(queue) == ["b"]


# -- requeue on a cluster change --------------------------------------------------------------


@pytest.mark.parametrize(
    ("unschedulable", "in_flight", "active"),
    [
        pytest.param(set(), set(), ["c"], id="nothing-waiting"),
        pytest.param({"a", "b"}, set(), ["a", "b", "c"], id="all-back-in-queue-order"),
        pytest.param({"b"}, set(), ["b", "c"], id="only-the-waiting-ones"),
        pytest.param({"a", "b"}, {"a"}, ["b", "c"], id="in-flight-not-reactivated"),
    ],
)
def test_requeue_unschedulable_sends_every_waiting_pod_back(unschedulable, in_flight, active):
    queue = fed(("a", 1, 1), ("b", 0, 2), ("c", 0, 3))
    queue.active = [item for item in queue.active if item[1] == "c"]  # a and b tried and parked
    queue.unschedulable = set(unschedulable)
    for uid in in_flight:
        queue.pending[uid].in_flight = "cmd"
    requeue_unschedulable(queue)
    assert active_uids(queue) == active
    assert queue.unschedulable == set()


# -- observations -------------------------------------------------------------------------------


def test_observe_pending_update_keeps_the_place_and_refreshes_shape():
    queue = fed(("a", 0, 1), ("b", 0, 2))
    before = queue.pending["a"].shape
    bigger = pending("a", uid="a", cpu=900)
    observe_pending(queue, bigger, position(7))
    entry = queue.pending["a"]
    assert (entry.sequence, entry.pod, active_uids(queue)) == (1, bigger, ["a", "b"])
    assert entry.shape == shape(bigger) != before


def test_observe_pending_ignores_a_late_echo_of_a_pod_already_placed():
    queue = QueueState(scheduler_name=SCHEDULER)
    queue.assumed["a"] = "cmd-1"
    observe_pending(queue, pending("a", uid="a"), position(3))
    assert (queue.pending, queue.active) == ({}, [])


@pytest.mark.parametrize(
    ("changes", "here"),
    [
        pytest.param({}, True, id="pending-for-berth"),
        pytest.param({"scheduler_name": "default-scheduler"}, False, id="another-scheduler"),
        pytest.param({"phase": "Running"}, False, id="not-pending"),
        pytest.param({"uid": "bound-uid"}, False, id="known-bound"),
    ],
)
def test_is_schedulable_here(changes, here):
    queue = QueueState(scheduler_name=SCHEDULER)
    queue.bound.add("bound-uid")
    assert is_schedulable_here(queue, pending("p").model_copy(update=changes)) is here


@pytest.mark.parametrize(
    ("evicting", "changed"),
    [
        pytest.param(False, True, id="bound-holds-capacity"),
        pytest.param(True, False, id="victim-on-its-way-out"),
    ],
)
def test_observe_bound(evicting, changed):
    real = engine()
    real.upsert_node(small_node("n1"))
    queue = fed(("p", 0, 1))
    queue.assumed["p"] = "cmd-1"
    bound = pending("p", uid="p").model_copy(update={"node_name": "n1", "phase": "Running"})
    if evicting:
        queue.evicting["p"] = (bound, "cmd-9")
    assert observe_bound(queue, real, bound) is changed
    assert ("p" in queue.pending, "p" in queue.assumed, "p" in queue.bound) == (
        (False, False, True) if changed else (True, True, False)
    )
    assert (real.state.pods.get("p") is not None) is changed


@pytest.mark.parametrize(
    ("evicting", "victim"),
    [
        pytest.param(False, False, id="plain-pod"),
        pytest.param(True, True, id="preemption-victim"),
    ],
)
def test_pod_deleted(evicting, victim):
    queue = fed(("p", 0, 1))
    queue.bound.add("p")
    queue.unschedulable.add("p")
    if evicting:
        queue.evicting["p"] = (pending("p", uid="p", node_name="n1"), "cmd-1")
    assert pod_deleted(queue, "p") is victim
    assert (queue.pending, queue.active, queue.bound, queue.unschedulable, queue.evicting) == ({}, [], set(), set(), {})


# -- command results ----------------------------------------------------------------------------


def placed_in_flight(command_id: str = "cmd-1"):
    """A queue and engine where pod ``p`` is placed (assumed) by ``command_id`` and its victim
    ``v`` is being evicted from n1."""
    real = engine()
    real.upsert_node(small_node("n1"))
    queue = fed(("p", 0, 1))
    outcome = real.schedule(queue.pending["p"].pod)
    assert outcome.placed
    queue.active.clear()
    queue.pending["p"].in_flight = command_id
    queue.assumed["p"] = command_id
    queue.in_flight[command_id] = ("p",)
    victim = pending("v", uid="v", node_name="n1", phase="Running")
    queue.evicting["v"] = (victim, command_id)
    return queue, real


def result(status: str, *, command_id: str = "cmd-1", command_type: str = PLACE, reason: str = "node gone"):
    return CommandResult(
        command_id=command_id,
        decision_id="dec-1",
        command_type=command_type,
        status=status,
        reason=reason,
        applied_at=T0,
    )


@pytest.mark.parametrize(
    ("event", "released", "restored", "message"),
    [
        pytest.param(result("failed"), True, {"v"}, "binding failed: node gone", id="failed"),
        pytest.param(
            result("conflict", reason="pod already bound"),
            True,
            {"v"},
            "binding failed: pod already bound",
            id="conflict",
        ),
        pytest.param(result("applied"), False, set(), None, id="applied-waits-for-the-bound-echo"),
        pytest.param(result("failed", command_type=SCALE), False, set(), None, id="scale-pool-result"),
        pytest.param(result("failed", command_id="cmd-other"), False, set(), None, id="unknown-command"),
    ],
)
def test_on_result(event, released, restored, message):
    queue, real = placed_in_flight()
    assert on_result(queue, real, event) == (released, restored)
    entry = queue.pending["p"]
    assert entry.last_message == message
    if released:
        assert (entry.in_flight, active_uids(queue), queue.assumed) == (None, ["p"], {})
        assert real.state.pods.get("p") is None
        assert queue.evicting == {}
        restored_victim = real.state.pods.get("v")
        assert restored_victim is not None and restored_victim.node_name == "n1"
    else:
        assert (entry.in_flight, active_uids(queue), "v" in queue.evicting) == ("cmd-1", [], True)
        assert real.state.pods.get("p") is not None


def test_on_result_forgets_the_command_whatever_came_of_it():
    queue, real = placed_in_flight()
    on_result(queue, real, result("applied"))
    assert queue.in_flight == {}
    assert on_result(queue, real, result("failed")) == (False, set())  # too late: already settled


def bound_copy(uid: str, node: str = "n1"):
    return pending(uid, uid=uid).model_copy(update={"node_name": node, "phase": "Running"})


def test_the_bound_event_confirms_a_placement_without_its_result():
    # The binder sends the cell no result for an applied command: the pod's bound event must
    # settle the command, or in_flight would grow by one entry per placement.
    queue, real = placed_in_flight()
    assert observe_bound(queue, real, bound_copy("p"))
    assert (queue.in_flight, queue.assumed, "p" in queue.pending) == ({}, {}, False)
    assert on_result(queue, real, result("failed")) == (False, set())  # nothing left to release
    assert real.state.pods.get("p") is not None


def test_a_gang_placement_waits_for_each_member_it_placed():
    real = engine()
    real.upsert_node(small_node("n1"))
    queue = fed(("a", 0, 1), ("b", 0, 2))
    queue.in_flight["cmd-g"] = ("a", "b")
    queue.assumed.update({"a": "cmd-g", "b": "cmd-g"})
    observe_bound(queue, real, bound_copy("a"))
    assert (queue.in_flight, queue.assumed) == ({"cmd-g": ("b",)}, {"b": "cmd-g"})
    observe_bound(queue, real, bound_copy("b"))
    assert (queue.in_flight, queue.assumed) == ({}, {})


def test_an_assumed_pod_deleted_before_its_binding_keeps_its_command_for_the_failure_result():
    queue, real = placed_in_flight()
    pod_deleted(queue, "p")
    real.delete_pod("p")
    assert (queue.assumed, queue.in_flight) == ({}, {"cmd-1": ("p",)})
    released, restored = on_result(queue, real, result("conflict", reason="pod not found"))
    assert (released, restored, queue.in_flight) == (False, {"v"}, {})


# -- shape --------------------------------------------------------------------------------------


BASE = pending("p", cpu=500, labels={"app": "x"})


@pytest.mark.parametrize(
    ("changes", "same"),
    [
        pytest.param({"uid": "other", "name": "q"}, True, id="identity"),
        pytest.param({"creation_time": T0.replace(year=2030)}, True, id="creation-time"),
        pytest.param({"annotations": {"note": "x"}}, True, id="annotations"),
        pytest.param({"owner": OwnerReference(kind="ReplicaSet", name="rs")}, True, id="owner"),
        pytest.param({"requests": {"cpu": 501}}, False, id="requests"),
        pytest.param({"labels": {"app": "y"}}, False, id="labels-matter-to-affinity"),
        pytest.param({"priority": 7}, False, id="priority"),
    ],
)
def test_shape_reads_what_scheduling_reads(changes, same):
    assert (shape(BASE.model_copy(update=changes)) == shape(BASE)) is same


def test_pending_pod_defaults():
    entry = PendingPod(pod=BASE, sequence=3)
    assert (entry.attempts, entry.in_flight, entry.routed, entry.ticks_rested, entry.last_message) == (
        0,
        None,
        None,
        0,
        None,
    )
