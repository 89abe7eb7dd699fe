"""Spot drains: a cell's answer to a spot interruption notice, every step its own audited decision.

1. ``cordoned``: CordonNode (the node takes no new pods);
2. per pool with replicas on the node: the interruption is counted (``spot-suspended`` when the
   pool's threshold is crossed), then ``scaled``: ScalePool(current + k), a *surge* of k
   replacements, k = how many of the node's replicas can be placed elsewhere now (on-demand
   first; spot within maxSpotPercent unless suspended, or never with ``spotStrategy.onInterruption:
   migrate-to-on-demand``). With k = 0 — or ``onInterruption: none`` — the decision is ``held``:
   the replicas serve until the reclaim;
3. other pods on the node (not DaemonSet pods): ``evicting`` at once — nothing replaces them
   ahead of time, so their controllers get the most time to recreate them elsewhere;
4. each replacement replica bound while a move is open: ``evicting`` one old replica, together
   with ScalePool(current − 1) giving that surge replica back (whichever the cluster applies
   first, the pool converges to its count with no replica on the node). An old replica that
   disappears without our eviction (the reclaim) also gives its surge replica back.

Pool replicas are replaceable because their pool recreates them, which is why they get a surge;
for other pods eviction is all a scheduler can do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth.schemas import CordonNode, EvictPod, InputPosition, PodInfo, SpotInterruptionNotice

from .context import CellContext
from .nodes import show
from .pool_scaling import (
    PoolState,
    as_pending,
    capacity_order,
    count_interruption,
    current_replicas,
    member_gone,
    outstanding,
    plan,
    scale,
    scale_command,
    track_member,
)
from .records import CellDecision, digest
from .spot import PoolMove

__all__ = ["DrainState", "advance_moves", "eviction", "on_spot", "pod_gone", "track_bound"]


@dataclass
class DrainState:
    node_pods: dict[str, dict[str, PodInfo]] = field(default_factory=dict)
    """node → pods bound to it, by UID (what a drain must move)."""
    pod_node: dict[str, str] = field(default_factory=dict)
    moves: dict[str, PoolMove] = field(default_factory=dict)
    """pool → its replicas' move off a reclaimed node, while one is open."""


def track_bound(state: DrainState, pools: PoolState, pod: PodInfo) -> None:
    """A pod observed bound: where it runs, and whether it is a replacement of an open move."""
    previous = state.pod_node.get(pod.uid)
    if previous is not None and previous != pod.node_name:
        state.node_pods.get(previous, {}).pop(pod.uid, None)
    state.pod_node[pod.uid] = pod.node_name or ""
    state.node_pods.setdefault(pod.node_name or "", {})[pod.uid] = pod
    key, new = track_member(pools, pod)
    if key is None:
        return
    move = state.moves.get(key)
    if new and move is not None and pod.uid not in move.olds and pod.node_name != move.node:
        move.replacements += 1


def on_spot(
    state: DrainState,
    pools: PoolState,
    ctx: CellContext,
    notice: SpotInterruptionNotice,
    position: InputPosition,
    now: datetime,
) -> list[CellDecision]:
    book = ctx.nodes
    node = book.nodes.get(notice.node)
    if node is None or notice.node in book.cordoned:
        return []
    book.cordoned.add(notice.node)
    show(book, ctx.engine, notice.node)
    message = (
        f"spot interruption notice: node reclaimed at {notice.deadline:%H:%M:%S} "
        f"({notice.notice_seconds:.0f}s notice); cordoned"
    )
    record = ctx.recorder.record(position, notice.node, "cordoned", now, node=notice.node, message=message)
    command = CordonNode(
        command_id=digest(record.decision_id, 0),
        decision_id=record.decision_id,
        cell=ctx.cell,
        issued_at=now,
        node=notice.node,
        reason=message,
    )
    decisions = [CellDecision(record, (command,))]
    by_pool: dict[str, list[PodInfo]] = {}
    others: list[PodInfo] = []
    for uid in sorted(state.node_pods.get(notice.node, {})):
        pod = state.node_pods[notice.node][uid]
        key = pools.pod_pool.get(uid)
        if key is not None and key in pools.pools:
            by_pool.setdefault(key, []).append(pod)
        elif pod.owner is None or pod.owner.kind != "DaemonSet":
            others.append(pod)
    for key in sorted(by_pool):
        decisions.extend(count_interruption(pools, ctx, key, notice.issued_at, position, now))
        decisions.extend(_surge(state, pools, ctx, key, by_pool[key], notice, position, now))
    for pod in others:
        decisions.append(
            eviction(
                ctx, pod, f"spot node {notice.node} reclaimed at {notice.deadline:%H:%M:%S}: drained", position, now
            )
        )
    return decisions


