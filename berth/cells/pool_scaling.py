"""Inference pools in a cell: policies, replica counts, and scaling on queue lag.

A pool's policy is the pools file's entry, overridden key by key by the cluster's AgentPool. A
lag state is scaled by :func:`berth.cells.scaling.decide_scale`, which asks the engine where new
replicas would go (:meth:`~berth.core.engine.Engine.probe`: nothing committed) before asking the
cluster for them. A pool's pending replicas are placed under its policy
(:mod:`berth.cells.pool_placement`: capacity class, preferred regions, cost/carbon terms).

The state also keeps, per pool, the replicas the cluster reported bound here and its spot
interruptions (:class:`~berth.cells.spot.SpotHistory`), which its capacity classes depend on.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from berth.core.engine import Outcome
from berth.kube.replicas import AgentPool, ReplicaError, replica_pod
from berth.schemas import AgentPoolSpec, InputPosition, PodInfo, PolicyObserved, PoolLagState, ScalePool
from berth.schemas.agentpool import AgentPoolSpecError
from berth.schemas.cells import agent_pool_of

from .context import CellContext
from .pool_placement import (
    cached_nodes,
    cached_short,
    constrained,
    instance_type_order,
    max_nodes_to_score,
    of_instance_type,
    on_nodes,
    preferred_regions,
    probed,
    replica_cost_per_hour,
    score_terms,
    spot_instance_types,
    spot_types_taken,
    with_preferences,
)
from .pools import PoolPolicy, merge_cluster_spec
from .records import CellDecision, digest
from .scaling import (
    CapacityClass,
    ProbedReplica,
    ScaleVerdict,
    ScalingInput,
    ScalingMemory,
    decide_scale,
    remember,
)
from .spot import SpotHistory

__all__ = [
    "PoolState",
    "as_pending",
    "capacity_order",
    "count_interruption",
    "current_replicas",
    "drop_agent_pool",
    "member_gone",
    "on_agent_pool",
    "on_lag",
    "outstanding",
    "place_replica",
    "plan",
    "replica_template",
    "scale",
    "scale_command",
    "spot_suspended",
    "track_member",
]


@dataclass
class PoolState:
    pools: dict[str, PoolPolicy]
    """What applies: AgentPools from the cluster over the pools file."""
    file_pools: dict[str, PoolPolicy]
    replicas: dict[str, int] = field(default_factory=dict)
    """pool → the replica count last asked for (or seen)."""
    scaled_at: dict[str, datetime] = field(default_factory=dict)
    memory: dict[str, ScalingMemory] = field(default_factory=dict)
    """pool → the scaling policy's fold of its lag states (demand, stabilization window)."""
    members: dict[str, dict[str, PodInfo]] = field(default_factory=dict)
    """pool → its replicas the cluster reported bound here, by UID."""
    pod_pool: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    """pool → the last held/invalid message recorded, so an unchanged one is not repeated."""
    spot: dict[str, SpotHistory] = field(default_factory=dict)

    @classmethod
    def of(cls, pools: Mapping[str, PoolPolicy]) -> PoolState:
        return cls(pools=dict(pools), file_pools=dict(pools))


def as_pending(pod: PodInfo) -> PodInfo:
    """A replica as its pool creates it: not bound, no devices, pending."""
    return pod.model_copy(update={"node_name": None, "gpu_devices": (), "phase": "Pending"})


# -- members ---------------------------------------------------------------------------------


def track_member(state: PoolState, pod: PodInfo) -> tuple[str | None, bool]:
    """A bound pod: if it is a pool's replica, remember it. Returns (pool, whether it is new)."""
    key = agent_pool_of(pod)
    if key is None:
        return None, False
    members = state.members.setdefault(key, {})
    new = pod.uid not in members
    members[pod.uid] = pod
    state.pod_pool[pod.uid] = key
    return key, new


def member_gone(state: PoolState, uid: str) -> str | None:
    """A pod deleted: forget it as a replica; returns its pool, if it was one."""
    key = state.pod_pool.pop(uid, None)
    if key is not None:
        state.members.get(key, {}).pop(uid, None)
    return key


# -- policies --------------------------------------------------------------------------------


