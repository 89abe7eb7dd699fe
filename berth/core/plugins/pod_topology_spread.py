"""PodTopologySpread (kube-scheduler's plugin of the same name).

For each of the pod's ``topologySpreadConstraints`` the *domains* are the values of the
constraint's topology key on the eligible nodes: nodes that carry every topology key of the pod's
constraints (of that kind) and pass the constraint's inclusion policies —
``nodeAffinityPolicy: Honor`` (default) keeps only nodes matching the pod's nodeSelector and
required node affinity, ``nodeTaintsPolicy: Honor`` only nodes whose NoSchedule/NoExecute taints
the pod tolerates (default Ignore). A domain's count is the number of placed pods in the pod's
namespace matching the constraint's selector on its eligible nodes (an empty or missing selector
counts nothing; ``matchLabelKeys`` add the pod's own values to the selector).

Filter (``DoNotSchedule``), constraints in order, first failure wins:
- the node lacks the topology key → "... (missing required label)" (UnschedulableAndUnresolvable);
- ``count(node's domain) + (1 if the pod matches the selector) - global minimum > maxSkew`` →
  "node(s) didn't match pod topology spread constraints" (Unschedulable). The global minimum is
  the smallest count over the domains, or 0 while there are fewer domains than ``minDomains``.

Score (``ScheduleAnyway``): feasible nodes lacking a key are ignored (score 0); for the others
``Σ count(domain) × log(domains + 2) + (maxSkew - 1)`` (for ``kubernetes.io/hostname``, the pods on
the node and the number of scored nodes), rounded, then inverted by min-max so that emptier
domains score higher (all equal → 100).

System default constraints (kube's hostname/zone spreading for pods of Services and ReplicaSets)
need workload selectors Berth's contract does not carry; they are not applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core import messages
from berth.core.framework import (
    MAX_NODE_SCORE,
    CycleContext,
    FilterPlugin,
    FilterResult,
    NodeArray,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
    Status,
)
from berth.core.labels import CompiledSelector, Requirement, compile_selector
from berth.core.node_selectors import match_required_node_affinity
from berth.core.state import ClusterState
from berth.core.taints import untolerated_hard_taints
from berth.schemas.cluster import PodInfo, TopologySpreadConstraint

__all__ = ["HOSTNAME_KEY", "NAME", "PodTopologySpread", "SpreadConstraint"]

NAME = "PodTopologySpread"
HOSTNAME_KEY = "kubernetes.io/hostname"
_MAX_INT32 = 2**31 - 1


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """kube's internal ``topologySpreadConstraint``: the selector compiled and merged."""

    max_skew: int
    topology_key: str
    selector: CompiledSelector
    min_domains: int
    honor_node_affinity: bool
    honor_node_taints: bool


def _constraints(pod: PodInfo, action: str) -> tuple[SpreadConstraint, ...]:
    result = []
    for c in pod.topology_spread_constraints:
        if c.when_unsatisfiable != action:
            continue
        result.append(_compile(pod, c))
    return tuple(result)


def _compile(pod: PodInfo, c: TopologySpreadConstraint) -> SpreadConstraint:
    selector = compile_selector(c.label_selector)
    if c.match_label_keys and not selector.nothing:
        selector = selector.with_requirements(
            Requirement(key, "In", frozenset((pod.labels[key],))) for key in c.match_label_keys if key in pod.labels
        )
    return SpreadConstraint(
        max_skew=c.max_skew,
        topology_key=c.topology_key,
        selector=selector,
        min_domains=c.min_domains if c.min_domains is not None else 1,
        honor_node_affinity=c.node_affinity_policy == "Honor",
        honor_node_taints=c.node_taints_policy == "Honor",
    )


def _pods_per_slot(state: ClusterState, pod: PodInfo, constraint: SpreadConstraint) -> npt.NDArray[np.int64]:
    """kube's ``countPodsMatchSelector`` for every node at once: placed pods of the pod's
    namespace matching the selector, per node slot (an empty selector counts nothing)."""
    counts = np.zeros(state.capacity, dtype=np.int64)
    if constraint.selector.is_empty or constraint.selector.nothing:
        return counts
    slots = [state.nodes.slot_of(p.node_name) for p in state.pods.matching((pod.namespace,), constraint.selector)]
    known = [s for s in slots if s is not None]
    if known:
        counts += np.bincount(np.asarray(known, dtype=np.intp), minlength=state.capacity)
    return counts


def _eligible(
    state: ClusterState,
    pod: PodInfo,
    constraints: tuple[SpreadConstraint, ...],
    constraint: SpreadConstraint,
    nodes: NodeArray,
) -> npt.NDArray[np.bool_]:
    """Nodes that count for ``constraint``: every constraint's key present, inclusion policies."""
    mask = np.ones(nodes.size, dtype=bool)
    for c in constraints:
        mask &= state.labels.codes(c.topology_key)[nodes] != 0
    if constraint.honor_node_affinity:
        affinity = pod.affinity.node_affinity if pod.affinity else None
        mask &= match_required_node_affinity(state, pod.node_selector, affinity.required if affinity else None, nodes)
    if constraint.honor_node_taints:
        mask &= ~untolerated_hard_taints(state, pod.tolerations, nodes)
    return mask


@dataclass(frozen=True, slots=True)
class _Domains:
    """Per label code of one constraint's key: matching pods, whether it is a domain."""

    counts: npt.NDArray[np.int64]
    present: npt.NDArray[np.bool_]

    @property
    def number(self) -> int:
        return int(self.present.sum())

    def minimum(self) -> int:
        return int(self.counts[self.present].min()) if self.present.any() else _MAX_INT32