def _surge(
    state: DrainState,
    pools: PoolState,
    ctx: CellContext,
    key: str,
    pods: list[PodInfo],
    notice: SpotInterruptionNotice,
    position: InputPosition,
    now: datetime,
) -> list[CellDecision]:
    """Ask for replacements of ``pods`` (the pool's replicas on the reclaimed node) — as many
    as can be placed elsewhere now."""
    policy = pools.pools[key]
    names = ", ".join(p.key for p in pods)
    if policy.cost is not None and policy.cost.on_interruption == "none":
        message = (
            f"spot node {notice.node} reclaimed at {notice.deadline:%H:%M:%S}: onInterruption none: "
            f"{names} serve until the reclaim and the pool recreates them after"
        )
        return [CellDecision(ctx.recorder.record(position, key, "held", now, message=message))]
    current = current_replicas(pools, ctx, key, policy)
    template = as_pending(pods[0])
    found = plan(
        ctx,
        template,
        policy,
        len(pods),
        capacity_order(pools, ctx, key, policy, moving=True),
        prior=outstanding(pools, ctx, key, template, current),
        state=pools,
        key=key,
    )
    if not found:
        message = (
            f"spot node {notice.node} reclaimed at {notice.deadline:%H:%M:%S}: no room elsewhere for "
            f"{names}; they serve until the reclaim and the pool recreates them after"
        )
        return [CellDecision(ctx.recorder.record(position, key, "held", now, message=message))]
    state.moves[key] = PoolMove(
        node=notice.node, deadline=notice.deadline, olds=[p.uid for p in pods], surge_left=len(found)
    )
    where = ", ".join(sorted({f"{r.node} ({'spot' if r.spot else 'on-demand'})" for r in found}))
    reason = (
        f"spot node {notice.node} reclaimed at {notice.deadline:%H:%M:%S}: surge {len(found)} "
        f"replacement(s) for {names} before the deadline (room on {where}); the old replicas "
        f"are evicted as replacements are bound"
    )
    return [scale(pools, ctx, key, current, current + len(found), reason, position, now, scaled_at=notice.issued_at)]


def advance_moves(
    state: DrainState, pools: PoolState, ctx: CellContext, position: InputPosition, now: datetime
) -> list[CellDecision]:
    """One old replica evicted (and one surge replica given back) per replacement bound."""
    decisions: list[CellDecision] = []
    for key in sorted(state.moves):
        move = state.moves[key]
        while move.replacements > 0:
            uid = move.next_to_evict()
            if uid is None:
                move.replacements = 0
                break
            move.replacements -= 1
            move.evicted.add(uid)
            pod = state.node_pods.get(move.node, {}).get(uid)
            if pod is None:
                continue
            reason = (
                f"replacement replica of {key} bound: evicting {pod.key} from spot node {move.node} "
                f"before its reclaim at {move.deadline:%H:%M:%S}"
            )
            extra: tuple[Any, ...] = ()
            if move.surge_left > 0:
                move.surge_left -= 1
                current = current_replicas(pools, ctx, key, pools.pools.get(key))
                extra = (scale_command(ctx.cell, key, current, current - 1, "surge replica given back", now),)
                pools.replicas[key] = current - 1
            decisions.append(eviction(ctx, pod, reason, position, now, extra=extra))
        if move.done:
            del state.moves[key]
    return decisions


def pod_gone(
    state: DrainState, pools: PoolState, ctx: CellContext, uid: str, position: InputPosition, now: datetime
) -> list[CellDecision]:
    """A pod deleted: forget where it ran; an old replica of an open move that left without our
    eviction (the reclaim) gives its surge replica back."""
    node = state.pod_node.pop(uid, None)
    if node is not None:
        state.node_pods.get(node, {}).pop(uid, None)
    key = member_gone(pools, uid)
    if key is None:
        return []
    move = state.moves.get(key)
    if move is None or uid not in move.olds:
        return []
    move.olds.remove(uid)
    decisions: list[CellDecision] = []
    if uid not in move.evicted and move.surge_left > 0:
        move.surge_left -= 1
        current = current_replicas(pools, ctx, key, pools.pools.get(key))
        decisions.append(
            scale(
                pools,
                ctx,
                key,
                current,
                current - 1,
                f"old replica left spot node {move.node} (reclaimed): surge replica given back",
                position,
                now,
                part=f"give-back/{uid}",
            )
        )
    if move.done:
        del state.moves[key]
    return decisions


def eviction(
    ctx: CellContext,
    pod: PodInfo,
    reason: str,
    position: InputPosition,
    now: datetime,
    extra: tuple[Any, ...] = (),
    *,
    keep_with_local_storage: bool = False,
    keep_with_pvc: bool = False,
) -> CellDecision:
    """The ``evicting`` record of ``pod`` (bound to ``pod.node_name``) and its EvictPod command,
    with ``extra`` commands issued by the same decision (their ids re-derived from it). The
    ``keep_with_*`` conditions travel on the command for the binder to check (see EvictPod)."""
    record = ctx.recorder.record(position, pod.key, "evicting", now, node=pod.node_name, message=reason)
    command = EvictPod(
        command_id=digest(record.decision_id, "evict"),
        decision_id=record.decision_id,
        cell=ctx.cell,
        issued_at=now,
        pod_uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        node=pod.node_name,
        reason=reason,
        keep_with_local_storage=keep_with_local_storage,
        keep_with_pvc=keep_with_pvc,
    )
    fixed = tuple(
        c.model_copy(
            update={"decision_id": record.decision_id, "command_id": digest(record.decision_id, i, c.command_id)}
        )
        for i, c in enumerate(extra)
    )
    return CellDecision(record, (command, *fixed))