def on_agent_pool(
    state: PoolState,
    ctx: CellContext,
    event: PolicyObserved,
    position: InputPosition,
    now: datetime,
    moving: Collection[str],
) -> list[CellDecision]:
    info = event.agent_pool
    if info is None:
        return []
    key = f"{info.namespace}/{info.name}"
    file_policy = state.file_pools.get(key)
    try:
        spec = AgentPoolSpec.model_validate(info.spec)
        if not spec.scalable and file_policy is None:
            state.pools.pop(key, None)
            return []  # a pool Berth places but does not scale
        state.pools[key] = merge_cluster_spec(file_policy, info.spec)
    except (AgentPoolSpecError, ValueError) as exc:
        message = f"AgentPool {key} ignored: {exc}" + (
            "; the pools file's policy stays" if file_policy is not None else ""
        )
        if state.messages.get(key) == message:
            return []
        state.messages[key] = message
        return [CellDecision(ctx.recorder.record(position, key, "held", now, message=message, part="policy"))]
    if spec.replicas is not None and key not in moving:
        state.replicas[key] = spec.replicas  # the cluster's count, e.g. after kubectl scale
    return []


def drop_agent_pool(state: PoolState, key: str) -> None:
    if key in state.file_pools:
        state.pools[key] = state.file_pools[key]
    else:
        state.pools.pop(key, None)


def _pending_replicas(ctx: CellContext, key: str) -> list[PodInfo]:
    return [e.pod for e in ctx.queue.pending.values() if agent_pool_of(e.pod) == key]


def current_replicas(
    state: PoolState, ctx: CellContext, key: str, policy: PoolPolicy | None, lag: PoolLagState | None = None
) -> int:
    current = state.replicas.get(key)
    if current is not None:
        return current
    if lag is not None and lag.ready_replicas is not None:
        return lag.ready_replicas
    known = len(state.members.get(key, ())) + len(_pending_replicas(ctx, key))
    if known:
        return known
    return policy.initial_replicas if policy is not None else 0


# -- spot history ----------------------------------------------------------------------------


def _threshold(state: PoolState, key: str) -> Any:
    policy = state.pools.get(key)
    cost = policy.cost if policy is not None else None
    return cost.interruption_limit if cost is not None else None


def spot_suspended(state: PoolState, key: str) -> bool:
    history = state.spot.get(key)
    return history is not None and history.suspended


def count_interruption(
    state: PoolState, ctx: CellContext, key: str, at: datetime, position: InputPosition, now: datetime
) -> list[CellDecision]:
    """Count a spot interruption of one of the pool's nodes; record ``spot-suspended`` when it
    crosses the pool's threshold."""
    threshold = _threshold(state, key)
    history = state.spot.setdefault(key, SpotHistory())
    if not history.record(at, threshold):
        return []
    assert threshold is not None
    message = (
        f"{len(history.times)} spot interruptions within {threshold.window_seconds:.0f}s "
        f"(threshold {threshold.count}): the pool's replicas go to on-demand nodes until "
        f"{threshold.window_seconds:.0f}s pass without one"
    )
    return [CellDecision(ctx.recorder.record(position, key, "spot-suspended", now, message=message, part="spot"))]


def _maybe_resume_spot(
    state: PoolState, ctx: CellContext, key: str, now: datetime, position: InputPosition
) -> list[CellDecision]:
    history = state.spot.get(key)
    threshold = _threshold(state, key)
    if history is None or not history.quiet_since(now, threshold):
        return []
    window = threshold.window_seconds if threshold is not None else 0
    message = f"no spot interruption for {window:.0f}s: the pool may use spot nodes again"
    return [CellDecision(ctx.recorder.record(position, key, "spot-resumed", now, message=message, part="spot"))]


# -- scaling ---------------------------------------------------------------------------------


