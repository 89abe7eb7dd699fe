"""The scheduling round of a cell: after every input, the active pods are tried in queue order.

One pod at a time through the engine's one commit path; a gang's members together; a pool's
replica under its pool's policy; a routed pod that does not fit here while cells are left to
try is handed over. A placed pod stays pending, marked in flight, until the cluster confirms
the binding (bound echo), deletes it, or the command fails (then it is queued again).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from berth.core.engine import Outcome
from berth.schemas import InputPosition, PlacePods, PodPlacement
from berth.schemas.cells import agent_pool_of

from .context import CellContext
from .foreign_nodes import counting_foreign_nodes
from .gangs import GangAttempt, GangState, try_gang
from .handovers import HandOverState, counting_cells_tried, hand_over, may_hand_over
from .nodes import reserve, show
from .pool_scaling import PoolState, place_replica
from .queue import PendingPod, drop_from_active, forget_pod
from .records import CellDecision, digest

__all__ = ["conclude", "schedule_round"]


def schedule_round(
    ctx: CellContext,
    handovers: HandOverState,
    gangs: GangState,
    pools: PoolState,
    moving: Collection[str],
    position: InputPosition,
    now: datetime,
) -> list[CellDecision]:
    """Try every active pod once, in queue order, and record what happened to each."""
    queue = ctx.queue
    decisions: list[CellDecision] = []
    held_groups: set[tuple[str, str]] = set()
    failed_shapes: dict[tuple[str, bool], tuple[str, Outcome]] = {}
    """shape → (snapshot, outcome) of a failure in this round: a failure changes nothing, so
    the next pod of that shape on the same snapshot fails the same way without asking."""
    while queue.active:
        _, uid = queue.active.pop(0)
        entry = queue.pending.get(uid)
        if entry is None or entry.in_flight is not None:
            continue
        pod = entry.pod
        if pod.pod_group:
            group = (pod.namespace, pod.pod_group)
            if group not in held_groups:
                decision = _gang(ctx, gangs, group, position, now)
                if decision is None:
                    held_groups.add(group)
                else:
                    decisions.append(decision)
            continue
        snapshot = ctx.engine.snapshot_hash()
        passes_on = may_hand_over(entry)
        shape = (entry.shape, passes_on)
        known_failure = failed_shapes.get(shape)
        if known_failure is not None and known_failure[0] == snapshot:
            outcome = known_failure[1]
        else:
            outcome = _place(ctx, pools, entry, passes_on, moving)
            if not outcome.placed:
                failed_shapes[shape] = (snapshot, outcome)
        if passes_on and not outcome.placed:
            decisions.append(hand_over(handovers, queue, ctx.recorder, entry, outcome, position, now, snapshot))
            continue
        decision = conclude(ctx, [entry], outcome, position, now, subject=pod.key, snapshot=snapshot)
        if decision is not None:
            decisions.append(decision)
    return decisions


def _place(ctx: CellContext, pools: PoolState, entry: PendingPod, passes_on: bool, moving: Collection[str]) -> Outcome:
    pod = entry.pod
    pool = agent_pool_of(pod) if pools.pools else None
    if pool is not None and pool in pools.pools:
        return place_replica(pools, ctx, pod, pool, moving=pool in moving)
    return ctx.engine.schedule(pod, preempt=not passes_on)


def _gang(
    ctx: CellContext, gangs: GangState, group: tuple[str, str], position: InputPosition, now: datetime
) -> CellDecision | None:
    attempt = try_gang(gangs, ctx.queue, ctx.engine, ctx.recorder, group, position, now)
    if not isinstance(attempt, GangAttempt):
        return attempt
    return conclude(
        ctx,
        attempt.members,
        attempt.outcome,
        position,
        now,
        subject=attempt.subject,
        pod_group=attempt.name,
        snapshot=attempt.snapshot,
    )


def conclude(
    ctx: CellContext,
    entries: list[PendingPod],
    outcome: Outcome,
    position: InputPosition,
    now: datetime,
    *,
    subject: str,
    snapshot: str,
    pod_group: str | None = None,
) -> CellDecision | None:
    """Record the engine's outcome for ``entries`` (one pod, or a gang's members)."""
    if not outcome.placed:
        return _unschedulable(ctx, entries, outcome, position, now, subject, snapshot, pod_group)
    first = outcome.placements[0]
    record = ctx.recorder.record(
        position,
        subject,
        "placed",
        now,
        node=first.node,
        gpu_devices=first.gpu_devices,
        verdicts=outcome.verdicts,
        snapshot=snapshot,
        message=("preempting " + ", ".join(v.key for v in outcome.victims)) if outcome.victims else "",
        pods=[p.pod.key for p in outcome.placements] if pod_group is not None else (),
    )
    # Victims travel inside the placement: the binder evicts them first, in order, which
    # separate EvictPod commands (other partitions) could not guarantee.
    command_id = digest(record.decision_id, "place")
    commands: list[Any] = [
        PlacePods(
            command_id=command_id,
            decision_id=record.decision_id,
            cell=ctx.cell,
            issued_at=now,
            pod_group=pod_group,
            victims=tuple(v.key for v in outcome.victims),
            victim_uids=tuple(v.uid for v in outcome.victims),
            placements=tuple(
                PodPlacement(
                    pod_uid=p.pod.uid,
                    namespace=p.pod.namespace,
                    name=p.pod.name,
                    node=p.node,
                    gpu_devices=p.gpu_devices,
                    gpu_milli=p.gpu_milli,
                )
                for p in outcome.placements
            ),
        )
    ]
    _mark_in_flight(ctx, outcome, command_id)
    _left_out(ctx, entries, outcome)
    return CellDecision(record, tuple(commands))


def _unschedulable(
    ctx: CellContext,
    entries: list[PendingPod],
    outcome: Outcome,
    position: InputPosition,
    now: datetime,
    subject: str,
    snapshot: str,
    pod_group: str | None,
) -> CellDecision | None:
    queue = ctx.queue
    outcome = counting_cells_tried(entries[0], outcome)
    outcome = counting_foreign_nodes(ctx.foreign, ctx.engine, entries[0], outcome)
    for entry in entries:
        entry.attempts += 1
        queue.unschedulable.add(entry.pod.uid)
    if entries[0].last_message == outcome.message:
        return None  # unchanged: don't repeat the same verdict on every retry
    for entry in entries:
        entry.last_message = outcome.message
    members = [entry.pod.key for entry in entries] if pod_group is not None else []
    return CellDecision(
        ctx.recorder.record(
            position,
            subject,
            "unschedulable",
            now,
            snapshot=snapshot,
            message=outcome.message,
            verdicts=outcome.verdicts,
            pods=members,
        )
    )


def _left_out(ctx: CellContext, entries: list[PendingPod], outcome: Outcome) -> None:
    """Members of a gang placed without them (``minMember`` reached, they did not fit) wait as
    unschedulable pods do, so that a change of the cluster tries them again; the gang's round
    took them out of the active queue."""
    placed = {p.pod.uid for p in outcome.placements}
    for entry in entries:
        if entry.pod.uid not in placed and entry.in_flight is None:
            entry.attempts += 1
            ctx.queue.unschedulable.add(entry.pod.uid)


def _mark_in_flight(ctx: CellContext, outcome: Outcome, command_id: str) -> None:
    """The placed pods wait for their binding; victims' room is kept for the preemptor."""
    queue = ctx.queue
    queue.in_flight[command_id] = tuple(p.pod.uid for p in outcome.placements)
    for placement in outcome.placements:
        queue.assumed[placement.pod.uid] = command_id
        queue.unschedulable.discard(placement.pod.uid)
        entry = queue.pending.get(placement.pod.uid)
        if entry is not None:
            drop_from_active(queue, entry)
            entry.in_flight = command_id
    for victim in outcome.victims:
        forget_pod(queue, victim.uid)
        queue.evicting[victim.uid] = (victim, command_id)
        if victim.node_name:
            reserve(ctx.nodes, victim.node_name, victim.uid)
    for name in sorted({v.node_name for v in outcome.victims if v.node_name}):
        show(ctx.nodes, ctx.engine, name)
