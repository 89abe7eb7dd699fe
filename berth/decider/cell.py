"""One decision cell: inputs in, decisions and commands out, deterministically.

Contract of :meth:`CellDecider.handle`: given the same sequence of ``(event, position)`` calls
and the same engine configuration, it returns the same decisions, byte for byte. It reads no
clock (time is the events' own), draws no random numbers and iterates nothing unordered.

What the cell keeps beside the engine's snapshot:
- the pending queue: pods of this scheduler not yet bound, ordered by priority (high first),
  then arrival; pods that did not fit wait in the unschedulable set until the cluster changes
  (a node added or changed, a pod deleted, a placement failed, a policy changed);
- the assumed overlay: pods it placed whose binding the cluster has not confirmed yet. The engine
  holds them as assumed, so nothing is allocated twice before the inventory catches up; a failed
  or conflicting command releases them and the pods go back to the queue;
- hand-overs: a pod routed here with a :class:`~berth.schemas.PodRouted` may be placed in any
  cell. While its round has cells left to try, it is placed here only if it fits without
  preemption; otherwise the cell records ``handed-over`` and issues a :class:`HandOverPod`, and
  forgets the pod (ignoring its echoes) until the inventory routes it here again. The last cell
  of a round may preempt, and reports the pod unschedulable;
- gangs: members wait until ``minMember`` of their PodGroup are pending, then go as one;
- pools: each pool's policy (the pools file, overridden by the cluster's AgentPool), the replica
  count it last asked for and when (cooldowns), the scaling policy's memory folded from the
  pool's lag states (:func:`berth.decider.scaling.remember`: smoothed demand, stabilization
  window), the pool's replicas it knows (bound ones by node), its spot interruptions, and its
  moves off reclaimed spot nodes.

Inference pools (issue 6). A lag state is scaled by :func:`berth.decider.scaling.decide_scale`,
which asks the engine where new replicas would go (``probe_placements``: nothing committed)
before asking the cluster for them. A pool's pending replicas are placed under its policy
(:mod:`berth.decider.pool_placement`: capacity class, preferred regions, cost/carbon terms).

A spot interruption notice for a node, every step its own audited decision:
1. ``cordoned``: CordonNode (the node takes no new pods);
2. per pool with replicas on the node: the interruption is counted (``spot-suspended`` when the
   pool's threshold is crossed), then ``scaled``: ScalePool(current + k), a *surge* of k
   replacements, k = how many of the node's replicas can be placed elsewhere now (on-demand
   first; spot within maxSpotPercent unless suspended). With k = 0 the decision is ``held``: the
   replicas serve until the reclaim;
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

import bisect
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from hashlib import blake2b
from typing import Any

from berth.schemas import (
    AgentPoolSpec,
    CommandResult,
    CellTick,
    CordonNode,
    DecisionRecord,
    EvictPod,
    HandOverPod,
    InputPosition,
    NodeObserved,
    NodeRemoved,
    NodeVerdict,
    PlacePods,
    PodDeleted,
    PodInfo,
    PodObserved,
    PodPlacement,
    PodRouted,
    PolicyObserved,
    PolicyRemoved,
    PoolLagState,
    ScalePool,
    SpotInterruptionNotice,
)
from berth.core.messages import with_more_nodes
from berth.schemas.envelope import event_time

from berth.schemas.agentpool import AgentPoolSpecError
from berth.schemas.cells import agent_pool_of

from .pool_placement import (
    constrained,
    preferred_regions,
    probed,
    replica_cost_per_hour,
    score_terms,
    with_preferences,
)
from .pools import PoolPolicy, merge_cluster_spec
from .ports import EngineOutcome, PendingPod, PlacementEngine
from .scaling import CapacityClass, ProbedReplica, ScaleVerdict, ScalingInput, ScalingMemory, decide_scale, remember
from .spot import PoolMove, SpotHistory

SCHEDULER_NAME = "berth"
HANDOVER_RETRY_TICKS = 2
"""A pod no cell could place rests in the last cell of its round; once it has rested through this
many :class:`~berth.schemas.CellTick` s it is tried again and, failing, handed on for a new round,
since capacity may have been freed in cells it cannot see (kube-scheduler retries unschedulable
pods on a timer too, ``podMaxInUnschedulablePodsDuration``)."""


@dataclass(frozen=True)
class CellDecision:
    """A decision record and the commands it issues (possibly none)."""

    record: DecisionRecord
    commands: tuple[Any, ...] = ()


def _digest(*parts: object, size: int = 16) -> str:
    return blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=size).hexdigest()


_IDENTITY = {"uid", "name", "creation_time", "owner", "annotations"}


def _shape(pod: PodInfo) -> str:
    """What scheduling reads of a pod, without its identity (GPU annotations are parsed into
    fields already; labels stay: affinity and spreading match on them)."""
    return _digest(json.dumps(pod.model_dump(mode="json", exclude=_IDENTITY), sort_keys=True))


def _queue_key(entry: PendingPod) -> tuple[int, int, str]:
    return (-entry.pod.priority, entry.sequence, entry.pod.uid)


class CellDecider:
    """The pure state machine of one cell. Not thread-safe; one writer per cell by design."""

    def __init__(self, cell: int, engine: PlacementEngine,
                 pools: dict[str, PoolPolicy] | None = None,
                 scheduler_name: str = SCHEDULER_NAME) -> None:
        self.cell = cell
        self.cell_name = f"cell-{cell}"
        self.engine = engine
        # The pools travel with the engine's configuration (replay rebuilds both from one
        # announced document); an explicit argument is for engines that do not carry them.
        self.pools = dict(pools if pools is not None else getattr(engine, "pools", {}))
        self._file_pools = dict(self.pools)
        """The pools file's policies; ``pools`` is what applies (AgentPools from the cluster over these)."""
        self.scheduler_name = scheduler_name
        self._pending: dict[str, PendingPod] = {}
        self._active: list[tuple[tuple[int, int, str], str]] = []
        self._unschedulable: set[str] = set()
        self._assumed: dict[str, str] = {}
        """uid → id of the PlacePods command whose binding is not confirmed yet."""
        self._in_flight: dict[str, tuple[str, ...]] = {}
        """command id → pod UIDs it places."""
        self._evicting: dict[str, tuple[PodInfo, str]] = {}
        """victim uid → (the victim, the preempting command): its capacity is promised to the
        preemptor, so a late "still bound" echo of the victim must not bring it back."""
        self._reserving: dict[str, set[str]] = {}
        """node → victims still running there. The victims left the snapshot so that the
        preemptor could take their place; until they are really gone, what they hold beyond
        the preemptor's share must not go to anyone else, so the node takes no new pods."""
        self._bound: set[str] = set()
        """UIDs the cluster reported bound and not deleted since. A binding is final in
        Kubernetes, so an unbound observation of one of these is an older event delivered
        again (inputs are at-least-once) and must not queue the pod a second time."""
        self._handed_over: dict[str, int] = {}
        """uid → hop of pods this cell gave up and the inventory has not yet taken away: their
        echoes (updates routed here before the hand-over was acted on) must not queue them."""
        self._group_bound: dict[tuple[str, str], set[str]] = {}
        """gang → members bound in the cluster (they count towards minMember, as in kube)."""
        self._pod_groups: dict[tuple[str, str], int] = {}
        self._nodes: dict[str, Any] = {}
        self._cordoned: set[str] = set()
        self._pool_replicas: dict[str, int] = {}
        self._pool_scaled_at: dict[str, datetime] = {}
        self._pool_memory: dict[str, ScalingMemory] = {}
        """pool → the scaling policy's fold of its lag states (demand, stabilization window)."""
        self._pool_members: dict[str, dict[str, PodInfo]] = {}
        """pool → its replicas the cluster reported bound here, by UID."""
        self._pod_pool: dict[str, str] = {}
        self._node_pods: dict[str, dict[str, PodInfo]] = {}
        """node → pods bound to it, by UID (what a spot drain must move)."""
        self._pod_node: dict[str, str] = {}
        self._spot: dict[str, SpotHistory] = {}
        self._moves: dict[str, PoolMove] = {}
        self._pool_messages: dict[str, str] = {}
        """pool → the last held/invalid message recorded, so an unchanged one is not repeated."""
        self.decisions_made = 0

    # -- public ---------------------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def unschedulable_count(self) -> int:
        return len(self._unschedulable)

    def handle(self, event: Any, position: InputPosition) -> list[CellDecision]:
        """Fold one input into the cell and decide whatever it makes decidable."""
        now = event_time(event)
        decisions: list[CellDecision] = []
        cluster_changed = False
        if isinstance(event, NodeObserved):
            self._nodes[event.node.name] = event.node
            self.engine.upsert_node(self._effective(event.node))
            cluster_changed = True
        elif isinstance(event, NodeRemoved):
            self._nodes.pop(event.name, None)
            self._cordoned.discard(event.name)
            self.engine.remove_node(event.name)
        elif isinstance(event, PodObserved):
            cluster_changed = self._on_pod(event.pod, position)
        elif isinstance(event, PodRouted):
            self._on_routed(event, position)
        elif isinstance(event, PodDeleted) and self._handed_over.pop(event.uid, None) is not None:
            pass  # taken away after a hand-over: nothing of it was here
        elif isinstance(event, PodDeleted):
            decisions.extend(self._pod_gone(event.uid, position, now))
            self._forget_pod(event.uid)
            self._bound.discard(event.uid)
            if self._evicting.pop(event.uid, None) is not None:
                self._release_reservations({event.uid})
            for members in self._group_bound.values():
                members.discard(event.uid)
            self.engine.remove_pod(event.uid)
            cluster_changed = True
        elif isinstance(event, PolicyObserved) and event.kind == "AgentPool":
            decisions.extend(self._on_agent_pool(event, position, now))
        elif isinstance(event, PolicyRemoved) and event.kind == "AgentPool":
            self._drop_agent_pool(f"{event.namespace}/{event.name}")
        elif isinstance(event, PolicyObserved):
            self.engine.upsert_policy(event)
            if event.kind == "PodGroup" and event.pod_group is not None:
                group = event.pod_group
                self._pod_groups[(group.namespace, group.name)] = group.min_member
            cluster_changed = True
        elif isinstance(event, PolicyRemoved):
            self.engine.remove_policy(event.kind, event.namespace, event.name)
            if event.kind == "PodGroup":
                self._pod_groups.pop((event.namespace, event.name), None)
            cluster_changed = True
        elif isinstance(event, CommandResult):
            cluster_changed = self._on_result(event)
        elif isinstance(event, SpotInterruptionNotice):
            decisions.extend(self._on_spot(event, position, now))
        elif isinstance(event, PoolLagState):
            decisions.extend(self._on_lag(event, position, now))
        elif isinstance(event, CellTick):
            self._on_tick()
        if self._moves:
            decisions.extend(self._advance_moves(position, now))
        if cluster_changed and self._unschedulable:
            for uid in sorted(self._unschedulable):
                self._activate(uid)
            self._unschedulable.clear()
        decisions.extend(self._schedule(position, now))
        self.decisions_made += len(decisions)
        return decisions

    # -- inputs ---------------------------------------------------------------------------------

    def _on_pod(self, pod: PodInfo, position: InputPosition) -> bool:
        if pod.node_name:
            self._handed_over.pop(pod.uid, None)
            if pod.uid in self._evicting:
                return False  # on its way out: its room already belongs to the preemptor
            # Bound (by us, confirmed; or by anyone else): it holds capacity for real now.
            self._assumed.pop(pod.uid, None)
            self._forget_pod(pod.uid)
            self._bound.add(pod.uid)
            self.engine.upsert_bound_pod(pod)
            self._track_bound(pod)
            if pod.pod_group:
                self._group_bound.setdefault((pod.namespace, pod.pod_group), set()).add(pod.uid)
            return False
        if pod.scheduler_name != self.scheduler_name or pod.phase != "Pending" or pod.uid in self._bound:
            return False
        if pod.uid in self._handed_over:
            return False  # given up: the inventory routes it (and this update) to another cell
        known = self._pending.get(pod.uid)
        if known is not None:
            known.pod = pod  # a spec update of a waiting pod; keep its place in the queue
            known.shape = _shape(pod)
            return False
        if pod.uid in self._assumed:
            return False  # a late echo of a pod we already placed
        self._pending[pod.uid] = PendingPod(pod=pod, sequence=position.offset, shape=_shape(pod))
        self._activate(pod.uid)
        return False

    def _on_routed(self, routed: PodRouted, position: InputPosition) -> None:
        """A pod routed here for a try in its round (first, next or again)."""
        uid = routed.pod.uid
        self._handed_over.pop(uid, None)
        self._on_pod(routed.pod, position)
        entry = self._pending.get(uid)
        if entry is None:
            return  # not pending for this scheduler (or already placed here): nothing to try
        entry.routed = routed
        if uid in self._unschedulable:  # back for a new round: try it again now
            self._unschedulable.discard(uid)
            self._activate(uid)

    def _on_tick(self) -> None:
        """Time passes for the pods resting at the end of their round: those that have rested
        long enough are tried again (and handed on for a new round if they still do not fit)."""
        for uid in sorted(self._unschedulable):
            entry = self._pending.get(uid)
            if entry is None or entry.routed is None or not entry.routed.round_complete:
                continue
            entry.ticks_rested += 1
            if entry.ticks_rested >= HANDOVER_RETRY_TICKS:
                self._unschedulable.discard(uid)
                self._activate(uid)

    def _on_result(self, result: CommandResult) -> bool:
        uids = self._in_flight.pop(result.command_id, None)
        if result.command_type == ScalePool.model_fields["type"].default or uids is None:
            return False
        if result.status == "applied":
            return False
        released = False
        restored = [v for v, command in self._evicting.values() if command == result.command_id]
        for victim in restored:
            # The preemption did not happen as planned: the victim holds its place again until
            # the cluster says it is gone.
            del self._evicting[victim.uid]
            self.engine.upsert_bound_pod(victim)
        self._release_reservations({victim.uid for victim in restored})
        for uid in uids:
            if self._assumed.get(uid) == result.command_id:
                del self._assumed[uid]
                self.engine.remove_pod(uid)
                released = True
            entry = self._pending.get(uid)
            if entry is not None and entry.in_flight == result.command_id:
                entry.in_flight = None
                entry.last_message = f"binding failed: {result.reason}"
                self._activate(uid)
        return released

    # -- spot ---------------------------------------------------------------------------------

    def _on_spot(self, notice: SpotInterruptionNotice, position: InputPosition,
                 now: datetime) -> list[CellDecision]:
        node = self._nodes.get(notice.node)
        if node is None or notice.node in self._cordoned:
            return []
        self._cordoned.add(notice.node)
        self.engine.upsert_node(self._effective(node))
        message = (f"spot interruption notice: node reclaimed at {notice.deadline:%H:%M:%S} "
                   f"({notice.notice_seconds:.0f}s notice); cordoned")
        record = self._record(position, notice.node, "cordoned", now, node=notice.node, message=message)
        command = CordonNode(command_id=_digest(record.decision_id, 0), decision_id=record.decision_id,
                             cell=self.cell, issued_at=now, node=notice.node, reason=message)
        decisions = [CellDecision(record, (command,))]
        by_pool: dict[str, list[PodInfo]] = {}
        others: list[PodInfo] = []
        for uid in sorted(self._node_pods.get(notice.node, {})):
            pod = self._node_pods[notice.node][uid]
            key = self._pod_pool.get(uid)
            if key is not None and key in self.pools:
                by_pool.setdefault(key, []).append(pod)
            elif pod.owner is None or pod.owner.kind != "DaemonSet":
                others.append(pod)
        for key in sorted(by_pool):
            decisions.extend(self._count_interruption(key, notice.issued_at, position, now))
            decisions.extend(self._surge(key, by_pool[key], notice, position, now))
        for pod in others:
            decisions.append(self._evict(pod, f"spot node {notice.node} reclaimed at "
                                              f"{notice.deadline:%H:%M:%S}: drained", position, now))
        return decisions

    def _count_interruption(self, key: str, at: datetime, position: InputPosition,
                            now: datetime) -> list[CellDecision]:
        threshold = self._threshold(key)
        history = self._spot.setdefault(key, SpotHistory())
        if not history.record(at, threshold):
            return []
        assert threshold is not None
        message = (f"{len(history.times)} spot interruptions within {threshold.window_seconds:.0f}s "
                   f"(threshold {threshold.count}): the pool's replicas go to on-demand nodes until "
                   f"{threshold.window_seconds:.0f}s pass without one")
        return [CellDecision(self._record(position, key, "spot-suspended", now, message=message, part="spot"))]

    def _maybe_resume_spot(self, key: str, now: datetime, position: InputPosition) -> list[CellDecision]:
        history = self._spot.get(key)
        threshold = self._threshold(key)
        if history is None or not history.quiet_since(now, threshold):
            return []
        window = threshold.window_seconds if threshold is not None else 0
        message = f"no spot interruption for {window:.0f}s: the pool may use spot nodes again"
        return [CellDecision(self._record(position, key, "spot-resumed", now, message=message, part="spot"))]

    def _threshold(self, key: str) -> Any:
        policy = self.pools.get(key)
        cost = policy.cost if policy is not None else None
        return cost.interruption_threshold if cost is not None else None

    def _spot_suspended(self, key: str) -> bool:
        history = self._spot.get(key)
        return history is not None and history.suspended

    def _surge(self, key: str, pods: list[PodInfo], notice: SpotInterruptionNotice, position: InputPosition,
               now: datetime) -> list[CellDecision]:
        """Ask for replacements of ``pods`` (the pool's replicas on the reclaimed node) — as many
        as can be placed elsewhere now."""
        policy = self.pools[key]
        current = self._current_replicas(key, policy)
        template = _as_pending(pods[0])
        plan = self._plan(template, key, policy, len(pods), self._capacity_order(key, policy, moving=True),
                          prior=self._outstanding(key, template, current))
        names = ", ".join(p.key for p in pods)
        if not plan:
            message = (f"spot node {notice.node} reclaimed at {notice.deadline:%H:%M:%S}: no room elsewhere for "
                       f"{names}; they serve until the reclaim and the pool recreates them after")
            return [CellDecision(self._record(position, key, "held", now, message=message))]
        self._moves[key] = PoolMove(node=notice.node, deadline=notice.deadline, olds=[p.uid for p in pods],
                                    surge_left=len(plan))
        where = ", ".join(sorted({f"{r.node} ({'spot' if r.spot else 'on-demand'})" for r in plan}))
        reason = (f"spot node {notice.node} reclaimed at {notice.deadline:%H:%M:%S}: surge {len(plan)} "
                  f"replacement(s) for {names} before the deadline (room on {where}); the old replicas "
                  f"are evicted as replacements are bound")
        return [self._scale(key, current, current + len(plan), reason, position, now, scaled_at=notice.issued_at)]

    def _advance_moves(self, position: InputPosition, now: datetime) -> list[CellDecision]:
        """One old replica evicted (and one surge replica given back) per replacement bound."""
        decisions: list[CellDecision] = []
        for key in sorted(self._moves):
            move = self._moves[key]
            while move.replacements > 0:
                uid = move.next_to_evict()
                if uid is None:
                    move.replacements = 0
                    break
                move.replacements -= 1
                move.evicted.add(uid)
                pod = self._node_pods.get(move.node, {}).get(uid)
                if pod is None:
                    continue
                reason = (f"replacement replica of {key} bound: evicting {pod.key} from spot node {move.node} "
                          f"before its reclaim at {move.deadline:%H:%M:%S}")
                extra: tuple[Any, ...] = ()
                if move.surge_left > 0:
                    move.surge_left -= 1
                    current = self._current_replicas(key, self.pools.get(key))
                    extra = (self._scale_command(key, current, current - 1, "surge replica given back", now),)
                    self._pool_replicas[key] = current - 1
                decisions.append(self._evict(pod, reason, position, now, extra=extra))
            if move.done:
                del self._moves[key]
        return decisions

    def _pod_gone(self, uid: str, position: InputPosition, now: datetime) -> list[CellDecision]:
        node = self._pod_node.pop(uid, None)
        if node is not None:
            self._node_pods.get(node, {}).pop(uid, None)
        key = self._pod_pool.pop(uid, None)
        if key is None:
            return []
        self._pool_members.get(key, {}).pop(uid, None)
        move = self._moves.get(key)
        if move is None or uid not in move.olds:
            return []
        move.olds.remove(uid)
        decisions: list[CellDecision] = []
        if uid not in move.evicted and move.surge_left > 0:
            move.surge_left -= 1
            current = self._current_replicas(key, self.pools.get(key))
            decisions.append(self._scale(key, current, current - 1,
                                         f"old replica left spot node {move.node} (reclaimed): surge replica "
                                         "given back", position, now, part=f"give-back/{uid}"))
        if move.done:
            del self._moves[key]
        return decisions

    def _evict(self, pod: PodInfo, reason: str, position: InputPosition, now: datetime,
               extra: tuple[Any, ...] = ()) -> CellDecision:
        record = self._record(position, pod.key, "evicting", now, node=pod.node_name, message=reason)
        command = EvictPod(command_id=_digest(record.decision_id, "evict"), decision_id=record.decision_id,
                           cell=self.cell, issued_at=now, pod_uid=pod.uid, namespace=pod.namespace,
                           name=pod.name, node=pod.node_name, reason=reason)
        fixed = tuple(c.model_copy(update={"decision_id": record.decision_id,
                                           "command_id": _digest(record.decision_id, i, c.command_id)})
                      for i, c in enumerate(extra))
        return CellDecision(record, (command, *fixed))

    def _track_bound(self, pod: PodInfo) -> None:
        previous = self._pod_node.get(pod.uid)
        if previous is not None and previous != pod.node_name:
            self._node_pods.get(previous, {}).pop(pod.uid, None)
        self._pod_node[pod.uid] = pod.node_name or ""
        self._node_pods.setdefault(pod.node_name or "", {})[pod.uid] = pod
        key = agent_pool_of(pod)
        if key is None:
            return
        members = self._pool_members.setdefault(key, {})
        new = pod.uid not in members
        members[pod.uid] = pod
        self._pod_pool[pod.uid] = key
        move = self._moves.get(key)
        if new and move is not None and pod.uid not in move.olds and pod.node_name != move.node:
            move.replacements += 1

    # -- pools ----------------------------------------------------------------------------------

    def _on_agent_pool(self, event: PolicyObserved, position: InputPosition, now: datetime) -> list[CellDecision]:
        info = event.agent_pool
        if info is None:
            return []
        key = f"{info.namespace}/{info.name}"
        file_policy = self._file_pools.get(key)
        try:
            spec = AgentPoolSpec.model_validate(info.spec)
            if not spec.scalable and file_policy is None:
                self.pools.pop(key, None)
                return []  # a pool Berth places but does not scale
            self.pools[key] = merge_cluster_spec(file_policy, info.spec)
        except (AgentPoolSpecError, ValueError) as exc:
            message = (f"AgentPool {key} ignored: {exc}"
                       + ("; the pools file's policy stays" if file_policy is not None else ""))
            if self._pool_messages.get(key) == message:
                return []
            self._pool_messages[key] = message
            return [CellDecision(self._record(position, key, "held", now, message=message, part="policy"))]
        if spec.replicas is not None and key not in self._moves:
            self._pool_replicas[key] = spec.replicas  # the cluster's count, e.g. after kubectl scale
        return []

    def _drop_agent_pool(self, key: str) -> None:
        if key in self._file_pools:
            self.pools[key] = self._file_pools[key]
        else:
            self.pools.pop(key, None)

    def _current_replicas(self, key: str, policy: PoolPolicy | None, lag: PoolLagState | None = None) -> int:
        current = self._pool_replicas.get(key)
        if current is not None:
            return current
        if lag is not None and lag.ready_replicas is not None:
            return lag.ready_replicas
        known = len(self._pool_members.get(key, ())) + sum(
            1 for e in self._pending.values() if agent_pool_of(e.pod) == key)
        if known:
            return known
        return policy.initial_replicas if policy is not None else 0

    def _on_lag(self, lag: PoolLagState, position: InputPosition, now: datetime) -> list[CellDecision]:
        key = f"{lag.namespace}/{lag.pool}"
        policy = self.pools.get(key)
        if policy is None:
            return []
        memory = self._pool_memory[key] = remember(self._pool_memory.get(key), lag, policy)
        decisions = self._maybe_resume_spot(key, lag.updated_at, position)
        current = self._current_replicas(key, policy, lag)
        self._pool_replicas[key] = current
        template = self._replica_template(key, policy)
        members = [m for m in self._pool_members.get(key, {}).values() if m.node_name in self._nodes]
        costs = [replica_cost_per_hour(m, self._nodes[m.node_name]) for m in members]  # type: ignore[index]
        planned = self._outstanding(key, template, current)
        verdict = decide_scale(ScalingInput(
            policy=policy, lag=lag, current=current, last_scaled_at=self._pool_scaled_at.get(key),
            memory=memory, spot_suspended=self._spot_suspended(key),
            spot_replicas=sum(1 for m in members if self._nodes[m.node_name].capacity_type == "spot"),  # type: ignore[index]
            pool_cost_per_hour=sum(c for c in costs if c is not None) if members else None,
            priced_replicas=sum(1 for c in costs if c is not None),
            carbon_intensity=self._cleanest_intensity(),
            probe=self._probe(template, key, policy, planned) if template is not None else None))
        if verdict is None:
            return decisions
        if template is not None:
            planned = [*self._outstanding(key, template, current), *([template] * (verdict.replicas - current))]
        decisions.extend(self._conclude_scale(key, current, verdict, position, now, lag.updated_at, planned))
        return decisions

    def _conclude_scale(self, key: str, current: int, verdict: ScaleVerdict, position: InputPosition,
                        now: datetime, at: datetime, planned: list[PodInfo]) -> list[CellDecision]:
        decisions: list[CellDecision] = []
        if verdict.outcome == "held":
            if self._pool_messages.get(key) != verdict.reason:
                self._pool_messages[key] = verdict.reason
                decisions.append(CellDecision(self._record(position, key, "held", now, message=verdict.reason)))
        else:
            self._pool_messages.pop(key, None)
            decisions.append(self._scale(key, current, verdict.replicas, verdict.reason, position, now, scaled_at=at))
        if verdict.fallback is not None:
            decisions.extend(self._fall_back(key, verdict, position, now, at, planned))
        return decisions

    def _fall_back(self, key: str, verdict: ScaleVerdict, position: InputPosition, now: datetime,
                   at: datetime, planned: list[PodInfo]) -> list[CellDecision]:
        """Scale the pool serving the fallback model (same namespace; by ``spec.model``, else by
        name) by the replicas' worth of tokens the pool could not get, in the room left after
        the pool's own ``planned`` replicas."""
        fallback = verdict.fallback
        assert fallback is not None
        namespace = key.split("/", 1)[0]
        candidates = sorted(k for k, p in self.pools.items() if k != key and k.startswith(namespace + "/")
                            and (p.model == fallback.model or k == f"{namespace}/{fallback.model}"))
        if not candidates:
            return []
        target = candidates[0]
        policy = self.pools[target]
        current = self._current_replicas(target, policy)
        wanted = min(policy.max_replicas,
                     current + math.ceil(fallback.tokens_per_second / policy.tokens_per_second_per_replica))
        template = self._replica_template(target, policy)
        if wanted <= current:
            return []
        if template is not None:
            wanted = current + len(self._plan(template, target, policy, wanted - current,
                                              self._capacity_order(target, policy), prior=list(planned)))
        if wanted <= current:
            return []
        reason = (f"fallback for {key} ({fallback.replicas} replica(s) short): model {fallback.model} "
                  f"takes {fallback.tokens_per_second:.0f} tokens/s")
        return [self._scale(target, current, wanted, reason, position, now, scaled_at=at, part="fallback")]

    def _scale(self, key: str, current: int, replicas: int, reason: str, position: InputPosition, now: datetime,
               *, scaled_at: datetime | None = None, part: str | None = None) -> CellDecision:
        self._pool_replicas[key] = replicas
        if scaled_at is not None:
            self._pool_scaled_at[key] = scaled_at
        record = self._record(position, key, "scaled", now, message=f"{current} → {replicas} replicas: {reason}",
                              part=part)
        command = self._scale_command(key, current, replicas, reason, now).model_copy(
            update={"decision_id": record.decision_id, "command_id": _digest(record.decision_id, 0)})
        return CellDecision(record, (command,))

    def _scale_command(self, key: str, current: int, replicas: int, reason: str, now: datetime) -> ScalePool:
        namespace, name = key.split("/", 1)
        # The ids are placeholders: the decision that carries the command derives the real ones.
        return ScalePool(command_id="-", decision_id="-", cell=self.cell, issued_at=now, pool=name,
                         namespace=namespace, replicas=max(replicas, 0), previous_replicas=max(current, 0),
                         reason=reason)

    def _outstanding(self, key: str, template: PodInfo | None, current: int) -> list[PodInfo]:
        """Replicas asked for that do not exist here yet (neither pending nor bound): room for
        them is spoken for, so probes place them first."""
        if template is None:
            return []
        known = len(self._pool_members.get(key, ())) + sum(
            1 for e in self._pending.values() if agent_pool_of(e.pod) == key)
        return [template] * max(0, current - known)

    def _replica_template(self, key: str, policy: PoolPolicy) -> PodInfo | None:
        """A pending replica as the pool makes them: the newest one known here, else one built
        from the policy's template or GPU requirements; None when neither says what it is."""
        known = [e.pod for e in self._pending.values() if agent_pool_of(e.pod) == key]
        known += list(self._pool_members.get(key, {}).values())
        if known:
            newest = max(known, key=lambda p: (p.creation_time, p.name))
            return _as_pending(newest)
        if policy.template is None and policy.gpu_requirements is None:
            return None
        from berth.workloads import AgentPool, WorkloadError, replica_pod

        namespace, name = key.split("/", 1)
        try:
            return replica_pod(AgentPool(namespace, name, policy.model_dump(mode="json", by_alias=True,
                                                                            exclude_none=True)), 0)
        except WorkloadError:
            return None

    def _plan(self, template: PodInfo, key: str, policy: PoolPolicy, count: int,
              order: list[CapacityClass], prior: list[PodInfo] | None = None) -> list[ProbedReplica]:
        """Where ``count`` replicas would go, class by class in ``order``, after ``prior``."""
        probe = self._probe(template, key, policy, prior)
        plan: list[ProbedReplica] = []
        for capacity in order:
            plan += probe(count - len(plan), capacity)
            if len(plan) >= count:
                break
        return plan

    def _probe(self, template: PodInfo, key: str, policy: PoolPolicy, prior: list[PodInfo] | None = None) -> Any:
        """A :class:`~berth.decider.scaling.CapacityProbe` for the pool. Successive calls build on
        each other (and on ``prior``, which they extend): the engine places the earlier finds
        first, so that two classes or two pools never count the same room twice."""
        regions = preferred_regions(policy)
        found: list[PodInfo] = prior if prior is not None else []

        def probe(count: int, capacity: CapacityClass) -> list[ProbedReplica]:
            if count <= 0:
                return []
            candidate = constrained(with_preferences(template, policy), capacity, regions)
            nodes = self.engine.probe_placements([*found, *([candidate] * count)])[len(found):]
            found.extend([candidate] * len(nodes))
            return [probed(template, self._nodes[name]) for name in nodes if name in self._nodes]

        return probe

    def _capacity_order(self, key: str, policy: PoolPolicy | None, *, moving: bool | None = None) -> list[CapacityClass]:
        """The node classes a replica of the pool may use, in order of preference. While the pool
        moves off a reclaimed spot node its replacements try on-demand first."""
        moving = key in self._moves if moving is None else moving
        cost = policy.cost if policy is not None else None
        if cost is None:
            return ["on-demand", "any"] if moving else ["any"]
        spot_ok = cost.spot_enabled and not self._spot_suspended(key)
        if spot_ok:
            members = [m for m in self._pool_members.get(key, {}).values() if m.node_name in self._nodes]
            on_spot = sum(1 for m in members if self._nodes[m.node_name].capacity_type == "spot")  # type: ignore[index]
            spot_ok = on_spot + 1 <= math.floor(cost.max_spot_percent / 100 * (len(members) + 1))
        if not spot_ok:
            return ["on-demand"]
        return ["on-demand", "spot"] if moving else ["spot", "on-demand"]

    def _cleanest_intensity(self) -> float | None:
        values = [n.carbon_intensity for name, n in sorted(self._nodes.items())
                  if n.carbon_intensity is not None and not n.unschedulable and name not in self._cordoned]
        return min(values) if values else None

    def _place_replica(self, pod: PodInfo, key: str) -> EngineOutcome:
        """Place a pool's replica under its policy: capacity classes in order, the pool's score
        terms (without preemption), then the plain engine (which may preempt) in the last class."""
        policy = self.pools.get(key)
        pod = with_preferences(pod, policy)
        order = self._capacity_order(key, policy)
        terms = score_terms(policy)
        regions = preferred_regions(policy)
        outcome = EngineOutcome()
        for capacity in order:
            candidate = constrained(pod, capacity, regions)
            outcome = self.engine.place_scored(candidate, terms) if terms else self.engine.place([candidate])
            if outcome.placed:
                return outcome
        if terms:
            outcome = self.engine.place([constrained(pod, order[-1], regions)])
        return outcome

    def _effective(self, node: Any) -> Any:
        """The node as the engine must see it: cordoned while we cordoned it (spot) or while a
        preemption's victims are still on it, whatever a stale observation says."""
        if (node.name in self._cordoned or node.name in self._reserving) and not node.unschedulable:
            return node.model_copy(update={"unschedulable": True})
        return node

    def _release_reservations(self, gone: set[str]) -> None:
        for name in sorted(self._reserving):
            victims = self._reserving[name]
            victims -= gone
            if not victims:
                del self._reserving[name]
                if name in self._nodes:
                    self.engine.upsert_node(self._effective(self._nodes[name]))

    # -- scheduling -----------------------------------------------------------------------------

    def _activate(self, uid: str) -> None:
        entry = self._pending.get(uid)
        if entry is None or entry.in_flight is not None:
            return
        key = _queue_key(entry)
        index = bisect.bisect_left(self._active, (key, uid))
        if index < len(self._active) and self._active[index] == (key, uid):
            return
        self._active.insert(index, (key, uid))

    def _forget_pod(self, uid: str) -> None:
        entry = self._pending.pop(uid, None)
        self._unschedulable.discard(uid)
        if entry is not None:
            key = (_queue_key(entry), uid)
            index = bisect.bisect_left(self._active, key)
            if index < len(self._active) and self._active[index] == key:
                del self._active[index]

    def _schedule(self, position: InputPosition, now: datetime) -> list[CellDecision]:
        decisions: list[CellDecision] = []
        held_groups: set[tuple[str, str]] = set()
        failed_shapes: dict[tuple[str, bool], tuple[str, EngineOutcome]] = {}
        """shape → (snapshot, outcome) of a failure in this round: a failure changes nothing, so
        the next pod of that shape on the same snapshot fails the same way without asking."""
        while self._active:
            _, uid = self._active.pop(0)
            entry = self._pending.get(uid)
            if entry is None or entry.in_flight is not None:
                continue
            pod = entry.pod
            if pod.pod_group:
                group = (pod.namespace, pod.pod_group)
                if group in held_groups:
                    continue
                decision = self._try_gang(group, position, now)
                if decision is None:
                    held_groups.add(group)
                    continue
                decisions.append(decision)
                continue
            snapshot = self.engine.snapshot_hash()
            may_hand_over = self._may_hand_over(entry)
            shape = (entry.shape, may_hand_over)
            known_failure = failed_shapes.get(shape)
            if known_failure is not None and known_failure[0] == snapshot:
                outcome = known_failure[1]
            else:
                pool = agent_pool_of(pod) if self.pools else None
                outcome = (self._place_replica(pod, pool) if pool is not None and pool in self.pools
                           else self.engine.place([pod], preempt=not may_hand_over))
                if not outcome.placed:
                    failed_shapes[shape] = (snapshot, outcome)
            if may_hand_over and not outcome.placed:
                decisions.append(self._hand_over(entry, outcome, position, now, snapshot))
                continue
            decision = self._conclude([entry], outcome, position, now, subject=pod.key, snapshot=snapshot)
            if decision is not None:
                decisions.append(decision)
        return decisions

    @staticmethod
    def _may_hand_over(entry: PendingPod) -> bool:
        """Whether a failure here passes the pod on: its round has an untried cell, or it has
        rested here through :data:`HANDOVER_RETRY_TICKS` ticks."""
        routed = entry.routed
        if routed is None or routed.cells < 2:
            return False
        return not routed.round_complete or entry.ticks_rested >= HANDOVER_RETRY_TICKS

    def _hand_over(self, entry: PendingPod, outcome: EngineOutcome, position: InputPosition, now: datetime,
                   snapshot: str) -> CellDecision:
        pod, routed = entry.pod, entry.routed
        assert routed is not None
        self._forget_pod(pod.uid)
        self._handed_over[pod.uid] = routed.hop
        record = self._record(position, pod.key, "handed-over", now, snapshot=snapshot,
                              message=outcome.message, verdicts=outcome.verdicts)
        # A new round starts from this cell: what the cells before it said is stale by now.
        before = None if routed.round_complete else routed.elsewhere
        rejected = outcome.rejected.plus(before) if outcome.rejected is not None else before
        command = HandOverPod(command_id=_digest(record.decision_id, "hand-over"), decision_id=record.decision_id,
                              cell=self.cell, pod_uid=pod.uid, namespace=pod.namespace, name=pod.name,
                              hop=routed.hop, route_partition=routed.route_partition, rejected=rejected,
                              issued_at=now)
        return CellDecision(record, (command,))

    def _try_gang(self, group: tuple[str, str], position: InputPosition,
                  now: datetime) -> CellDecision | None:
        namespace, name = group
        members = sorted((e for e in self._pending.values()
                          if e.pod.pod_group == name and e.pod.namespace == namespace and e.in_flight is None),
                         key=_queue_key)
        subject = f"{namespace}/{name}"
        min_member = self._pod_groups.get(group)
        bound = len(self._group_bound.get(group, ()))
        if min_member is None or len(members) + bound < min_member:
            message = (f'pod group "{subject}" not found' if min_member is None else
                       f"waiting for gang {subject}: {len(members) + bound}/{min_member} members "
                       f"pending or running")
            for entry in members:
                self._unschedulable.add(entry.pod.uid)
                self._drop_from_active(entry)
            lead = members[0] if members else None
            if lead is not None and lead.last_message != message:
                for entry in members:
                    entry.last_message = message
                return CellDecision(self._record(position, subject, "held", now, message=message,
                                                 pods=[entry.pod.key for entry in members]))
            return None
        for entry in members:
            self._drop_from_active(entry)
        snapshot = self.engine.snapshot_hash()
        outcome = self.engine.place([entry.pod for entry in members], min_member=max(1, min_member - bound))
        return self._conclude(members, outcome, position, now, subject=subject, pod_group=name,
                              snapshot=snapshot)

    def _drop_from_active(self, entry: PendingPod) -> None:
        key = (_queue_key(entry), entry.pod.uid)
        index = bisect.bisect_left(self._active, key)
        if index < len(self._active) and self._active[index] == key:
            del self._active[index]

    def _conclude(self, entries: list[PendingPod], outcome: EngineOutcome, position: InputPosition,
                  now: datetime, *, subject: str, snapshot: str,
                  pod_group: str | None = None) -> CellDecision | None:
        if not outcome.placed:
            outcome = _counting_cells_tried(entries[0], outcome)
            for entry in entries:
                entry.attempts += 1
                self._unschedulable.add(entry.pod.uid)
            lead = entries[0]
            if lead.last_message == outcome.message:
                return None  # unchanged: don't repeat the same verdict on every retry
            for entry in entries:
                entry.last_message = outcome.message
            members = [entry.pod.key for entry in entries] if pod_group is not None else []
            return CellDecision(self._record(position, subject, "unschedulable", now, snapshot=snapshot,
                                             message=outcome.message, verdicts=outcome.verdicts, pods=members))
        first = outcome.placements[0]
        record = self._record(
            position, subject, "placed", now, node=first.node, gpu_devices=first.gpu_devices,
            verdicts=outcome.verdicts, snapshot=snapshot,
            message=("preempting " + ", ".join(v.key for v in outcome.victims)) if outcome.victims else "",
            pods=[p.pod.key for p in outcome.placements] if pod_group is not None else (),
        )
        # Victims travel inside the placement: the binder evicts them first, in order, which
        # separate EvictPod commands (other partitions) could not guarantee.
        command_id = _digest(record.decision_id, "place")
        commands: list[Any] = [PlacePods(
            command_id=command_id, decision_id=record.decision_id, cell=self.cell, issued_at=now,
            pod_group=pod_group, victims=tuple(v.key for v in outcome.victims),
            victim_uids=tuple(v.uid for v in outcome.victims),
            placements=tuple(PodPlacement(pod_uid=p.pod.uid, namespace=p.pod.namespace, name=p.pod.name,
                                          node=p.node, gpu_devices=p.gpu_devices, gpu_milli=p.gpu_milli)
                             for p in outcome.placements))]
        self._in_flight[command_id] = tuple(p.pod.uid for p in outcome.placements)
        for placement in outcome.placements:
            # The pod stays pending, marked in flight, until the cluster confirms the binding
            # (bound echo), deletes it, or the command fails (then it is queued again).
            self._assumed[placement.pod.uid] = command_id
            self._unschedulable.discard(placement.pod.uid)
            entry = self._pending.get(placement.pod.uid)
            if entry is not None:
                self._drop_from_active(entry)
                entry.in_flight = command_id
        for victim in outcome.victims:
            self._forget_pod(victim.uid)
            self._evicting[victim.uid] = (victim, command_id)
            if victim.node_name:
                self._reserving.setdefault(victim.node_name, set()).add(victim.uid)
        for name in sorted({v.node_name for v in outcome.victims if v.node_name}):
            if name in self._nodes:
                self.engine.upsert_node(self._effective(self._nodes[name]))
        return CellDecision(record, tuple(commands))

    # -- records --------------------------------------------------------------------------------

    def _record(self, position: InputPosition, subject: str, outcome: str, now: datetime, *,
                node: str | None = None, gpu_devices: Iterable[int] = (), message: str = "",
                verdicts: Iterable[NodeVerdict] = (), snapshot: str | None = None,
                part: str | None = None, pods: Iterable[str] = ()) -> DecisionRecord:
        """A signed record: ``decision_hash`` covers every other field, canonically encoded.
        ``snapshot`` is the engine's snapshot hash before the decision (default: now); ``part``
        tells apart two decisions about one subject from one input (e.g. a pool's spot
        suspension and its surge)."""
        ident: tuple[object, ...] = (self.cell_name, position.topic, position.partition, position.offset, subject)
        decision_id = _digest(*ident, *((part,) if part is not None else ()))
        fields: dict[str, Any] = {
            "decision_id": decision_id, "cell": self.cell_name, "input": position, "subject": subject,
            "outcome": outcome, "node": node, "gpu_devices": tuple(gpu_devices), "message": message,
            "verdicts": tuple(verdicts), "pods": tuple(pods), "config_version": self.engine.config_version,
            "snapshot_hash": snapshot or self.engine.snapshot_hash(), "config_hash": self.engine.config_hash,
            "event_time": now,
        }
        unsigned = DecisionRecord(decision_hash="-", **fields)
        # ``pods`` came later: leaving it out when empty keeps the hashes of decisions recorded
        # before it (replayed by a newer auditor) as they were.
        excluded = {"decision_hash"} if unsigned.pods else {"decision_hash", "pods"}
        canonical = json.dumps(unsigned.model_dump(mode="json", exclude=excluded),
                               sort_keys=True, separators=(",", ":"))
        return unsigned.model_copy(update={"decision_hash": _digest(canonical, size=32)})


def _counting_cells_tried(entry: PendingPod, outcome: EngineOutcome) -> EngineOutcome:
    """The outcome of a pod at the end of its round, its message counting the nodes of every cell
    of the round (kube-scheduler's FitError counts every node of the cluster)."""
    routed = entry.routed
    if routed is None or routed.elsewhere is None or outcome.rejected is None:
        return outcome
    more = routed.elsewhere
    message = with_more_nodes(outcome.message, outcome.rejected.nodes, outcome.rejected.reasons,
                              more.nodes, more.reasons)
    return replace(outcome, message=message, rejected=outcome.rejected.plus(more))


def _as_pending(pod: PodInfo) -> PodInfo:
    """A replica as its pool creates it: not bound, no devices, pending."""
    return pod.model_copy(update={"node_name": None, "gpu_devices": (), "phase": "Pending"})
