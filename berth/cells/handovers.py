"""Hand-overs between cells: a pod that pins no cell may be placed in any of them.

The inventory routes such a pod (:class:`~berth.schemas.PodRouted`) through a round of cells.
While its round has an untried cell, a cell places it only if it fits without preemption;
otherwise the cell records ``handed-over``, issues a :class:`~berth.schemas.HandOverPod` and
forgets the pod (ignoring its echoes, routed here before the hand-over was acted on) until the
inventory routes it here again. The last cell of a round may preempt, and reports the pod
unschedulable over the nodes of every cell of the round. A pod resting there goes round again
after :data:`HANDOVER_RETRY_TICKS` cell ticks, since room may have been freed in cells it
cannot see.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from berth.core.engine import Outcome
from berth.core.messages import preemption_verdicts, with_more_nodes, with_more_preemption
from berth.schemas import HandOverPod, InputPosition, PodRouted, RejectedNodes

from .queue import PendingPod, QueueState, activate, forget_pod
from .records import CellDecision, Recorder, digest

__all__ = [
    "HANDOVER_RETRY_TICKS",
    "HandOverState",
    "counting_cells_tried",
    "hand_over",
    "is_given_up",
    "may_hand_over",
    "on_routed",
    "on_tick",
    "take_back",
]

HANDOVER_RETRY_TICKS = 2
"""A pod no cell could place rests in the last cell of its round; once it has rested through this
many :class:`~berth.schemas.CellTick` s it is tried again and, failing, handed on for a new round
(kube-scheduler retries unschedulable pods on a timer too, ``podMaxInUnschedulablePodsDuration``)."""


@dataclass
class HandOverState:
    handed_over: dict[str, int] = field(default_factory=dict)
    """uid → hop of pods this cell gave up and the inventory has not yet taken away."""


def take_back(state: HandOverState, uid: str) -> bool:
    """The pod is routed here again, bound, or gone: stop ignoring it. True if it was given up."""
    return state.handed_over.pop(uid, None) is not None


def is_given_up(state: HandOverState, uid: str) -> bool:
    return uid in state.handed_over


def on_routed(queue: QueueState, routed: PodRouted) -> None:
    """A pod routed here for a try in its round (first, next or again), after the cell folded
    it as a plain observation: remember its round; back for a new round, try it again now."""
    uid = routed.pod.uid
    entry = queue.pending.get(uid)
    if entry is None:
        return  # not pending for this scheduler (or already placed here): nothing to try
    entry.routed = routed
    if uid in queue.unschedulable:
        queue.unschedulable.discard(uid)
        activate(queue, uid)


def on_tick(queue: QueueState) -> None:
    """Time passes for the pods resting at the end of their round: those that have rested
    long enough are tried again (and handed on for a new round if they still do not fit)."""
    for uid in sorted(queue.unschedulable):
        entry = queue.pending.get(uid)
        if entry is None or entry.routed is None or not entry.routed.round_complete:
            continue
        entry.ticks_rested += 1
        if entry.ticks_rested >= HANDOVER_RETRY_TICKS:
            queue.unschedulable.discard(uid)
            activate(queue, uid)


def may_hand_over(entry: PendingPod) -> bool:
    """Whether a failure here passes the pod on: its round has an untried cell, or it has
    rested here through :data:`HANDOVER_RETRY_TICKS` ticks."""
    routed = entry.routed
    if routed is None or routed.cells < 2:
        return False
    return not routed.round_complete or entry.ticks_rested >= HANDOVER_RETRY_TICKS


def hand_over(
    state: HandOverState,
    queue: QueueState,
    recorder: Recorder,
    entry: PendingPod,
    outcome: Outcome,
    position: InputPosition,
    now: datetime,
    snapshot: str,
) -> CellDecision:
    """Give the pod up: a ``handed-over`` record and the HandOverPod command for the inventory."""
    pod, routed = entry.pod, entry.routed
    assert routed is not None
    forget_pod(queue, pod.uid)
    state.handed_over[pod.uid] = routed.hop
    record = recorder.record(
        position, pod.key, "handed-over", now, snapshot=snapshot, message=outcome.message, verdicts=outcome.verdicts
    )
    # A new round starts from this cell: what the cells before it said is stale by now.
    before = None if routed.round_complete else routed.elsewhere
    own = _with_preemption(outcome.rejected, outcome.message)
    rejected = own.plus(before) if own is not None else before
    command = HandOverPod(
        command_id=digest(record.decision_id, "hand-over"),
        decision_id=record.decision_id,
        cell=recorder.cell,
        pod_uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        hop=routed.hop,
        route_partition=routed.route_partition,
        rejected=rejected,
        issued_at=now,
    )
    return CellDecision(record, (command,))


def counting_cells_tried(entry: PendingPod, outcome: Outcome) -> Outcome:
    """The outcome of a pod at the end of its round, its message counting the nodes of every cell
    of the round (kube-scheduler's FitError counts every node of the cluster). The preemption
    part counts them too when every cell before found no node to free (then what each said of
    its nodes is what kube's would say); otherwise it speaks of this cell's nodes only."""
    routed = entry.routed
    if routed is None or routed.elsewhere is None or outcome.rejected is None:
        return outcome
    more = routed.elsewhere
    message = with_more_nodes(
        outcome.message, outcome.rejected.nodes, outcome.rejected.reasons, more.nodes, more.reasons
    )
    if more.preemption is not None:
        message = with_more_preemption(message, more.nodes, more.preemption)
    return replace(outcome, message=message, rejected=outcome.rejected.plus(more))


def _with_preemption(rejected: RejectedNodes | None, message: str) -> RejectedNodes | None:
    """This cell's rejection with what preemption said of its nodes (the PostFilter runs even
    when the cell may not preempt), when its message says it of all of them."""
    if rejected is None:
        return None
    said = preemption_verdicts(message)
    if said is None or said[0] != rejected.nodes:
        return rejected
    return rejected.model_copy(update={"preemption": dict(sorted(said[1].items()))})
