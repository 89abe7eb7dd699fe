"""Descheduling: which running pods to evict so that the cluster gets strictly better.

:func:`plan_evictions` runs a :class:`~berth.schemas.descheduler.DeschedulingPolicy`'s strategies
over an :class:`~berth.core.engine.Engine` and returns the evictions they would make:

- ``RemovePodsViolatingNodeAffinity``: the pod's ``nodeSelector`` / required node affinity no
  longer matches its node (the NodeAffinity plugin's Filter, run on that node);
- ``RemovePodsViolatingNodeTaints``: its node has a ``NoSchedule`` taint (``PreferNoSchedule``
  too with ``includePreferNoSchedule``) the pod does not tolerate, ``excludedTaints`` /
  ``includedTaints`` applied as the descheduler applies them (``key`` or ``key=value``);
- ``RemovePodsViolatingInterPodAntiAffinity``: the InterPodAffinity plugin's Filter rejects the
  pod on its own node (its required anti-affinity matches a pod there, or theirs matches it);
- ``LowNodeUtilization``: requests as percents of allocatable (``nvidia.com/gpu``: GPU milli used
  of the node's devices, shares included); a node is underutilized when every threshold resource
  it has is below ``thresholds``, overutilized when any is above ``targetThresholds``; pods leave
  overutilized nodes, lowest priority first, until the node is not overutilized any more;
- ``GpuDefragmentation`` (Berth's own): for each pending pod that asks for whole GPUs and fits
  nowhere, the node where moving the fewest small GPU pods (shares, or at most ``maxPodGpus``
  whole GPUs, never of a priority above the pending pod's) makes it fit; with ``nodesToFree``,
  GPU nodes whose every pod can move elsewhere are emptied for a scale-down. Objective: pending
  GPU pods placed, whole GPUs freed (fewer stranded GPU milli, see :func:`gpu_fragments`).

The no-loop rule holds for every strategy: a candidate is evicted only when the engine — the same
:meth:`Engine.schedule` that places pods, without preemption, on the state without the pod —
places it on a node other than its own that passes every filter and, for LowNodeUtilization,
stays below ``targetThresholds`` (the source gets better, the target does not become a source).
Nothing is displaced: the moved pod is assumed on its target, so later candidates see it. A pod
whose workload (its controller, else the pod) was evicted less than ``cooldown`` ago is left
alone. PodDisruptionBudgets (disruptions allowed now, counted down as evictions are planned),
the DefaultEvictor rules, and the per-node / per-namespace / total limits are respected.

The engine is changed: on return it holds the planned state (each evicted pod assumed on its
target, each pending pod that GPU defragmentation made room for assumed on its node). Give it
a throwaway engine. Pure: no clock (``now`` is an argument), no I/O, deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from berth.core.config import parse_config
from berth.core.engine import Engine
from berth.core.placed_pods import PlacedPod
from berth.core.plugins.gpu_extension import gpu_inventory
from berth.core.preemption import disruptions_allowed, selector_matches
from berth.core.scheduler import Framework
from berth.core.taints import tolerated_by_any
from berth.schemas.cluster import PodInfo, Taint
from berth.schemas.descheduler import (
    ANTI_AFFINITY,
    GPU_DEFRAGMENTATION,
    LOW_NODE_UTILIZATION,
    NODE_AFFINITY,
    NODE_TAINTS,
    DeschedulingPolicy,
    StrategyConfig,
)
from berth.schemas.policy import PodDisruptionBudgetInfo, PriorityClassInfo

__all__ = [
    "DEFAULT_COOLDOWN",
    "Eviction",
    "Plan",
    "PodFacts",
    "gpu_fragments",
    "plan_evictions",
    "selects_node",
    "workload_of",
]

DEFAULT_COOLDOWN = timedelta(hours=1)
"""How long a workload evicted once is left alone."""

SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
"""kube's ``SystemCriticalPriority``: system-cluster-critical and system-node-critical start here."""
SYSTEM_CRITICAL_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
GPU = "nvidia.com/gpu"

