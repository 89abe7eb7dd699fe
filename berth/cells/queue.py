"""The pending-pod queue of one cell: kube-scheduler's activeQ and unschedulable set, and the
pods placed but not yet confirmed.

- ``active``: pods to try, ordered by priority (high first), then arrival (input offset), then
  UID: kube's activeQ order without its timestamps;
- ``unschedulable``: pods that did not fit; they wait until the cluster changes (a node added
  or changed, a pod deleted, a placement failed, a policy changed), then all go back to
  ``active`` at once, as kube moves its unschedulable pods on a cluster event;
- ``assumed`` and ``in_flight``: pods the cell placed whose binding the cluster has not
  confirmed; the engine holds them as assumed, so nothing is allocated twice before the
  inventory catches up; the pod's bound event confirms it, a failed command releases it and
  queues it again;
- ``evicting``: preemption victims whose room is promised to their preemptor, so a late "still
  bound" echo must not bring them back; ``bound``: pods the cluster reported bound (a binding is
  final, so an unbound observation of one is an old event delivered again).

Functions here change the queue (and the engine, for pods' capacity) and make no decisions;
the scheduling round (:mod:`berth.cells.scheduling`) decides.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field

from berth.core.engine import Engine
from berth.schemas import CommandResult, InputPosition, PodInfo, PodRouted, ScalePool

from .records import digest

__all__ = [
    "PendingPod",
    "QueueState",
    "activate",
    "drop_from_active",
    "forget_pod",
    "observe_bound",
    "is_schedulable_here",
    "observe_pending",
    "on_result",
    "pod_deleted",
    "queue_key",
    "requeue_unschedulable",
    "shape",
]

_IDENTITY = {"uid", "name", "creation_time", "owner", "annotations"}
_SCALE_POOL = ScalePool.model_fields["type"].default


def shape(pod: PodInfo) -> str:
    """What scheduling reads of a pod, without its identity (GPU annotations are parsed into
    fields already; labels stay: affinity and spreading match on them)."""
    return digest(json.dumps(pod.model_dump(mode="json", exclude=_IDENTITY), sort_keys=True))


@dataclass
class PendingPod:
    pod: PodInfo
    sequence: int
    """Arrival order in the cell (input offset): the queue's tie-breaker after priority."""
    last_message: str | None = None
    attempts: int = 0
    in_flight: str | None = None
    """The command id of the placement awaiting its result, if any."""
    routed: PodRouted | None = None
    """How the inventory routed the pod here when it may go to other cells (None: pinned here)."""
    ticks_rested: int = 0
    """:class:`~berth.schemas.CellTick` s seen while resting here at the end of its round."""
    shape: str = ""
    """A digest of everything about the pod that scheduling looks at (not its identity): two
    pods of one shape fit, or fail, the same way on the same snapshot."""


def queue_key(entry: PendingPod) -> tuple[int, int, str]:
    return (-entry.pod.priority, entry.sequence, entry.pod.uid)


@dataclass
class QueueState:
    scheduler_name: str
    pending: dict[str, PendingPod] = field(default_factory=dict)
    active: list[tuple[tuple[int, int, str], str]] = field(default_factory=list)
    unschedulable: set[str] = field(default_factory=set)
    assumed: dict[str, str] = field(default_factory=dict)
    """uid → id of the PlacePods command whose binding is not confirmed yet."""
    in_flight: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """command id → pod UIDs it places."""
    evicting: dict[str, tuple[PodInfo, str]] = field(default_factory=dict)
    """victim uid → (the victim, the preempting command)."""
    bound: set[str] = field(default_factory=set)


def activate(queue: QueueState, uid: str) -> None:
    """Put a pending pod (not in flight) into ``active`` at its place; idempotent."""
    entry = queue.pending.get(uid)
    if entry is None or entry.in_flight is not None:
        return
    key = queue_key(entry)
    index = bisect.bisect_left(queue.active, (key, uid))
    if index < len(queue.active) and queue.active[index] == (key, uid):
        return
    queue.active.insert(index, (key, uid))


def drop_from_active(queue: QueueState, entry: PendingPod) -> None:
    key = (queue_key(entry), entry.pod.uid)
    index = bisect.bisect_left(queue.active, key)
    if index < len(queue.active) and queue.active[index] == key:
        del queue.active[index]


