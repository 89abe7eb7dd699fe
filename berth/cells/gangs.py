"""Gangs in a cell: a PodGroup's pending members wait until ``minMember`` of them are pending or
running, then go to the engine as one (:meth:`berth.core.engine.Engine.schedule_gang`).

Members the cluster reports bound count towards ``minMember``, as in kube's coscheduling
plugin. A group the cell has not seen (no PodGroup object) holds its members with kube's
"not found" wording.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from berth.core.engine import Engine, Outcome
from berth.schemas import InputPosition, PodInfo, PolicyObserved

from .queue import PendingPod, QueueState, drop_from_active, queue_key
from .records import CellDecision, Recorder

__all__ = [
    "GangAttempt",
    "GangState",
    "member_bound",
    "member_deleted",
    "pod_group_observed",
    "pod_group_removed",
    "try_gang",
]

Group = tuple[str, str]
"""(namespace, PodGroup name)."""


@dataclass
class GangState:
    min_member: dict[Group, int] = field(default_factory=dict)
    bound: dict[Group, set[str]] = field(default_factory=dict)
    """gang → members bound in the cluster."""


@dataclass(frozen=True)
class GangAttempt:
    """A gang the engine was asked to place: the scheduling round records the outcome."""

    members: list[PendingPod]
    outcome: Outcome
    subject: str
    name: str
    snapshot: str


def pod_group_observed(state: GangState, event: PolicyObserved) -> None:
    if event.kind == "PodGroup" and event.pod_group is not None:
        group = event.pod_group
        state.min_member[(group.namespace, group.name)] = group.min_member


def pod_group_removed(state: GangState, kind: str, namespace: str, name: str) -> None:
    if kind == "PodGroup":
        state.min_member.pop((namespace, name), None)


def member_bound(state: GangState, pod: PodInfo) -> None:
    if pod.pod_group:
        state.bound.setdefault((pod.namespace, pod.pod_group), set()).add(pod.uid)


def member_deleted(state: GangState, uid: str) -> None:
    for members in state.bound.values():
        members.discard(uid)


def try_gang(
    state: GangState,
    queue: QueueState,
    engine: Engine,
    recorder: Recorder,
    group: Group,
    position: InputPosition,
    now: datetime,
) -> CellDecision | GangAttempt | None:
    """Hold the gang (a ``held`` record when its message changed, else None) or place it."""
    namespace, name = group
    members = sorted(
        (
            e
            for e in queue.pending.values()
            if e.pod.pod_group == name and e.pod.namespace == namespace and e.in_flight is None
        ),
        key=queue_key,
    )
    subject = f"{namespace}/{name}"
    min_member = state.min_member.get(group)
    # Members placed and waiting for their binding count as kube's coscheduling counts assumed
    # pods: they hold their nodes already.
    placed = sum(
        1
        for e in queue.pending.values()
        if e.pod.pod_group == name and e.pod.namespace == namespace and e.in_flight is not None
    )
    bound = len(state.bound.get(group, ())) + placed
    if min_member is None or len(members) + bound < min_member:
        return _hold(queue, recorder, members, subject, min_member, bound, position, now)
    for entry in members:
        drop_from_active(queue, entry)
    snapshot = engine.snapshot_hash()
    outcome = engine.schedule_gang([entry.pod for entry in members], max(1, min_member - bound))
    return GangAttempt(members, outcome, subject, name, snapshot)


def _hold(
    queue: QueueState,
    recorder: Recorder,
    members: list[PendingPod],
    subject: str,
    min_member: int | None,
    bound: int,
    position: InputPosition,
    now: datetime,
) -> CellDecision | None:
    message = (
        f'pod group "{subject}" not found'
        if min_member is None
        else f"waiting for gang {subject}: {len(members) + bound}/{min_member} members pending or running"
    )
    for entry in members:
        queue.unschedulable.add(entry.pod.uid)
        drop_from_active(queue, entry)
    lead = members[0] if members else None
    if lead is None or lead.last_message == message:
        return None
    for entry in members:
        entry.last_message = message
    return CellDecision(
        recorder.record(position, subject, "held", now, message=message, pods=[entry.pod.key for entry in members])
    )