REFUSED_COOLDOWN = "cooldown"
REFUSED_NO_TARGET = "no-better-node"
"""The two refusals counted as loops prevented: evicting would have put the pod back (or on a
node no better), or its workload was just moved."""
LOOP_REASONS = frozenset({REFUSED_COOLDOWN, REFUSED_NO_TARGET})


@dataclass(frozen=True)
class PodFacts:
    """What an eviction decision needs to know of a pod beyond its PodInfo (from its manifest or
    live object): whether it has local storage (``emptyDir``/``hostPath``) or a PVC."""

    local_storage: bool = False
    pvc: bool = False


@dataclass(frozen=True)
class Eviction:
    """One planned eviction: ``pod`` leaves ``node``; the engine would place it on ``target_node``."""

    pod: PodInfo
    node: str
    strategy: str
    reason: str
    target_node: str
    profile: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod.key,
            "node": self.node,
            "strategy": self.strategy,
            "reason": self.reason,
            "target_node": self.target_node,
        }


@dataclass
class Plan:
    """The evictions planned, in order, and the candidates refused (strategy → why → count)."""

    evictions: list[Eviction] = field(default_factory=list)
    refused: dict[str, Counter[str]] = field(default_factory=dict)
    pending_placed: list[tuple[str, str]] = field(default_factory=list)
    """GPU defragmentation: (pending pod, node) for each pending pod given room."""
    nodes_freed: list[str] = field(default_factory=list)

    def refuse(self, strategy: str, why: str) -> None:
        self.refused.setdefault(strategy, Counter())[why] += 1

    def loops_prevented(self) -> dict[str, int]:
        """Per strategy: candidates not evicted because the move would not have improved the
        cluster or their workload is cooling down."""
        out = {
            name: sum(n for why, n in counts.items() if why in LOOP_REASONS) for name, counts in self.refused.items()
        }
        return {name: count for name, count in sorted(out.items()) if count}

    def evictions_by_strategy(self) -> dict[str, int]:
        return dict(sorted(Counter(e.strategy for e in self.evictions).items()))


def workload_of(pod: PodInfo) -> str:
    """The key a cooldown is kept under: the pod's controller (a recreated pod has a new name
    but the same controller), else the pod itself."""
    if pod.owner is not None:
        return f"{pod.namespace}/{pod.owner.kind}/{pod.owner.name}"
    return f"{pod.namespace}/Pod/{pod.name}"


def gpu_fragments(engine: Engine) -> tuple[int, int]:
    """(whole free GPUs, stranded GPU milli): idle GPU milli on devices partly in use is stranded
    for any pod that needs a whole device."""
    inventory = gpu_inventory(engine.state)
    live = engine.state.nodes.order()
    free = int(inventory.devices.node_free[live].sum())
    whole = int(inventory.devices.full_count[live].sum())
    return whole, free - 1000 * whole


def _single_plugin_framework(plugin: str) -> Framework:
    """A profile running only ``plugin``: its PreFilter and Filter, exactly as placement runs them."""
    document = {
        "apiVersion": "berth.io/v1alpha1",
        "kind": "BerthSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "descheduler-check",
                "plugins": {"multiPoint": {"disabled": [{"name": "*"}], "enabled": [{"name": plugin}]}},
            }
        ],
    }
    return Framework(parse_config(document), "descheduler-check")


