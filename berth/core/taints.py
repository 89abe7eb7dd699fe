"""Taint/toleration matching, as Kubernetes' ``Toleration.ToleratesTaint`` defines it.

A toleration tolerates a taint when its effect is empty or equal, its key is empty or equal, and
(operator ``Exists``) or (operator ``Equal`` and the values are equal). An empty key with
``Exists`` therefore tolerates every taint of the given effect (every taint, if effect is empty).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from berth.core.state import ClusterState
from berth.schemas.cluster import Taint, Toleration

__all__ = [
    "HARD_EFFECTS",
    "UNSCHEDULABLE_TAINT",
    "tolerated_by_any",
    "tolerates",
    "untolerated_hard_taints",
    "untolerated_lookup",
]

HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""The effects the TaintToleration Filter enforces; PreferNoSchedule only scores."""

UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
"""The taint a cordoned node stands for (kube: ``v1.TaintNodeUnschedulable``)."""


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect is not None and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.value == taint.value


def tolerated_by_any(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """kube's ``TolerationsTolerateTaint``."""
    return any(tolerates(toleration, taint) for toleration in tolerations)


def untolerated_hard_taints(
    state: ClusterState, tolerations: Sequence[Toleration], nodes: npt.NDArray[np.intp]
) -> npt.NDArray[np.bool_]:
    """Per node of ``nodes``: has it a NoSchedule/NoExecute taint none of ``tolerations``
    tolerates? (kube's ``FindMatchingUntoleratedTaint`` with the DoNotSchedule filter.)"""
    if state.taints.hard_nodes == 0:
        return np.zeros(nodes.shape, dtype=bool)
    lookup = untolerated_lookup(state, tolerations, HARD_EFFECTS)
    tainted: npt.NDArray[np.bool_] = np.asarray(lookup[state.taints.table[nodes]].any(axis=1))
    return tainted


def untolerated_lookup(
    state: ClusterState, tolerations: Sequence[Toleration], effects: frozenset[str]
) -> npt.NDArray[np.bool_]:
    """Per distinct taint id of the state (plus a trailing False that the -1 padding of the
    taint table indexes): is it of one of ``effects`` and tolerated by none of
    ``tolerations``?"""
    flags = [t.effect in effects and not tolerated_by_any(tolerations, t) for t in state.taints.distinct]
    return np.array(flags + [False], dtype=bool)
