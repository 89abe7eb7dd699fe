"""The hand-over fold (berth.cells.handovers), called directly on HandOverState and the queue:
which pods are given up, when a routed pod is tried again, when a failure passes it on, and what
the hand-over decision carries."""

from __future__ import annotations

import pytest
from berth.schemas import HandOverPod
from berth.schemas.scheduler import RejectedNodes

from berth.cells.handovers import (
    HANDOVER_RETRY_TICKS,
    HandOverState,
    counting_cells_tried,
    hand_over,
    is_given_up,
    may_hand_over,
    on_routed,
    on_tick,
    take_back,
)
from berth.cells.queue import PendingPod, QueueState, observe_pending
from berth.core.engine import Outcome

from .fold_kit import SCHEDULER, T0, context, pending, position, routed, small_node

INCOMPLETE = {"tried": (1,), "cells": 2}
COMPLETE = {"tried": (1, 0), "cells": 2}
FIT_ERROR = "0/1 nodes are available: 1 Insufficient cpu."


def queue_with(*names: str) -> QueueState:
    queue = QueueState(scheduler_name=SCHEDULER)
    for offset, name in enumerate(names):
        observe_pending(queue, pending(name, uid=name), position(offset))
    return queue


def parked(queue: QueueState, uid: str, round_: dict | None, ticks: int = 0) -> None:
    """``uid`` tried, did not fit, and waits in ``unschedulable`` (routed with ``round_``)."""
    queue.active = [item for item in queue.active if item[1] != uid]
    queue.unschedulable.add(uid)
    entry = queue.pending[uid]
    entry.ticks_rested = ticks
    if round_ is not None:
        entry.routed = routed(entry.pod, **round_)


def active_uids(queue: QueueState) -> list[str]:
    return [uid for _, uid in queue.active]


# -- given up ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("handed_over", "uid", "taken", "left"),
    [
        pytest.param({"p": 3}, "p", True, {}, id="given-up"),
        pytest.param({"p": 3}, "q", False, {"p": 3}, id="another-pod"),
        pytest.param({}, "p", False, {}, id="nothing-given-up"),
    ],
)
def test_take_back(handed_over, uid, taken, left):
    state = HandOverState(handed_over=dict(handed_over))
    assert is_given_up(state, uid) is taken
    assert take_back(state, uid) is taken
    assert (state.handed_over, is_given_up(state, uid)) == (left, False)


# -- routed -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parked_first", "active", "unschedulable"),
    [
        pytest.param(False, ["p"], set(), id="first-try-keeps-its-place"),
        pytest.param(True, ["p"], set(), id="back-for-a-new-round-is-tried-now"),
    ],
)
def test_on_routed_remembers_the_round(parked_first, active, unschedulable):
    queue = queue_with("p")
    if parked_first:
        parked(queue, "p", None)
    event = routed(queue.pending["p"].pod, hop=4, **INCOMPLETE)
    on_routed(queue, event)
    assert queue.pending["p"].routed == event
    assert (active_uids(queue), queue.unschedulable) == (active, unschedulable)


def test_on_routed_of_a_pod_not_pending_here_changes_nothing():
    queue = queue_with("q")
    on_routed(queue, routed(pending("p", uid="p")))
    assert (sorted(queue.pending), active_uids(queue), queue.pending["q"].routed) == (["q"], ["q"], None)


# -- ticks --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("round_", "ticks", "activated"),
    [
        pytest.param(COMPLETE, 1, False, id="one-tick-too-soon"),
        pytest.param(COMPLETE, HANDOVER_RETRY_TICKS - 1, False, id="one-tick-short"),
        pytest.param(COMPLETE, HANDOVER_RETRY_TICKS, True, id="rested-enough"),
        pytest.param(INCOMPLETE, HANDOVER_RETRY_TICKS + 3, False, id="round-incomplete"),
        pytest.param(None, HANDOVER_RETRY_TICKS + 3, False, id="pinned-pod"),
    ],
)
def test_on_tick_tries_again_only_after_resting_the_retry_ticks(round_, ticks, activated):
    queue = queue_with("p")
    parked(queue, "p", round_)
    for _ in range(ticks):
        on_tick(queue)
    assert (active_uids(queue) == ["p"], "p" in queue.unschedulable) == (activated, not activated)
    assert queue.pending["p"].ticks_rested == (ticks if round_ is COMPLETE else 0)


def test_on_tick_leaves_active_pods_alone():
    queue = queue_with("p")
    queue.pending["p"].routed = routed(queue.pending["p"].pod, **COMPLETE)
    for _ in range(HANDOVER_RETRY_TICKS):
        on_tick(queue)
    assert (active_uids(queue), queue.pending["p"].ticks_rested) == (["p"], 0)


def test_retry_ticks_is_two():
    assert HANDOVER_RETRY_TICKS == 2