class _Planner:
    """What every strategy shares: who may be evicted (the DefaultEvictor rules, the policy's
    node scope), what an eviction may not break (limits, disruption budgets, the cooldown), and
    the moves themselves (:meth:`try_move`, :meth:`record`), counted against those as they are
    planned. :meth:`run` hands each strategy of the policy, in order, to its own class."""

    def __init__(
        self,
        engine: Engine,
        policy: DeschedulingPolicy,
        *,
        pending: Sequence[PodInfo],
        facts: Mapping[str, PodFacts],
        recent_evictions: Mapping[str, datetime],
        now: datetime | None,
        cooldown: timedelta,
    ) -> None:
        self.engine = engine
        self.state = engine.state
        self.policy = policy
        self.pending = list(pending)
        self.facts = facts
        self.recent = recent_evictions
        self.now = now
        self.cooldown = cooldown
        self.plan = Plan()
        self.per_node: Counter[str] = Counter()
        self.per_namespace: Counter[str] = Counter()
        self.moved: set[str] = set()
        self.pdbs: list[PodDisruptionBudgetInfo] = [
            obj
            for _, _, obj in self.state.policies.of_kind("PodDisruptionBudget")
            if isinstance(obj, PodDisruptionBudgetInfo)
        ]
        self.budget = disruptions_allowed(self.pdbs, [p.pod for p in self.state.pods])
        self.classes = {
            obj.name: obj.value
            for _, _, obj in self.state.policies.of_kind("PriorityClass")
            if isinstance(obj, PriorityClassInfo)
        }
        self.node_selector = _parse_node_selector(policy.node_selector)

    # -- who may be evicted ---------------------------------------------------------------------

    def _node_in_scope(self, node: str) -> bool:
        if not self.node_selector:
            return True
        info = self.state.nodes.get(node)
        return _labels_match(info.labels if info is not None else {}, self.node_selector)

    def _threshold(self, strategy: StrategyConfig) -> int | None:
        threshold = strategy.evictor.priority_threshold
        if threshold is None:
            return None
        if threshold.value is not None:
            return threshold.value
        return self.classes.get(threshold.name or "", SYSTEM_CRITICAL_PRIORITY)

    def not_evictable(self, pod: PodInfo, strategy: StrategyConfig) -> str | None:
        """Why the DefaultEvictor (and Berth) would not evict ``pod``, or None."""
        rules = strategy.evictor
        if pod.phase in ("Succeeded", "Failed"):
            return "finished"
        if MIRROR_ANNOTATION in pod.annotations:
            return "mirror pod"
        if pod.owner is None:
            return "no controller (a bare pod would not come back)"
        if pod.owner.kind == "DaemonSet" and not rules.evict_daemon_set_pods:
            return "DaemonSet pod"
        if pod.pod_group:
            return "member of a PodGroup (moved one by one it would break its gang)"
        critical = pod.priority >= SYSTEM_CRITICAL_PRIORITY or pod.priority_class_name in SYSTEM_CRITICAL_CLASSES
        if critical and not rules.evict_system_critical_pods:
            return "system-critical"
        threshold = self._threshold(strategy)
        if threshold is not None and pod.priority >= threshold and not rules.evict_system_critical_pods:
            return "priority at or above the threshold"
        facts = self.facts.get(pod.uid, PodFacts())
        if facts.local_storage and not rules.evict_local_storage_pods:
            return "local storage"
        if facts.pvc and rules.ignore_pvc_pods:
            return "uses a PVC"
        if rules.label_selector is not None and not selector_matches(rules.label_selector, pod.labels):
            return "not selected by the evictor's labelSelector"
        if strategy.namespaces is not None and not strategy.namespaces.admits(pod.namespace):
            return "namespace not evictable"
        if strategy.label_selector is not None and not selector_matches(strategy.label_selector, pod.labels):
            return "not selected by the strategy's labelSelector"
        if pod.uid in self.moved:
            return "already moved in this plan"
        return None

    def blocked(self, pod: PodInfo, node: str) -> str | None:
        """Why evicting ``pod`` now would break a limit, a budget or the cooldown, or None."""
        policy = self.policy
        last = self.recent.get(workload_of(pod))
        if last is not None and self.now is not None and self.now - last < self.cooldown:
            return REFUSED_COOLDOWN
        if policy.max_pods_to_evict_total is not None and len(self.plan.evictions) >= policy.max_pods_to_evict_total:
            return "limit-total"
        if policy.max_pods_to_evict_per_node is not None and self.per_node[node] >= policy.max_pods_to_evict_per_node:
            return "limit-node"
        if (
            policy.max_pods_to_evict_per_namespace is not None
            and self.per_namespace[pod.namespace] >= policy.max_pods_to_evict_per_namespace
        ):
            return "limit-namespace"
        for pdb in self.pdbs:
            if _pdb_selects(pdb, pod) and self.budget.get((pdb.namespace, pdb.name), 0) <= 0:
                return "pdb"
        return None

    def candidates(self, node: str, strategy: StrategyConfig) -> list[PodInfo]:
        """Pods on ``node`` the strategy may consider, lowest priority first, then by name."""
        pods = [self.bound(placed) for placed in self.state.pods.on_node(node)]
        return sorted(
            (pod for pod in pods if self.not_evictable(pod, strategy) is None), key=lambda p: (p.priority, p.key)
        )

    @staticmethod
    def bound(placed: PlacedPod) -> PodInfo:
        # Where the pod holds its room, also when only assumed (then its PodInfo names no node).
        return placed.pod.model_copy(update={"node_name": placed.node_name, "gpu_devices": placed.gpu_devices})

    # -- the one move primitive -----------------------------------------------------------------

    def try_move(self, pod: PodInfo, strategy: StrategyConfig, reason: str, accept: Any = None) -> str | None:
        """Evict ``pod`` if the engine places it elsewhere (and ``accept(target)`` holds): the
        eviction is recorded and the pod assumed on its target. Returns the target, or None
        (state as before, the refusal counted)."""
        node = pod.node_name or ""
        why = self.blocked(pod, node)
        if why is not None:
            self.plan.refuse(strategy.name, why)
            return None
        target = self._place_elsewhere(pod, accept)
        if target is None:
            self.plan.refuse(strategy.name, REFUSED_NO_TARGET)
            return None
        self.record(pod, node, target, strategy, reason)
        return target

    def _place_elsewhere(self, pod: PodInfo, accept: Any = None) -> str | None:
        node = pod.node_name or ""
        self.engine.remove_pod(pod.uid)
        outcome = self.engine.schedule(pod.model_copy(update={"node_name": None, "gpu_devices": ()}), preempt=False)
        target = outcome.placements[0].node if outcome.placed else None
        if target is not None and target != node and (accept is None or accept(target)):
            return target
        if target is not None:
            self.engine.remove_pod(pod.uid)
        self.engine.upsert_bound_pod(pod)
        return None

    def record(self, pod: PodInfo, node: str, target: str, strategy: StrategyConfig, reason: str) -> None:
        self.plan.evictions.append(Eviction(pod, node, strategy.name, reason, target, strategy.profile))
        self.per_node[node] += 1
        self.per_namespace[pod.namespace] += 1
        self.moved.add(pod.uid)
        for pdb in self.pdbs:
            if _pdb_selects(pdb, pod):
                key = (pdb.namespace, pdb.name)
                self.budget[key] = self.budget.get(key, 0) - 1

    def nodes(self) -> list[str]:
        return [name for name in sorted(self.state.nodes.names()) if self._node_in_scope(name)]

    def run(self) -> Plan:
        violations = _Violations(self)
        low_node_utilization = _LowNodeUtilization(self)
        gpu_defragmentation = _GpuDefragmentation(self)
        for strategy in self.policy.strategies:
            if strategy.name == LOW_NODE_UTILIZATION:
                low_node_utilization.run(strategy)
            elif strategy.name == GPU_DEFRAGMENTATION:
                gpu_defragmentation.run(strategy)
            else:
                violations.run(strategy)
        return self.plan


