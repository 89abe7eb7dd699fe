"""The engine: one cell's cluster state and the only path that commits to it.

Every placement Berth makes goes through :meth:`Engine.schedule` — filter → score → reserve →
assume, as kube-scheduler's cycle ends in its cache — and everything else is built on that path,
not beside it:

- :meth:`Engine.preempt`: the profile's PostFilter nominates a node and victims; the victims
  leave the state and the pod is scheduled again (only that node changed, so it lands there);
- :meth:`Engine.schedule_gang`: all-or-nothing placement of a PodGroup's members, each member
  through the same cycle, rolled back member by member when the gang does not come together;
- :meth:`Engine.probe`: what would happen to a list of pods, each assumed for the next one's
  sake and all released before returning (the snapshot hash is unchanged);
- ``extra_scores``: a pool's replicas scored by the profile plus extra Score plugins.

The decision service's cells, ``berth simulate``, the audit's replay and what-if, the pool
planner and the benches all hold an :class:`Engine`; none of them touches a ClusterState.

Pure: no I/O, no clock, no randomness. The configuration arrives as a document (a mapping of
KubeSchedulerConfiguration keys) already read by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from berth.core.config import SchedulerConfig, parse_config
from berth.core.decision import Decision
from berth.core.gangs import LABEL_NETWORK_BLOCK, LABEL_ZONE, place_gang
from berth.core.observe import CycleObserver
from berth.core.plugins.gpu_devices import gpu_inventory
from berth.core.resource_columns import CPU
from berth.core.scheduler import Framework, Scheduler
from berth.core.state import ClusterState
from berth.schemas.cluster import NodeInfo, PodInfo
from berth.schemas.policy import PolicyObserved
from berth.schemas.scheduler import NodeVerdict, RejectedNodes

__all__ = ["Engine", "Outcome", "Placement", "NODE_LEVEL_VERDICTS"]

NODE_LEVEL_VERDICTS = 100
"""Up to this many nodes, every filtered-out node gets its own verdict; beyond, verdicts are
grouped by reason with a count (a 5,000-node decision stays small)."""

_COMMITTED = ("placed", "held")
"""Decision statuses that hold a node: the pod is assumed there."""


@dataclass(frozen=True, slots=True)
class Placement:
    """One pod assumed on ``node`` (with its GPU devices or share)."""

    pod: PodInfo
    node: str
    gpu_devices: tuple[int, ...] = ()
    gpu_milli: int | None = None


@dataclass(frozen=True)
class Outcome:
    """The engine's answer for one pod or one gang.

    ``placements`` non-empty: every pod named there is ASSUMED on the state (it holds capacity
    until released). Otherwise nothing was assumed and ``message`` is kube-scheduler's reason.
    ``victims`` were removed from the state for the placement to hold (their own node and
    devices filled in); a preemption that did not end in a placement still lists them.
    ``member_messages`` gives, for a gang, each unplaced member's reason by UID.
    """

    placements: tuple[Placement, ...] = ()
    message: str = ""
    victims: tuple[PodInfo, ...] = ()
    nominated_node: str | None = None
    rejected: RejectedNodes | None = None
    """For a pod not placed: the nodes that rejected it and why (what ``message`` counts)."""
    member_messages: Mapping[str, str] = field(default_factory=dict)
    decision: Decision | None = field(default=None, repr=False, compare=False)
    node_names: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    """The snapshot's node names when the decision was made, kept only when verdicts list
    rejected nodes one by one."""
    override_verdicts: tuple[NodeVerdict, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def placed(self) -> bool:
        return bool(self.placements)

    @cached_property
    def verdicts(self) -> tuple[NodeVerdict, ...]:
        """Every node's verdict: the best-scored feasible nodes, then why the others failed
        (per node up to :data:`NODE_LEVEL_VERDICTS` nodes, else per reason with a count).
        Built on first use: most callers never read them."""
        if self.override_verdicts is not None:
            return self.override_verdicts
        decision = self.decision
        if decision is None:
            return ()
        verdicts = [
            _verdict(score.node, None, dict(sorted(score.scores)), score.total) for score in decision.top_scores
        ]
        if not decision.rejections:
            return tuple(verdicts)
        if self.node_names is not None:
            reasons = [", ".join(group.reasons) for group in decision.rejections]
            for node, index in zip(self.node_names, decision.group_indices().tolist(), strict=True):
                if index >= 0:
                    verdicts.append(_verdict(node, reasons[index], {}, None))
        else:
            for group in decision.rejections:
                verdicts.append(_verdict(f"{group.count} node(s)", ", ".join(group.reasons), {}, None))
        return tuple(verdicts)


class Engine:
    """The cluster state of one cell, a scheduler over it, and the one commit path.

    Contract: every method is deterministic; ``upsert_*``/``remove_*`` are idempotent; a method
    that returns an unplaced :class:`Outcome` leaves the state as it found it, except for the
    victims an explicit preemption removed. Not thread-safe: one writer per cell by design.
    """

    def __init__(self, scheduler_document: Mapping[str, Any], *, max_gang_domains: int = 8) -> None:
        self.scheduler_document: Mapping[str, Any] = scheduler_document
        self.config: SchedulerConfig = parse_config(dict(scheduler_document))
        self._scheduler = Scheduler(self.config)
        self._state = ClusterState()
        self.profile: str = next(iter(self._scheduler.frameworks))
        self.profiles: tuple[str, ...] = tuple(self._scheduler.frameworks)
        self._scored: dict[tuple[str, tuple[tuple[str, int], ...]], Framework] = {}
        self._max_gang_domains = max_gang_domains
        self._observer: CycleObserver | None = None
        for framework in self._scheduler.frameworks.values():
            framework.prepare(self._state)

    def observe(self, observer: CycleObserver | None) -> None:
        """Report how long scheduling takes to ``observer`` from now on (None: stop). Only
        scheduling attempts are timed: probes and preemption's what-ifs are not."""
        self._observer = observer
        for framework in (*self._scheduler.frameworks.values(), *self._scored.values()):
            framework.observer = observer

    def adopt(self, state: ClusterState) -> None:
        """Continue from ``state``, a snapshot an engine of the same configuration built (e.g.
        restored from a pickle, which leaves out the plugins' derived extensions: they are
        attached again here by replaying its nodes and pods)."""
        self._state = state
        for framework in (*self._scheduler.frameworks.values(), *self._scored.values()):
            framework.prepare(state)

    @property
    def state(self) -> ClusterState:
        """The snapshot, to read (counts, GPU inventory, hashes). Commit only through the engine."""
        return self._state

    # -- the snapshot ---------------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        self._state.upsert_node(node)

    def remove_node(self, name: str) -> None:
        self._state.remove_node(name)

    def upsert_bound_pod(self, pod: PodInfo) -> None:
        """A pod holding capacity on ``pod.node_name``; replaces an assumption of the same UID. A
        pod on a node this state does not know (another cell's) holds nothing here."""
        if self._state.nodes.get(pod.node_name or "") is None:
            return
        self._state.upsert_bound_pod(pod)

    def remove_pod(self, uid: str) -> None:
        """Release whatever the pod holds, bound or assumed. Unknown UIDs are ignored."""
        self._state.remove_pod(uid)

    def delete_pod(self, uid: str) -> None:
        """The pod is gone for good (deleted from the cluster): release what it holds and forget
        what the state keeps to restore it, so a long run keeps nothing of pods that left.
        Use :meth:`remove_pod` for a removal that may be undone."""
        self._state.delete_pod(uid)

    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self._state.upsert_namespace(name, labels)

    def upsert_policy(self, event: PolicyObserved) -> None:
        """Fold a policy object. Namespaces are the labels namespaceSelector terms match;
        AgentPools do not change placement (their cells place replicas with pool terms)."""
        if event.kind == "AgentPool":
            return
        if event.kind == "Namespace" and event.namespace_info is not None:
            self._state.upsert_namespace(event.namespace_info.name, event.namespace_info.labels)
            return
        obj = event.obj
        self._state.upsert_policy(event.kind, getattr(obj, "namespace", ""), obj.name, obj)  # type: ignore[attr-defined]  # every policy object has a name

    def remove_policy(self, kind: str, namespace: str, name: str) -> None:
        if kind == "Namespace":
            self._state.remove_namespace(name)
            return
        self._state.remove_policy(kind, namespace, name)

    def snapshot_hash(self) -> str:
        """A digest of the current snapshot (order-independent, cheap)."""
        return self._state.snapshot_hash()

    # -- the commit path ------------------------------------------------------------------------

    def schedule(
        self,
        pod: PodInfo,
        *,
        preempt: bool = True,
        profile: str | None = None,
        extra_scores: Sequence[tuple[str, int]] = (),
        max_nodes_to_score: int | None = None,
    ) -> Outcome:
        """One scheduling cycle for ``pod``, committed: a fitting pod is assumed on its node.

        ``preempt``: when no node fits and the profile's PostFilter nominates one, continue with
        :meth:`preempt`; with ``False`` (a cell that may still hand the pod to another cell) the
        pod is left unplaced and nothing is removed. ``extra_scores`` adds Score plugins
        (name, weight) for this pod, e.g. a pool's ``(("NodeCost", 2),)``; such a cycle never
        preempts (its caller falls back to a plain one). ``max_nodes_to_score``: the cycle stops
        filtering after that many feasible nodes (a pool's ``fastScheduling.maxNodesToScore``,
        see :mod:`berth.core.filtering`); None: the profile's ``percentageOfNodesToScore``."""
        observer = self._observer
        if observer is None:
            return self._schedule(pod, preempt, profile, extra_scores, max_nodes_to_score)
        started = observer.clock()
        outcome = self._schedule(pod, preempt, profile, extra_scores, max_nodes_to_score)
        observer.attempt(pod.uid, _attempt_result(outcome), profile or self.profile, observer.clock() - started)
        return outcome

    def _schedule(
        self,
        pod: PodInfo,
        preempt: bool,
        profile: str | None,
        extra_scores: Sequence[tuple[str, int]],
        max_nodes_to_score: int | None = None,
    ) -> Outcome:
        if extra_scores:
            decision = self._scored_framework(profile or self.profile, tuple(extra_scores)).schedule(
                pod, self._state, max_nodes_to_score=max_nodes_to_score
            )
            return self._conclude(pod, decision)
        decision = self._scheduler.schedule(
            pod, self._state, profile or self.profile, max_nodes_to_score=max_nodes_to_score
        )
        if decision.status == "preempting" and preempt:
            return self._preempt(pod, decision, profile or self.profile)
        return self._conclude(pod, decision)

    def preempt(self, pod: PodInfo, *, profile: str | None = None) -> Outcome:
        """Schedule ``pod`` allowing preemption: the same as ``schedule(pod, preempt=True)``,
        named for callers that mean it."""
        return self.schedule(pod, preempt=True, profile=profile)

    def _preempt(self, pod: PodInfo, nominating: Decision, profile: str) -> Outcome:
        removed: list[PodInfo] = []
        for uid in nominating.victims:
            placed = self._state.pods.get(uid)
            if placed is not None:
                # Where each victim holds its room, also when it is only assumed (its own
                # binding still in flight, so its PodInfo names no node yet).
                removed.append(
                    placed.pod.model_copy(update={"node_name": placed.node_name, "gpu_devices": placed.gpu_devices})
                )
            self._state.remove_pod(uid)
        decision = self._scheduler.schedule(pod, self._state, profile)
        victims = tuple(sorted(removed, key=lambda p: p.key))
        outcome = self._conclude(pod, decision, victims=victims)
        if outcome.placed and victims:
            if self._observer is not None:
                self._observer.preemption_victims(len(victims))
            return _with(outcome, nominated_node=decision.node)
        return outcome

    def _conclude(self, pod: PodInfo, decision: Decision, *, victims: tuple[PodInfo, ...] = ()) -> Outcome:
        names = (
            tuple(self._state.nodes.names())
            if (decision.rejections and decision.nodes_total <= NODE_LEVEL_VERDICTS)
            else None
        )
        if decision.status not in _COMMITTED:
            return Outcome(
                message=decision.message,
                victims=victims,
                rejected=_rejected_nodes(decision),
                decision=decision,
                node_names=names,
            )
        self._assume(pod, decision)
        placement = Placement(pod, decision.node or "", tuple(decision.gpu_devices), decision.gpu_milli)
        return Outcome(placements=(placement,), victims=victims, decision=decision, node_names=names)

    def _assume(self, pod: PodInfo, decision: Decision) -> None:
        self._state.assume(pod, decision.node, decision.gpu_devices, decision.gpu_milli)  # type: ignore[arg-type]  # a placed decision has its node

    def _release(self, uid: str) -> None:
        self._state.forget(uid)

    def schedule_gang(self, pods: Sequence[PodInfo], min_member: int, *, profile: str | None = None) -> Outcome:
        """Place a gang (``pods`` in queue order) so that at least ``min_member`` run, or none:
        see :func:`berth.core.gangs.place_gang`. Members are scheduled by the plain cycle and a
        member that could only fit by preempting counts as not fitting (a gang evicts nobody).
        Placed: the members placed are assumed, the others keep their reasons in
        ``member_messages``. Not placed: nothing is assumed; ``message`` is the first member's."""
        group = f"{pods[0].namespace}/{pods[0].pod_group}"
        host = _GangHost(self, profile or self.profile)
        observer = self._observer
        started = observer.clock() if observer is not None else 0.0
        result = place_gang(host, pods, min_member, group)
        if observer is not None:
            # Each member had its attempt: the gang's, placed or not as a whole.
            seconds = observer.clock() - started
            placed = {p.pod.uid for p in result.placements} if result.placed else set()
            for pod in pods:
                observer.attempt(
                    pod.uid, "scheduled" if pod.uid in placed else "unschedulable", profile or self.profile, seconds
                )
        if not result.placed:
            message = result.messages.get(pods[0].uid, "") or next(iter(result.messages.values()), "")
            return Outcome(message=message, member_messages=dict(result.messages), override_verdicts=())
        return Outcome(placements=tuple(result.placements), member_messages=dict(result.messages), override_verdicts=())

    def probe(self, pods: Sequence[PodInfo]) -> tuple[str, ...]:
        """Nodes where ``pods`` would go, placed one after the other without preemption and
        without committing anything: each is assumed under a probe UID (so copies of one pod may
        be given) for the next one's sake and released before returning. Stops at the first pod
        that does not fit."""
        nodes: list[str] = []
        probes: list[str] = []
        observer = self._observer
        self.observe(None)  # a what-if, not an attempt
        try:
            for index, pod in enumerate(pods):
                copy = pod.model_copy(update={"uid": f"{pod.uid}~probe-{index}"})
                decision = self._scheduler.schedule(copy, self._state, self.profile)
                if decision.status != "placed":
                    break
                self._assume(copy, decision)
                probes.append(copy.uid)
                nodes.append(decision.node or "")
        finally:
            for uid in probes:
                self._release(uid)
            self.observe(observer)
        return tuple(nodes)

    def gpu_milli_used(self) -> int:
        """GPU milli held across the state (whole devices and shares; MIG slices not counted)."""
        return int(gpu_inventory(self._state).devices.used_milli().sum())

    def _scored_framework(self, profile: str, extra: tuple[tuple[str, int], ...]) -> Framework:
        """The profile with ``extra`` Score plugins appended (built once per combination)."""
        framework = self._scored.get((profile, extra))
        if framework is None:
            document = _with_extra_scores(
                self.scheduler_document, profile, set(self.config.profile(profile).plugin_names()), extra
            )
            framework = Framework(parse_config(document), profile)
            framework.prepare(self._state)
            framework.observer = self._observer
            self._scored[(profile, extra)] = framework
        return framework