def on_lag(
    state: PoolState,
    ctx: CellContext,
    lag: PoolLagState,
    position: InputPosition,
    now: datetime,
    moving: Collection[str],
) -> list[CellDecision]:
    """A pool's lag state: scale the pool if its policy says so (and the room is there)."""
    key = f"{lag.namespace}/{lag.pool}"
    policy = state.pools.get(key)
    if policy is None:
        return []
    memory = state.memory[key] = remember(state.memory.get(key), lag, policy)
    decisions = _maybe_resume_spot(state, ctx, key, lag.updated_at, position)
    current = current_replicas(state, ctx, key, policy, lag)
    state.replicas[key] = current
    template = replica_template(state, ctx, key, policy)
    nodes = ctx.nodes.nodes
    members = [m for m in state.members.get(key, {}).values() if m.node_name in nodes]
    costs = [replica_cost_per_hour(m, nodes[m.node_name]) for m in members]  # type: ignore[index]  # node_name: in nodes
    planned = outstanding(state, ctx, key, template, current)
    verdict = decide_scale(
        ScalingInput(
            policy=policy,
            lag=lag,
            current=current,
            last_scaled_at=state.scaled_at.get(key),
            memory=memory,
            spot_suspended=spot_suspended(state, key),
            spot_replicas=len([m for m in members if nodes[m.node_name].capacity_type == "spot"]),  # type: ignore[index]  # as above
            pool_cost_per_hour=sum(c for c in costs if c is not None) if members else None,
            priced_replicas=sum(1 for c in costs if c is not None),
            carbon_intensity=_cleanest_intensity(ctx),
            probe=_probe(ctx, template, policy, planned, members) if template is not None else None,
        )
    )
    if verdict is None:
        return decisions
    if template is not None:
        planned = [*outstanding(state, ctx, key, template, current), *([template] * (verdict.replicas - current))]
    decisions.extend(_conclude_scale(state, ctx, key, current, verdict, position, now, lag.updated_at, planned, moving))
    return decisions


def _conclude_scale(
    state: PoolState,
    ctx: CellContext,
    key: str,
    current: int,
    verdict: ScaleVerdict,
    position: InputPosition,
    now: datetime,
    at: datetime,
    planned: list[PodInfo],
    moving: Collection[str],
) -> list[CellDecision]:
    decisions: list[CellDecision] = []
    if verdict.outcome == "held":
        if state.messages.get(key) != verdict.reason:
            state.messages[key] = verdict.reason
            decisions.append(CellDecision(ctx.recorder.record(position, key, "held", now, message=verdict.reason)))
    else:
        state.messages.pop(key, None)
        decisions.append(scale(state, ctx, key, current, verdict.replicas, verdict.reason, position, now, scaled_at=at))
    if verdict.fallback is not None:
        decisions.extend(_fall_back(state, ctx, key, verdict, position, now, at, planned, moving))
    return decisions


def _fall_back(
    state: PoolState,
    ctx: CellContext,
    key: str,
    verdict: ScaleVerdict,
    position: InputPosition,
    now: datetime,
    at: datetime,
    planned: list[PodInfo],
    moving: Collection[str],
) -> list[CellDecision]:
    """Scale the pool serving the fallback model (same namespace; by ``spec.model``, else by
    name) by the replicas' worth of tokens the pool could not get, in the room left after
    the pool's own ``planned`` replicas."""
    fallback = verdict.fallback
    assert fallback is not None
    namespace = key.split("/", 1)[0]
    candidates = sorted(
        k
        for k, p in state.pools.items()
        if k != key
        and k.startswith(namespace + "/")
        and (p.model == fallback.model or k == f"{namespace}/{fallback.model}")
    )
    if not candidates:
        return []
    target = candidates[0]
    policy = state.pools[target]
    current = current_replicas(state, ctx, target, policy)
    wanted = min(
        policy.max_replicas, current + math.ceil(fallback.tokens_per_second / policy.tokens_per_second_per_replica)
    )
    template = replica_template(state, ctx, target, policy)
    if wanted <= current:
        return []
    if template is not None:
        order = capacity_order(state, ctx, target, policy, moving=target in moving)
        wanted = current + len(
            plan(ctx, template, policy, wanted - current, order, prior=list(planned), state=state, key=target)
        )
    if wanted <= current:
        return []
    reason = (
        f"fallback for {key} ({fallback.replicas} replica(s) short): model {fallback.model} "
        f"takes {fallback.tokens_per_second:.0f} tokens/s"
    )
    return [scale(state, ctx, target, current, wanted, reason, position, now, scaled_at=at, part="fallback")]


def scale(
    state: PoolState,
    ctx: CellContext,
    key: str,
    current: int,
    replicas: int,
    reason: str,
    position: InputPosition,
    now: datetime,
    *,
    scaled_at: datetime | None = None,
    part: str | None = None,
) -> CellDecision:
    """A ``scaled`` record and its ScalePool command; the pool's count is ``replicas`` from now."""
    state.replicas[key] = replicas
    if scaled_at is not None:
        state.scaled_at[key] = scaled_at
    record = ctx.recorder.record(
        position, key, "scaled", now, message=f"{current} → {replicas} replicas: {reason}", part=part
    )
    command = scale_command(ctx.cell, key, current, replicas, reason, now).model_copy(
        update={"decision_id": record.decision_id, "command_id": digest(record.decision_id, 0)}
    )
    return CellDecision(record, (command,))


