"""Preemption as kube-scheduler's DefaultPreemption does it, made deterministic.

When a pod fits nowhere, look for nodes where evicting pods of *lower* priority would make it fit,
pick the evictions that hurt least, and nominate one node. The rules (kube-scheduler's, see
``pkg/scheduler/framework/plugins/defaultpreemption`` and ``framework/preemption``):

1. A pod with ``preemptionPolicy: Never`` never preempts.
2. Only nodes whose failure could be fixed by removing pods are candidates (a taint or a node
   selector does not go away by evicting anybody).
3. On a node, every pod of strictly lower priority is a potential victim; if the pod does not fit
   even with all of them gone, the node is out. Otherwise victims are *reprieved* one by one, most
   important first, first those whose eviction would violate a PodDisruptionBudget, then the
   others: a reprieved pod stays if the preemptor still fits with it. What is left are the
   victims — a minimal set in this order, not necessarily the global minimum.
4. Among candidate nodes, pick: fewest PDB violations; lowest highest-victim priority; lowest sum
   of victim priorities; fewest victims; latest start of the highest-priority victims; and then
   — where kube takes the first of a randomly rotated list — the node name, so the choice is
   reproducible.

"More important" is kube's ``MoreImportantPod``: higher priority, then earlier start (here the
creation time, since the contract has no start time), then ``namespace/name`` for a total order.

This module is pure and framework-agnostic: the caller supplies ``fits(removed)``, which answers
"does the preemptor fit on this node if these pods were gone?" against its own state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from berth.schemas.cluster import LabelSelector, PodInfo
from berth.schemas.policy import PodDisruptionBudgetInfo

__all__ = [
    "Candidate",
    "disruptions_allowed",
    "importance_key",
    "pick_candidate",
    "selector_matches",
    "select_victims",
]


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics; an empty selector matches everything."""
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for expr in selector.match_expressions:
        present = expr.key in labels
        if expr.operator == "In" and (not present or labels[expr.key] not in expr.values):
            return False
        if expr.operator == "NotIn" and present and labels[expr.key] in expr.values:
            return False
        if expr.operator == "Exists" and not present:
            return False
        if expr.operator == "DoesNotExist" and present:
            return False
    return True


def _pdb_selects(pdb: PodDisruptionBudgetInfo, pod: PodInfo) -> bool:
    # A PDB with an empty selector selects nothing (policy/v1), unlike a plain label selector.
    if pdb.namespace != pod.namespace or not (pdb.selector.match_labels or pdb.selector.match_expressions):
        return False
    return selector_matches(pdb.selector, pod.labels)


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(int(value.rstrip("%")) * total / 100)


def disruptions_allowed(pdbs: Iterable[PodDisruptionBudgetInfo], pods: Iterable[PodInfo]) -> dict[tuple[str, str], int]:
    """``status.disruptionsAllowed`` as the disruption controller computes it from live pods.

    Healthy = bound and Running; expected = every bound, non-terminal pod the budget selects
    (Berth has no controller scale to consult). Percentages round up. A budget with neither
    ``minAvailable`` nor ``maxUnavailable`` allows every disruption.
    """
    live = [p for p in pods if p.node_name and p.phase not in ("Succeeded", "Failed")]
    out: dict[tuple[str, str], int] = {}
    for pdb in sorted(pdbs, key=lambda b: (b.namespace, b.name)):
        selected = [p for p in live if _pdb_selects(pdb, p)]
        expected = len(selected)
        healthy = sum(1 for p in selected if p.phase == "Running")
        if pdb.min_available is not None:
            desired = _scaled(pdb.min_available, expected)
        elif pdb.max_unavailable is not None:
            desired = expected - _scaled(pdb.max_unavailable, expected)
        else:
            desired = 0
        out[(pdb.namespace, pdb.name)] = max(0, healthy - desired)
    return out


def importance_key(pod: PodInfo) -> tuple[int, float, str]:
    """Sort key: most important first (higher priority, then older, then by name)."""
    return (-pod.priority, pod.creation_time.timestamp(), pod.key)


@dataclass(frozen=True)
class Candidate:
    """A node where the preemptor fits once ``victims`` (most important first) are evicted."""

    node: str
    victims: tuple[PodInfo, ...]
    pdb_violations: int


def _split_by_pdb(
    victims: Sequence[PodInfo], pdbs: Sequence[PodDisruptionBudgetInfo], allowed: Mapping[tuple[str, str], int]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """(violating, non-violating), order kept: evicting the violating ones would take a budget
    below zero, counting down each budget as its pods are (hypothetically) evicted in order."""
    budget = {key: allowed.get(key, 0) for key in ((b.namespace, b.name) for b in pdbs)}
    violating: list[PodInfo] = []
    fine: list[PodInfo] = []
    for pod in victims:
        broken = False
        for pdb in pdbs:
            if _pdb_selects(pdb, pod):
                key = (pdb.namespace, pdb.name)
                budget[key] -= 1
                if budget[key] < 0:
                    broken = True
        (violating if broken else fine).append(pod)
    return violating, fine


def select_victims(
    preemptor: PodInfo,
    node: str,
    pods_on_node: Sequence[PodInfo],
    fits: Callable[[frozenset[str]], bool],
    pdbs: Sequence[PodDisruptionBudgetInfo] = (),
    allowed: Mapping[tuple[str, str], int] | None = None,
) -> Candidate | None:
    """The victims to evict on ``node`` (kube's ``SelectVictimsOnNode``), or None.

    ``fits(removed_uids)`` must answer for the preemptor on this node with those pods removed; it
    is called once with every potential victim removed, then once per potential victim. None
    means: no pod of lower priority, or the preemptor does not fit even without all of them.
    """
    potential = sorted((p for p in pods_on_node if p.priority < preemptor.priority), key=importance_key)
    if not potential:
        return None
    removed = {p.uid for p in potential}
    if not fits(frozenset(removed)):
        return None
    violating, fine = _split_by_pdb(potential, pdbs, allowed or {})
    victims: list[PodInfo] = []
    violations = 0
    for group, counts in ((violating, True), (fine, False)):
        for pod in group:
            removed.discard(pod.uid)
            if not fits(frozenset(removed)):
                removed.add(pod.uid)
                victims.append(pod)
                violations += counts
    victims.sort(key=importance_key)
    return Candidate(node=node, victims=tuple(victims), pdb_violations=violations)


def pick_candidate(candidates: Sequence[Candidate]) -> Candidate | None:
    """kube's ``pickOneNodeForPreemption`` with the node name as the final tie-breaker."""
    if not candidates:
        return None

    def rank(c: Candidate) -> tuple[int, int, int, int, float, str]:
        top = c.victims[0].priority
        # kube prefers the node whose highest-priority victims started latest (they lose the
        # least work); ties then fall to the node name instead of kube's random rotation.
        earliest_top = min(v.creation_time.timestamp() for v in c.victims if v.priority == top)
        offset = 2**31  # kube shifts priorities to be non-negative before summing
        return (
            c.pdb_violations,
            top,
            sum(v.priority + offset for v in c.victims),
            len(c.victims),
            -earliest_top,
            c.node,
        )

    return min(candidates, key=rank)