class _Violations:
    """RemovePodsViolatingNodeAffinity, RemovePodsViolatingNodeTaints and
    RemovePodsViolatingInterPodAntiAffinity: each pod its node no longer admits is moved."""

    def __init__(self, planner: _Planner) -> None:
        self.planner = planner
        self.engine = planner.engine
        self.state = planner.state
        self._checks: dict[str, Framework] = {}

    def _check(self, plugin: str) -> Framework:
        framework = self._checks.get(plugin)
        if framework is None:
            framework = self._checks[plugin] = _single_plugin_framework(plugin)
        return framework

    def run(self, strategy: StrategyConfig) -> None:
        for node in self.planner.nodes():
            for pod in self.planner.candidates(node, strategy):
                reason = self._violation(pod, node, strategy)
                if reason is not None:
                    self.planner.try_move(pod, strategy, reason)

    def _violation(self, pod: PodInfo, node: str, strategy: StrategyConfig) -> str | None:
        if strategy.name == NODE_TAINTS:
            taint = self._untolerated_taint(pod, node, strategy)
            return None if taint is None else f"node {node} has taint {_taint_text(taint)} the pod does not tolerate"
        plugin = "NodeAffinity" if strategy.name == NODE_AFFINITY else "InterPodAffinity"
        if strategy.name == NODE_AFFINITY and not (pod.node_selector or _has_required_node_affinity(pod)):
            return None
        if strategy.name == ANTI_AFFINITY and not self.state.pods.any_with_required_anti_affinity:
            return None
        self.engine.remove_pod(pod.uid)
        try:
            feasibility = self._check(plugin).find_feasible(pod, self.state, [node])
        finally:
            self.engine.upsert_bound_pod(pod)
        if feasibility.feasible.size:
            return None
        statuses = feasibility.diagnosis.statuses
        detail = statuses[0].message if statuses else ""
        if feasibility.diagnosis.prefilter_status is not None:
            detail = feasibility.diagnosis.prefilter_status.message
        what = "node affinity" if strategy.name == NODE_AFFINITY else "inter-pod anti-affinity"
        return f"violates {what} on node {node}" + (f": {detail}" if detail else "")

    def _untolerated_taint(self, pod: PodInfo, node: str, strategy: StrategyConfig) -> Taint | None:
        info = self.state.nodes.get(node)
        if info is None:
            return None
        effects = {"NoSchedule", "PreferNoSchedule"} if strategy.include_prefer_no_schedule else {"NoSchedule"}
        for taint in info.taints:
            if taint.effect not in effects:
                continue
            if _taint_listed(taint, strategy.excluded_taints):
                continue
            if strategy.included_taints and not _taint_listed(taint, strategy.included_taints):
                continue
            if not tolerated_by_any(pod.tolerations, taint):
                return taint
        return None