def scale_command(cell: int, key: str, current: int, replicas: int, reason: str, now: datetime) -> ScalePool:
    """The command alone; its ids are placeholders the decision that carries it replaces."""
    namespace, name = key.split("/", 1)
    return ScalePool(
        command_id="-",
        decision_id="-",
        cell=cell,
        issued_at=now,
        pool=name,
        namespace=namespace,
        replicas=max(replicas, 0),
        previous_replicas=max(current, 0),
        reason=reason,
    )


def outstanding(state: PoolState, ctx: CellContext, key: str, template: PodInfo | None, current: int) -> list[PodInfo]:
    """Replicas asked for that do not exist here yet (neither pending nor bound): room for
    them is spoken for, so probes place them first."""
    if template is None:
        return []
    known = len(state.members.get(key, ())) + len(_pending_replicas(ctx, key))
    return [template] * max(0, current - known)


def replica_template(state: PoolState, ctx: CellContext, key: str, policy: PoolPolicy) -> PodInfo | None:
    """A pending replica as the pool makes them: the newest one known here, else one built
    from the policy's template or GPU requirements; None when neither says what it is."""
    known = _pending_replicas(ctx, key) + list(state.members.get(key, {}).values())
    if known:
        newest = max(known, key=lambda p: (p.creation_time, p.name))
        return as_pending(newest)
    if policy.template is None and policy.gpu_requirements is None:
        return None
    namespace, name = key.split("/", 1)
    try:
        return replica_pod(
            AgentPool(namespace, name, policy.model_dump(mode="json", by_alias=True, exclude_none=True)), 0
        )
    except ReplicaError:
        return None


# -- where replicas go -----------------------------------------------------------------------


def plan(
    ctx: CellContext,
    template: PodInfo,
    policy: PoolPolicy,
    count: int,
    order: list[CapacityClass],
    prior: list[PodInfo] | None = None,
    *,
    state: PoolState | None = None,
    key: str = "",
) -> list[ProbedReplica]:
    """Where ``count`` replicas would go, class by class in ``order``, after ``prior``
    (``state`` and ``key``: the pool's replicas, which spread its spot instance types)."""
    nodes = ctx.nodes.nodes
    members = [m for m in state.members.get(key, {}).values() if m.node_name in nodes] if state else []
    probe = _probe(ctx, template, policy, prior, members)
    found: list[ProbedReplica] = []
    for capacity in order:
        found += probe(count - len(found), capacity)
        if len(found) >= count:
            break
    return found


def _probe(
    ctx: CellContext,
    template: PodInfo,
    policy: PoolPolicy,
    prior: list[PodInfo] | None = None,
    members: list[PodInfo] | None = None,
) -> Any:
    """A :class:`~berth.cells.scaling.CapacityProbe` for the pool. Successive calls build on
    each other (and on ``prior``, which they extend): the engine places the earlier finds
    first, so that two classes or two pools never count the same room twice. Spot replicas of a
    pool with ``spotStrategy.instanceTypes`` are probed one at a time, each on the type holding
    fewest of the pool's spot replicas (``members`` and the earlier finds)."""
    regions = preferred_regions(policy)
    found: list[PodInfo] = prior if prior is not None else []
    nodes = ctx.nodes.nodes
    types = spot_instance_types(policy)
    taken = spot_types_taken(members or (), nodes)

    def place(candidate: PodInfo, count: int) -> list[str]:
        names = list(ctx.engine.probe([*found, *([candidate] * count)])[len(found) :])
        found.extend([candidate] * len(names))
        return names

    def place_spread(candidate: PodInfo) -> str | None:
        """One spot replica on the listed type holding fewest of the pool's; None: no room."""
        for instance_type in instance_type_order(types, taken):
            names = place(of_instance_type(candidate, instance_type), 1)
            if names:
                taken[instance_type] = taken.get(instance_type, 0) + 1
                return names[0]
        return None

    def probe(count: int, capacity: CapacityClass) -> list[ProbedReplica]:
        if count <= 0:
            return []
        candidate = constrained(with_preferences(template, policy), capacity, regions, ctx.spot_labels)
        if capacity != "spot" or not types:
            return [probed(template, nodes[name]) for name in place(candidate, count) if name in nodes]
        out: list[ProbedReplica] = []
        while len(out) < count:
            name = place_spread(candidate)
            if name is None or name not in nodes:
                break
            out.append(probed(template, nodes[name]))
        return out

    return probe


