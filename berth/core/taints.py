"""Taint/toleration matching, as Kubernetes' ``Toleration.ToleratesTaint`` defines it.

A toleration tolerates a taint when its effect is empty or equal, its key is empty or equal, and
(operator ``Exists``) or (operator ``Equal`` and the values are equal). An empty key with
``Exists`` therefore tolerates every taint of the given effect (every taint, if effect is empty).
"""

from __future__ import annotations

from collections.abc import Iterable

from berth.schemas.cluster import Taint, Toleration

__all__ = ["HARD_EFFECTS", "UNSCHEDULABLE_TAINT", "tolerates", "tolerated_by_any"]

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