class _LowNodeUtilization:
    """LowNodeUtilization: pods leave overutilized nodes for nodes that stay below the targets."""

    def __init__(self, planner: _Planner) -> None:
        self.planner = planner
        self.engine = planner.engine
        self.state = planner.state

    def run(self, strategy: StrategyConfig) -> None:
        nodes = self.planner.nodes()
        usage = {node: self._usage(node, strategy.thresholds) for node in nodes}
        under = [n for n in nodes if _all_below(usage[n], strategy.thresholds)]
        over = [n for n in nodes if _any_above(usage[n], strategy.target_thresholds)]
        if not under or len(under) <= strategy.number_of_nodes or not over:
            return

        def stays_below_targets(target: str) -> bool:
            return not _any_above(self._usage(target, strategy.target_thresholds), strategy.target_thresholds)

        # Busiest first, as the descheduler sorts its sources.
        over.sort(key=lambda n: (-sum(usage[n].values()), n))
        for node in over:
            for pod in self.planner.candidates(node, strategy):
                current = self._usage(node, strategy.target_thresholds)
                if not _any_above(current, strategy.target_thresholds):
                    break
                hot = ", ".join(
                    f"{r} {current[r]:.0f}% > {strategy.target_thresholds[r]:g}%"
                    for r in sorted(current)
                    if current[r] > strategy.target_thresholds[r]
                )
                self.planner.try_move(pod, strategy, f"node {node} is overutilized ({hot})", stays_below_targets)

    def _usage(self, node: str, resources: Iterable[str]) -> dict[str, float]:
        """Percent of allocatable requested, per resource the node has."""
        slot = self.state.nodes.slot_of(node)
        if slot is None:
            return {}
        slots = np.array([slot], dtype=np.intp)
        out: dict[str, float] = {}
        for resource in resources:
            if resource == GPU:
                inventory = gpu_inventory(self.state)
                total = int(inventory.devices.total_milli()[slot])
                used = int(inventory.devices.used_milli()[slot])
            else:
                column = self.state.resources.column(resource)
                if column is None:
                    continue
                total = int(self.state.resources.allocatable_of(column, slots)[0])
                used = int(self.state.resources.requested_of(column, slots)[0])
            if total > 0:
                out[resource] = 100.0 * used / total
        return out