def capacity_order(
    state: PoolState, ctx: CellContext, key: str, policy: PoolPolicy | None, *, moving: bool
) -> list[CapacityClass]:
    """The node classes a replica of the pool may use, in order of preference. While the pool
    moves off a reclaimed spot node its replacements try on-demand first (only on-demand with
    ``spotStrategy.onInterruption: migrate-to-on-demand``)."""
    cost = policy.cost if policy is not None else None
    if cost is None:
        return ["on-demand", "any"] if moving else ["any"]
    spot_ok = cost.spot_enabled and not spot_suspended(state, key)
    if spot_ok and moving:
        spot_ok = cost.on_interruption != "migrate-to-on-demand"
    if spot_ok:
        nodes = ctx.nodes.nodes
        members = [m for m in state.members.get(key, {}).values() if m.node_name in nodes]
        on_spot = len([m for m in members if nodes[m.node_name].capacity_type == "spot"])  # type: ignore[index]  # node_name: in nodes
        spot_ok = on_spot + 1 <= math.floor(cost.spot_percent_cap / 100 * (len(members) + 1))
    if not spot_ok:
        return ["on-demand"]
    return ["on-demand", "spot"] if moving else ["spot", "on-demand"]


def _cleanest_intensity(ctx: CellContext) -> float | None:
    book = ctx.nodes
    values = [
        n.carbon_intensity
        for name, n in sorted(book.nodes.items())
        if n.carbon_intensity is not None and not n.unschedulable and name not in book.cordoned
    ]
    return min(values) if values else None


def place_replica(state: PoolState, ctx: CellContext, pod: PodInfo, key: str, *, moving: bool) -> Outcome:
    """Place a pool's replica under its policy: while ``minCachedReplicas`` wants more replicas
    on nodes holding the model, first the candidates below on those nodes alone (never
    preempting); then capacity classes in order (spot by instance type, fewest of the pool's
    first), the pool's score terms (without preemption), then the plain cycle (which may
    preempt) in the last class. Every cycle samples at most the pool's
    ``fastScheduling.maxNodesToScore`` feasible nodes."""
    policy = state.pools.get(key)
    pod = with_preferences(pod, policy)
    order = capacity_order(state, ctx, key, policy, moving=moving)
    terms = score_terms(policy)
    limit = max_nodes_to_score(policy)
    candidates = _candidates(state, ctx, key, policy, pod, order)
    nodes = ctx.nodes.nodes
    members = [m for m in state.members.get(key, {}).values() if m.node_name in nodes]
    cached = cached_nodes(policy, nodes)
    if cached and cached_short(policy, members, cached):
        for candidate in candidates:
            outcome = ctx.engine.schedule(
                on_nodes(candidate, cached), preempt=False, extra_scores=terms, max_nodes_to_score=limit
            )
            if outcome.placed:
                return outcome
    outcome = Outcome()
    for candidate in candidates:
        outcome = ctx.engine.schedule(candidate, preempt=not terms, extra_scores=terms, max_nodes_to_score=limit)
        if outcome.placed:
            return outcome
    if terms:
        last = constrained(pod, order[-1], preferred_regions(policy), ctx.spot_labels)
        outcome = ctx.engine.schedule(last, max_nodes_to_score=limit)
    return outcome


def _candidates(
    state: PoolState, ctx: CellContext, key: str, policy: PoolPolicy | None, pod: PodInfo, order: list[CapacityClass]
) -> list[PodInfo]:
    """The replica as each capacity class (and spot instance type) in turn would place it."""
    regions = preferred_regions(policy)
    types = spot_instance_types(policy)
    nodes = ctx.nodes.nodes
    candidates: list[PodInfo] = []
    for capacity in order:
        candidate = constrained(pod, capacity, regions, ctx.spot_labels)
        if capacity == "spot" and types:
            members = [m for m in state.members.get(key, {}).values() if m.node_name in nodes]
            taken = spot_types_taken(members, nodes)
            candidates += [of_instance_type(candidate, t) for t in instance_type_order(types, taken)]
        else:
            candidates.append(candidate)
    return candidates