class _GangHost:
    """What :func:`berth.core.gangs.place_gang` asks of the engine: one member through the
    plain cycle (optionally held inside a domain by a node selector, so the profile's own
    NodeAffinity enforces it), taking a member back, and the domains to try."""

    def __init__(self, engine: Engine, profile: str) -> None:
        self.engine = engine
        self.profile = profile

    def place_one(self, pod: PodInfo, within: tuple[str, str] | None) -> tuple[Placement | None, str]:
        target = (
            pod
            if within is None
            else pod.model_copy(update={"node_selector": {**pod.node_selector, within[0]: within[1]}})
        )
        decision = self.engine._scheduler.schedule(target, self.engine._state, self.profile)
        if decision.status != "placed":
            return None, decision.message
        self.engine._assume(pod, decision)
        return Placement(pod, decision.node or "", tuple(decision.gpu_devices), decision.gpu_milli), ""

    def unassume(self, placement: Placement) -> None:
        self.engine._release(placement.pod.uid)

    def domains(self, pods: Sequence[PodInfo]) -> list[tuple[str, tuple[str, str]]]:
        """Network blocks, then zones, that could hold the whole gang by a rough count (free
        whole GPUs for GPU gangs, free cpu otherwise), smallest sufficient first (best fit keeps
        big domains for big gangs), names breaking ties; at most ``max_gang_domains`` of each."""
        state = self.engine._state
        live = state.nodes.order()
        gpus = sum(p.whole_gpus for p in pods)
        if gpus:
            capacity = gpu_inventory(state).devices.full_count[live]
            demand = gpus
        else:
            capacity = state.resources.allocatable[live, CPU] - state.resources.requested[live, CPU]
            demand = sum(p.requests.get("cpu", 0) for p in pods)
        out: list[tuple[str, tuple[str, str]]] = []
        for key in (LABEL_NETWORK_BLOCK, LABEL_ZONE):
            codes = state.labels.codes(key)[live]
            ranked = []
            for code in np.unique(codes[codes > 0]):
                held = int(capacity[codes == code].sum())
                if held >= demand:
                    value = state.labels.value(key, int(code))
                    if value is not None:
                        ranked.append((held, value))
            if len(ranked) > 1 or (ranked and key == LABEL_ZONE):
                limit = self.engine._max_gang_domains
                out += [(f"{key}={value}", (key, value)) for _, value in sorted(ranked)[:limit]]
        return out


