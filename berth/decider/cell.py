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
- gangs: members wait until ``minMember`` of their PodGroup are pending, then go as one;
- pools: the replica count it last asked for and when (for cooldowns).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from hashlib import blake2b
from typing import Any

from berth.schemas import (
    CommandResult,
    CordonNode,
    DecisionRecord,
    InputPosition,
    NodeObserved,
    NodeRemoved,
    NodeVerdict,
    PlacePods,
    PodDeleted,
    PodInfo,
    PodObserved,
    PodPlacement,
    PolicyObserved,
    PolicyRemoved,
    PoolLagState,
    ScalePool,
    SpotInterruptionNotice,
)
from berth.schemas.envelope import event_time

from .pools import PoolPolicy, desired_replicas
from .ports import EngineOutcome, PendingPod, PlacementEngine

SCHEDULER_NAME = "berth"


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
        self._group_bound: dict[tuple[str, str], set[str]] = {}
        """gang → members bound in the cluster (they count towards minMember, as in kube)."""
        self._pod_groups: dict[tuple[str, str], int] = {}
        self._nodes: dict[str, Any] = {}
        self._cordoned: set[str] = set()
        self._pool_replicas: dict[str, int] = {}
        self._pool_scaled_at: dict[str, datetime] = {}
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
        elif isinstance(event, PodDeleted):
            self._forget_pod(event.uid)
            self._bound.discard(event.uid)
            if self._evicting.pop(event.uid, None) is not None:
                self._release_reservations({event.uid})
            for members in self._group_bound.values():
                members.discard(event.uid)
            self.engine.remove_pod(event.uid)
            cluster_changed = True
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
            if pod.uid in self._evicting:
                return False  # on its way out: its room already belongs to the preemptor
            # Bound (by us, confirmed; or by anyone else): it holds capacity for real now.
            self._assumed.pop(pod.uid, None)
            self._forget_pod(pod.uid)
            self._bound.add(pod.uid)
            self.engine.upsert_bound_pod(pod)
            if pod.pod_group:
                self._group_bound.setdefault((pod.namespace, pod.pod_group), set()).add(pod.uid)
            return False
        if pod.scheduler_name != self.scheduler_name or pod.phase != "Pending" or pod.uid in self._bound:
            return False
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
        return [CellDecision(record, (command,))]

    def _on_lag(self, lag: PoolLagState, position: InputPosition, now: datetime) -> list[CellDecision]:
        key = f"{lag.namespace}/{lag.pool}"
        policy = self.pools.get(key)
        if policy is None:
            return []
        current = self._pool_replicas.get(key)
        if current is None:
            current = lag.ready_replicas if lag.ready_replicas is not None else policy.initial_replicas
        verdict = desired_replicas(policy, lag, current, self._pool_scaled_at.get(key))
        if verdict is None:
            self._pool_replicas[key] = current
            return []
        self._pool_replicas[key] = verdict.replicas
        self._pool_scaled_at[key] = lag.updated_at
        record = self._record(position, key, "scaled", now, message=f"{current} → {verdict.replicas} "
                              f"replicas: {verdict.reason}")
        command = ScalePool(command_id=_digest(record.decision_id, 0), decision_id=record.decision_id,
                            cell=self.cell, issued_at=now, pool=lag.pool, namespace=lag.namespace,
                            replicas=verdict.replicas, previous_replicas=current, reason=verdict.reason)
        return [CellDecision(record, (command,))]

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
        failed_shapes: dict[str, tuple[str, EngineOutcome]] = {}
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
            known_failure = failed_shapes.get(entry.shape)
            if known_failure is not None and known_failure[0] == snapshot:
                outcome = known_failure[1]
            else:
                outcome = self.engine.place([pod])
                if not outcome.placed:
                    failed_shapes[entry.shape] = (snapshot, outcome)
            decision = self._conclude([entry], outcome, position, now, subject=pod.key, snapshot=snapshot)
            if decision is not None:
                decisions.append(decision)
        return decisions

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
                return CellDecision(self._record(position, subject, "held", now, message=message))
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
            for entry in entries:
                entry.attempts += 1
                self._unschedulable.add(entry.pod.uid)
            lead = entries[0]
            if lead.last_message == outcome.message:
                return None  # unchanged: don't repeat the same verdict on every retry
            for entry in entries:
                entry.last_message = outcome.message
            return CellDecision(self._record(position, subject, "unschedulable", now, snapshot=snapshot,
                                             message=outcome.message, verdicts=outcome.verdicts))
        first = outcome.placements[0]
        record = self._record(
            position, subject, "placed", now, node=first.node, gpu_devices=first.gpu_devices,
            verdicts=outcome.verdicts, snapshot=snapshot,
            message=("preempting " + ", ".join(v.key for v in outcome.victims)) if outcome.victims else "",
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
                verdicts: Iterable[NodeVerdict] = (), snapshot: str | None = None) -> DecisionRecord:
        """A signed record: ``decision_hash`` covers every other field, canonically encoded.
        ``snapshot`` is the engine's snapshot hash before the decision (default: now)."""
        decision_id = _digest(self.cell_name, position.topic, position.partition, position.offset, subject)
        fields: dict[str, Any] = {
            "decision_id": decision_id, "cell": self.cell_name, "input": position, "subject": subject,
            "outcome": outcome, "node": node, "gpu_devices": tuple(gpu_devices), "message": message,
            "verdicts": tuple(verdicts), "config_version": self.engine.config_version,
            "snapshot_hash": snapshot or self.engine.snapshot_hash(), "config_hash": self.engine.config_hash,
            "event_time": now,
        }
        unsigned = DecisionRecord(decision_hash="-", **fields)
        canonical = json.dumps(unsigned.model_dump(mode="json", exclude={"decision_hash"}),
                               sort_keys=True, separators=(",", ":"))
        return unsigned.model_copy(update={"decision_hash": _digest(canonical, size=32)})