class _GpuDefragmentation:
    """GpuDefragmentation: small GPU pods moved, all or none, to give a pending whole-GPU pod a
    node, or to empty a GPU node for a scale-down."""

    def __init__(self, planner: _Planner) -> None:
        self.planner = planner
        self.engine = planner.engine
        self.state = planner.state
        self.placement = Framework(self.engine.config, self.engine.profile)
        """The engine's own profile, for "would the pod fit on this node" questions."""

    def run(self, strategy: StrategyConfig) -> None:
        waiting = sorted(
            (p for p in self.planner.pending if p.whole_gpus > 0), key=lambda p: (-p.priority, p.creation_time, p.key)
        )
        for pending in waiting:
            if self.engine.probe([pending]):
                continue  # it fits as things are: nothing to free for it
            self._make_room(pending, strategy)
        for _ in range(strategy.gpu.nodes_to_free):
            if not self._free_a_node(strategy):
                break

    def _movable(self, node: str, strategy: StrategyConfig, below: int | None) -> list[PodInfo]:
        """Small GPU pods on ``node`` that may be moved (for a pending pod of priority ``below``:
        only pods of a priority not above it), smallest GPU footprint first."""
        out = []
        for pod in self.planner.candidates(node, strategy):
            small = pod.gpu_fraction_milli is not None or (0 < pod.whole_gpus <= strategy.gpu.max_pod_gpus)
            if not small or (below is not None and pod.priority > below):
                continue
            if self.planner.blocked(pod, node) is not None:
                continue
            out.append(pod)
        return sorted(out, key=lambda p: (_gpu_milli(p), p.priority, p.key))

    def _whole_gpus_if_moved(self, node: str, movable: Sequence[PodInfo]) -> int:
        """How many whole devices ``node`` would have free with ``movable`` gone (an upper bound
        of what the filters would find: CPU, memory and GPU models are theirs to check)."""
        slot = self.state.nodes.slot_of(node)
        if slot is None:
            return 0
        inventory = gpu_inventory(self.state)
        freed: Counter[int] = Counter()
        for pod in movable:
            placed = self.state.pods.get(pod.uid)
            if placed is None:
                continue
            share = placed.gpu_milli or pod.gpu_fraction_milli or 1000
            for device in placed.gpu_devices:
                freed[device] += share
        whole = 0
        for column in range(inventory.devices.width):
            device = int(inventory.devices.dev_index[slot, column])
            if device < 0 or not inventory.devices.usable[slot, column]:
                continue
            whole += int(inventory.devices.free_milli[slot, column]) + freed[device] >= 1000
        return whole

    def _fits_without(self, pending: PodInfo, node: str, removed: Sequence[PodInfo]) -> bool:
        for pod in removed:
            self.engine.remove_pod(pod.uid)
        try:
            return bool(self.placement.find_feasible(pending, self.state, [node]).feasible.size)
        finally:
            for pod in removed:
                self.engine.upsert_bound_pod(pod)

    def _fewest_to_move(self, pending: PodInfo, node: str, movable: list[PodInfo]) -> list[PodInfo] | None:
        """The pods to move off ``node`` for ``pending`` to fit there: start from all of them
        and keep each back on the node (smallest first) while the pending pod still fits."""
        if not movable or not self._fits_without(pending, node, movable):
            return None
        moving = list(movable)
        for pod in movable:
            trial = [p for p in moving if p.uid != pod.uid]
            if self._fits_without(pending, node, trial):
                moving = trial
        return moving

    def _make_room(self, pending: PodInfo, strategy: StrategyConfig) -> None:
        options = []
        for node in self.planner.nodes():
            if not (info := self.state.nodes.get(node)) or len(info.gpus) < pending.whole_gpus:
                continue
            movable = self._movable(node, strategy, pending.priority)
            if self._whole_gpus_if_moved(node, movable) < pending.whole_gpus:
                continue  # not enough devices even with every movable pod gone: skip the filter runs
            moving = self._fewest_to_move(pending, node, movable)
            if moving is not None and len(moving) <= strategy.gpu.max_moves_per_pod:
                options.append((len(moving), sum(_gpu_milli(p) for p in moving), node, moving))
        for _, _, node, moving in sorted(options, key=lambda o: o[:3]):
            if self._move_all(moving, node, strategy, pending):
                return
        self.planner.plan.refuse(strategy.name, "moved-pods-fit-nowhere" if options else "no-room-to-make")

    def _move_all(
        self, moving: Sequence[PodInfo], node: str, strategy: StrategyConfig, pending: PodInfo | None
    ) -> bool:
        """Move every pod of ``moving`` off its devices on ``node`` (after ``pending`` is assumed
        there), all or none: each must be placed by the engine without preemption on another
        node, or, when making room for a pending pod, on other devices of the same node (a
        share packed next to another share frees a whole device just as well)."""
        for pod in moving:
            self.engine.remove_pod(pod.uid)
        placed_pending = False
        if pending is not None:
            outcome = self.engine.schedule(pending, preempt=False)
            placed_pending = outcome.placed
            if not outcome.placed or outcome.placements[0].node != node:
                return self._roll_back(moving, [], pending if placed_pending else None)
        targets: list[tuple[PodInfo, str]] = []
        for pod in moving:
            outcome = self.engine.schedule(pod.model_copy(update={"node_name": None, "gpu_devices": ()}), preempt=False)
            if not outcome.placed:
                return self._roll_back(moving, targets, pending)
            placement = outcome.placements[0]
            targets.append((pod, placement.node))
            if placement.node == node and (pending is None or placement.gpu_devices == pod.gpu_devices):
                return self._roll_back(moving, targets, pending)
        if pending is not None:
            reason = f"makes room on node {node} for pending pod {pending.key} ({pending.whole_gpus} whole GPU(s))"
            self.planner.plan.pending_placed.append((pending.key, node))
        else:
            reason = f"empties GPU node {node} so that a scale-down can remove it"
            self.planner.plan.nodes_freed.append(node)
        for pod, target in targets:
            self.planner.record(pod, node, target, strategy, reason)
        return True

    def _roll_back(
        self, moving: Sequence[PodInfo], targets: Sequence[tuple[PodInfo, str]], pending: PodInfo | None
    ) -> bool:
        for pod, _ in targets:
            self.engine.remove_pod(pod.uid)
        if pending is not None:
            self.engine.remove_pod(pending.uid)
        for pod in moving:
            self.engine.upsert_bound_pod(pod)
        return False

    def _free_a_node(self, strategy: StrategyConfig) -> bool:
        options = []
        for node in self.planner.nodes():
            info = self.state.nodes.get(node)
            if info is None or not info.gpus or node in self.planner.plan.nodes_freed:
                continue
            pods = [self.planner.bound(p) for p in self.state.pods.on_node(node)]
            if not pods:
                continue
            movable = self._movable(node, strategy, None)
            if len(movable) != len(pods) or len(pods) > strategy.gpu.max_moves_per_pod:
                continue
            options.append((len(pods), sum(_gpu_milli(p) for p in pods), node, movable))
        for _, _, node, movable in sorted(options, key=lambda o: o[:3]):
            if self._move_all(movable, node, strategy, None):
                return True
        return False