def _domains(state: ClusterState, key: str, eligible_nodes: NodeArray, per_slot: npt.NDArray[np.int64]) -> _Domains:
    codes = state.labels.codes(key)[eligible_nodes]
    size = state.labels.domain_count(key)
    counts = np.bincount(codes, weights=per_slot[eligible_nodes], minlength=size).astype(np.int64)
    present = np.bincount(codes, minlength=size) > 0
    present[0] = False  # code 0: key absent (never eligible, kept out for safety)
    return _Domains(counts, present)


@dataclass(frozen=True, slots=True)
class _FilterState:
    constraints: tuple[SpreadConstraint, ...]
    domains: tuple[_Domains, ...]
    self_match: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class _ScoreState:
    constraints: tuple[SpreadConstraint, ...]
    ignored: npt.NDArray[np.bool_]
    """Aligned with the feasible nodes: lacks some constraint key (scores 0)."""
    domain_counts: tuple[npt.NDArray[np.int64] | None, ...]
    """Per constraint: counts per label code (None for hostname: per node, computed in Score)."""
    per_slot: tuple[npt.NDArray[np.int64], ...]
    weights: tuple[float, ...]


class PodTopologySpread(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    NAME = NAME

    def pre_filter(self, cycle: CycleContext) -> tuple[Status, PreFilterResult | None]:
        pod, state = cycle.pod, cycle.state
        constraints = _constraints(pod, "DoNotSchedule")
        if not constraints:
            return Status.skip(), None
        all_nodes = state.nodes.order()
        domains = []
        for c in constraints:
            per_slot = _pods_per_slot(state, pod, c)
            eligible = all_nodes[_eligible(state, pod, constraints, c, all_nodes)]
            domains.append(_domains(state, c.topology_key, eligible, per_slot))
        cycle.data[NAME] = _FilterState(
            constraints, tuple(domains), tuple(c.selector.matches(pod.labels) for c in constraints)
        )
        return Status.success(), None

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        data: _FilterState | None = cycle.data.get(NAME)
        if data is None:
            return FilterResult.all_pass()
        state = cycle.state
        codes = np.full(nodes.size, -1, dtype=np.int32)
        for c, domains, self_match in zip(data.constraints, data.domains, data.self_match, strict=True):
            open_ = codes < 0
            node_codes = state.labels.codes(c.topology_key)[nodes]
            missing = node_codes == 0
            codes[open_ & missing] = 0
            # Fewer domains than minDomains: the global minimum counts as 0.
            minimum = 0 if domains.number < c.min_domains else domains.minimum()
            skew = domains.counts[node_codes] + int(self_match) - minimum
            codes[open_ & ~missing & (skew > c.max_skew)] = 1
        if (codes < 0).all():
            return FilterResult.all_pass()
        return FilterResult.from_codes(
            codes,
            (
                Status.unresolvable(messages.TOPOLOGY_SPREAD_MISSING_LABEL, plugin=NAME),
                Status.unschedulable(messages.TOPOLOGY_SPREAD_NOT_MATCH, plugin=NAME),
            ),
        )

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        pod, state = cycle.pod, cycle.state
        constraints = _constraints(pod, "ScheduleAnyway")
        if not constraints or len(state.nodes) == 0:
            return Status.skip()
        ignored = np.zeros(nodes.size, dtype=bool)
        for c in constraints:
            ignored |= state.labels.codes(c.topology_key)[nodes] == 0
        scored = nodes[~ignored]
        all_nodes = state.nodes.order()
        domain_counts: list[npt.NDArray[np.int64] | None] = []
        per_slots, weights = [], []
        for c in constraints:
            per_slot = _pods_per_slot(state, pod, c)
            per_slots.append(per_slot)
            if c.topology_key == HOSTNAME_KEY:
                domain_counts.append(None)
                weights.append(math.log(scored.size + 2))
                continue
            # Domains are the values on the scored nodes; counts come from every eligible node.
            wanted = np.zeros(state.labels.domain_count(c.topology_key), dtype=bool)
            wanted[state.labels.codes(c.topology_key)[scored]] = True
            eligible = all_nodes[_eligible(state, pod, constraints, c, all_nodes)]
            counts = _domains(state, c.topology_key, eligible, per_slot).counts
            domain_counts.append(np.where(wanted, counts, 0))
            weights.append(math.log(int(wanted.sum()) + 2))
        cycle.data[NAME + "/score"] = _ScoreState(
            constraints, ignored, tuple(domain_counts), tuple(per_slots), tuple(weights)
        )
        return Status.success()

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        data: _ScoreState = cycle.data[NAME + "/score"]
        state = cycle.state
        total = np.zeros(nodes.size, dtype=np.float64)
        for c, counts, per_slot, weight in zip(
            data.constraints, data.domain_counts, data.per_slot, data.weights, strict=True
        ):
            node_codes = state.labels.codes(c.topology_key)[nodes]
            count = per_slot[nodes] if counts is None else counts[node_codes]
            total += np.where(node_codes != 0, count * weight + (c.max_skew - 1), 0.0)
        # math.Round: half away from zero (scores are never negative here).
        rounded = np.floor(total + 0.5).astype(np.int64)
        return np.where(data.ignored, 0, rounded)

    def normalize_score(
        self, cycle: CycleContext, nodes: NodeArray, scores: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        data: _ScoreState = cycle.data[NAME + "/score"]
        counted = scores[~data.ignored]
        if counted.size == 0:
            return np.zeros(scores.shape, dtype=np.int64)
        low, high = int(counted.min()), max(int(counted.max()), 0)
        if high == 0:
            normalized = np.full(scores.shape, MAX_NODE_SCORE, dtype=np.int64)
        else:
            normalized = MAX_NODE_SCORE * (high + low - scores) // high
        return np.where(data.ignored, 0, normalized)