def _with(outcome: Outcome, **changes: Any) -> Outcome:
    fields = {name: getattr(outcome, name) for name in outcome.__dataclass_fields__}
    fields.update(changes)
    return Outcome(**fields)


def _rejected_nodes(decision: Decision) -> RejectedNodes:
    """The FitError histogram of an unplaced decision: each rejection group's nodes count once
    for each of its reasons (as ``berth.core.messages.fit_error`` counts them)."""
    reasons: dict[str, int] = {}
    for group in decision.rejections:
        for reason in group.reasons:
            reasons[reason] = reasons.get(reason, 0) + group.count
    return RejectedNodes(nodes=decision.nodes_total, reasons=reasons)


def _with_extra_scores(
    document: Mapping[str, Any], profile: str, present: set[str], extra: tuple[tuple[str, int], ...]
) -> dict[str, Any]:
    """A copy of the scheduler document whose ``profile`` also enables ``extra`` Score plugins
    (those it does not run already) with their weights, through ``multiPoint``. A document
    without ``profiles`` is returned unchanged: its implicit default profile runs no extra
    scores, as decisions recorded with such a document were made."""
    copy: dict[str, Any] = _deep_copy(document)
    for entry in copy.get("profiles") or [{"schedulerName": profile}]:
        if entry.get("schedulerName", profile) == profile:
            enabled = entry.setdefault("plugins", {}).setdefault("multiPoint", {}).setdefault("enabled", [])
            enabled += [{"name": name, "weight": weight} for name, weight in extra if name not in present]
    return copy


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _deep_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_copy(item) for item in value]
    return value


def _verdict(node: str, reason: str | None, scores: dict[str, int], total: int | None) -> NodeVerdict:
    """A NodeVerdict from the engine's own, already consistent figures (``scores`` keys sorted,
    as the model's validator would leave them), without validating them again: a decision
    builds one per scored or rejected node, and validation was a tenth of a pod's cost."""
    return NodeVerdict.model_construct(node=node, reason=reason, scores=scores, total=total)


def _attempt_result(outcome: Outcome) -> str:
    """kube's ``result`` label of a scheduling attempt."""
    if outcome.placed:
        return "scheduled"
    decision = outcome.decision
    return "error" if decision is not None and decision.status == "error" else "unschedulable"