def plan_evictions(
    engine: Engine,
    policy: DeschedulingPolicy,
    *,
    pending: Sequence[PodInfo] = (),
    facts: Mapping[str, PodFacts] | None = None,
    recent_evictions: Mapping[str, datetime] | None = None,
    now: datetime | None = None,
    cooldown: timedelta = DEFAULT_COOLDOWN,
) -> Plan:
    """The evictions ``policy`` makes on ``engine``'s cluster (see the module docstring).

    ``pending``: pods waiting for a node (GPU defragmentation makes room for those that ask for
    whole GPUs and fit nowhere). ``facts``: per pod UID, what its PodInfo does not say.
    ``recent_evictions``: per :func:`workload_of` key, when it was last evicted; with ``now``,
    workloads evicted less than ``cooldown`` ago are not evicted again. ``engine`` ends in the
    planned state."""
    planner = _Planner(
        engine,
        policy,
        pending=pending,
        facts=facts or {},
        recent_evictions=recent_evictions or {},
        now=now,
        cooldown=cooldown,
    )
    return planner.run()


# --- helpers -------------------------------------------------------------------------------------


def _pdb_selects(pdb: PodDisruptionBudgetInfo, pod: PodInfo) -> bool:
    # policy/v1: an empty selector selects no pod.
    if pdb.namespace != pod.namespace or not (pdb.selector.match_labels or pdb.selector.match_expressions):
        return False
    return selector_matches(pdb.selector, pod.labels)