# -- may hand over ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("round_", "ticks", "passes_on"),
    [
        pytest.param(None, HANDOVER_RETRY_TICKS, False, id="routed-none"),
        pytest.param({"tried": (0,), "cells": 1}, HANDOVER_RETRY_TICKS, False, id="one-cell"),
        pytest.param(INCOMPLETE, 0, True, id="round-incomplete"),
        pytest.param({"tried": (2, 0), "cells": 3}, 0, True, id="two-of-three-tried"),
        pytest.param(COMPLETE, 0, False, id="round-complete-not-rested"),
        pytest.param(COMPLETE, HANDOVER_RETRY_TICKS - 1, False, id="round-complete-rested-too-little"),
        pytest.param(COMPLETE, HANDOVER_RETRY_TICKS, True, id="round-complete-rested"),
        pytest.param({"tried": (0, 0), "cells": 2}, 0, True, id="same-cell-twice-is-not-a-round"),
    ],
)
def test_may_hand_over(round_, ticks, passes_on):
    info = pending("p")
    entry = PendingPod(
        pod=info, sequence=0, ticks_rested=ticks, routed=routed(info, **round_) if round_ is not None else None
    )
    assert may_hand_over(entry) is passes_on


# -- hand over ----------------------------------------------------------------------------------


THIS_CELL = RejectedNodes(nodes=1, reasons={"Insufficient cpu": 1})
BEFORE = RejectedNodes(nodes=2, reasons={"Insufficient memory": 2})


@pytest.mark.parametrize(
    ("round_", "here", "elsewhere", "rejected"),
    [
        pytest.param(
            INCOMPLETE,
            THIS_CELL,
            BEFORE,
            RejectedNodes(nodes=3, reasons={"Insufficient cpu": 1, "Insufficient memory": 2}),
            id="mid-round-adds-the-cells-before",
        ),
        pytest.param(COMPLETE, THIS_CELL, BEFORE, THIS_CELL, id="new-round-starts-here"),
        pytest.param(INCOMPLETE, None, BEFORE, BEFORE, id="nothing-counted-here"),
        pytest.param(INCOMPLETE, THIS_CELL, None, THIS_CELL, id="first-cell-of-the-round"),
        pytest.param(COMPLETE, None, BEFORE, None, id="nothing-at-all"),
    ],
)
def test_hand_over_gives_the_pod_up(round_, here, elsewhere, rejected):
    ctx = context(small_node("n1", cpu=1000))
    queue = ctx.queue
    observe_pending(queue, pending("p", uid="p", cpu=5000), position(1))
    entry = queue.pending["p"]
    entry.routed = routed(entry.pod, hop=5, route_partition=3, elsewhere=elsewhere, **round_)
    state = HandOverState()
    decision = hand_over(
        state, queue, ctx.recorder, entry, Outcome(message=FIT_ERROR, rejected=here), position(9), T0, "snap"
    )
    assert (state.handed_over, queue.pending, queue.active) == ({"p": 5}, {}, [])
    record = decision.record
    assert (record.outcome, record.subject, record.message, record.snapshot_hash) == (
        "handed-over",
        "default/p",
        FIT_ERROR,
        "snap",
    )
    [command] = decision.commands
    assert isinstance(command, HandOverPod)
    assert (command.decision_id, command.pod_uid, command.hop, command.route_partition, command.rejected) == (
        record.decision_id,
        "p",
        5,
        3,
        rejected,
    )


# -- counting the cells tried -------------------------------------------------------------------


PREEMPTION = (
    " no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)


@pytest.mark.parametrize(
    ("routed_", "elsewhere", "here", "message", "rejected"),
    [
        pytest.param(False, None, THIS_CELL, FIT_ERROR, THIS_CELL, id="pinned-pod"),
        pytest.param(True, None, THIS_CELL, FIT_ERROR, THIS_CELL, id="no-cell-before"),
        pytest.param(True, BEFORE, None, FIT_ERROR, None, id="nothing-counted-here"),
        pytest.param(
            True,
            BEFORE,
            THIS_CELL,
            "0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient memory.",
            RejectedNodes(nodes=3, reasons={"Insufficient cpu": 1, "Insufficient memory": 2}),
            id="every-node-of-the-round",
        ),
        pytest.param(
            True,
            RejectedNodes(nodes=2, reasons={"Insufficient cpu": 2}),
            THIS_CELL,
            "0/3 nodes are available: 3 Insufficient cpu.",
            RejectedNodes(nodes=3, reasons={"Insufficient cpu": 3}),
            id="same-reason-summed",
        ),
    ],
)
def test_counting_cells_tried(routed_, elsewhere, here, message, rejected):
    info = pending("p")
    entry = PendingPod(pod=info, sequence=0, routed=routed(info, elsewhere=elsewhere, **COMPLETE) if routed_ else None)
    counted = counting_cells_tried(entry, Outcome(message=FIT_ERROR + PREEMPTION if here else FIT_ERROR, rejected=here))
    expected = message + PREEMPTION if here else message
    assert (counted.message, counted.rejected) == (expected, rejected)