def forget_pod(queue: QueueState, uid: str) -> None:
    """The pod is no longer pending here (bound, deleted, handed over, or a victim)."""
    entry = queue.pending.pop(uid, None)
    queue.unschedulable.discard(uid)
    if entry is not None:
        drop_from_active(queue, entry)


def requeue_unschedulable(queue: QueueState) -> None:
    """The cluster changed: every unschedulable pod is tried again."""
    if queue.unschedulable:
        for uid in sorted(queue.unschedulable):
            activate(queue, uid)
        queue.unschedulable.clear()


def observe_bound(queue: QueueState, engine: Engine, pod: PodInfo) -> bool:
    """A pod observed bound. False when it is a victim on its way out (its room already belongs
    to the preemptor: nothing changes); else it holds capacity for real now (bound by us,
    confirmed, or by anyone else) and is no longer pending or assumed."""
    if pod.uid in queue.evicting:
        return False
    _settle_assumed(queue, pod.uid)
    forget_pod(queue, pod.uid)
    queue.bound.add(pod.uid)
    engine.upsert_bound_pod(pod)
    return True


def _settle_assumed(queue: QueueState, uid: str) -> None:
    """The cluster bound an assumed pod: its command no longer waits for it.

    This is what confirms an applied placement: the binder sends the cell only the results of
    commands that did not apply (:attr:`~berth.schemas.CommandResult.concerns_issuing_cell`).
    """
    command_id = queue.assumed.pop(uid, None)
    if command_id is None:
        return
    waiting = tuple(other for other in queue.in_flight.get(command_id, ()) if other != uid)
    if waiting:
        queue.in_flight[command_id] = waiting
    else:
        queue.in_flight.pop(command_id, None)


def is_schedulable_here(queue: QueueState, pod: PodInfo) -> bool:
    """An unbound pod this cell's scheduler should place (and not one it knows as bound)."""
    return pod.scheduler_name == queue.scheduler_name and pod.phase == "Pending" and pod.uid not in queue.bound


def observe_pending(queue: QueueState, pod: PodInfo, position: InputPosition) -> None:
    """A pending pod observed: a spec update keeps its place in the queue; a late echo of a pod
    already placed changes nothing; a new pod joins ``active``."""
    known = queue.pending.get(pod.uid)
    if known is not None:
        known.pod = pod
        known.shape = shape(pod)
        return
    if pod.uid in queue.assumed:
        return
    queue.pending[pod.uid] = PendingPod(pod=pod, sequence=position.offset, shape=shape(pod))
    activate(queue, pod.uid)


def pod_deleted(queue: QueueState, uid: str) -> bool:
    """The pod is gone. True when it was a preemption victim (its node may be released).

    An assumed pod deleted before its binding was seen is no longer assumed; its command stays
    in flight: its binding fails for want of the pod, and that result restores any victims."""
    queue.assumed.pop(uid, None)
    forget_pod(queue, uid)
    queue.bound.discard(uid)
    return queue.evicting.pop(uid, None) is not None


def on_result(queue: QueueState, engine: Engine, result: CommandResult) -> tuple[bool, set[str]]:
    """A command's result. A failed placement releases its pods (queued again, with the reason)
    and restores its victims (they hold their place until the cluster says they are gone).
    Returns whether capacity was released, and the victims restored."""
    uids = queue.in_flight.pop(result.command_id, None)
    if result.command_type == _SCALE_POOL or uids is None or result.status == "applied":
        return False, set()
    restored = [victim for victim, command in queue.evicting.values() if command == result.command_id]
    for victim in restored:
        del queue.evicting[victim.uid]
        engine.upsert_bound_pod(victim)
    released = False
    for uid in uids:
        if queue.assumed.get(uid) == result.command_id:
            del queue.assumed[uid]
            engine.remove_pod(uid)
            released = True
        entry = queue.pending.get(uid)
        if entry is not None and entry.in_flight == result.command_id:
            entry.in_flight = None
            entry.last_message = f"binding failed: {result.reason}"
            activate(queue, uid)
    return released, {victim.uid for victim in restored}