def _has_required_node_affinity(pod: PodInfo) -> bool:
    affinity = pod.affinity
    return affinity is not None and affinity.node_affinity is not None and affinity.node_affinity.required is not None


def _taint_listed(taint: Taint, listed: Sequence[str]) -> bool:
    """The descheduler's form: ``key`` matches any value, ``key=value`` that value only."""
    for entry in listed:
        key, sep, value = entry.partition("=")
        if key == taint.key and (not sep or value == taint.value):
            return True
    return False


def _taint_text(taint: Taint) -> str:
    return f"{taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}"


def _gpu_milli(pod: PodInfo) -> int:
    return pod.whole_gpus * 1000 + (pod.gpu_fraction_milli or 0)


def _all_below(usage: Mapping[str, float], limits: Mapping[str, float]) -> bool:
    counted = [r for r in limits if r in usage]
    return bool(counted) and all(usage[r] < limits[r] for r in counted)


def _any_above(usage: Mapping[str, float], limits: Mapping[str, float]) -> bool:
    return any(usage[r] > limits[r] for r in limits if r in usage)


def selects_node(node_selector: str | None, labels: Mapping[str, str]) -> bool:
    """Whether a policy's ``nodeSelector`` (a label selector string) selects a node with ``labels``."""
    return _labels_match(labels, _parse_node_selector(node_selector))


def _parse_node_selector(text: str | None) -> list[tuple[str, str, str]]:
    """The policy's ``nodeSelector``, a label selector string: comma-separated ``key=value``,
    ``key==value``, ``key!=value``, ``key`` (exists) and ``!key`` (does not exist) terms, as
    (key, operator, value)."""
    terms: list[tuple[str, str, str]] = []
    for raw in (text or "").split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            key, _, value = term.partition("!=")
            terms.append((key.strip(), "!=", value.strip()))
        elif "=" in term:
            key, _, value = term.partition("=")
            terms.append((key.strip(), "=", value.lstrip("=").strip()))
        elif term.startswith("!"):
            terms.append((term[1:].strip(), "!", ""))
        else:
            terms.append((term, "exists", ""))
    return terms


def _labels_match(labels: Mapping[str, str], terms: Sequence[tuple[str, str, str]]) -> bool:
    for key, operator, value in terms:
        if operator == "=" and labels.get(key) != value:
            return False
        if operator == "!=" and labels.get(key) == value:
            return False
        if operator == "exists" and key not in labels:
            return False
        if operator == "!" and key in labels:
            return False
    return True
