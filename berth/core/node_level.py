"""kube-scheduler's node-level filters, decided from a node's own facts over a whole state.

Three of kube's default Filters look at nothing but the pod and the node object: NodeUnschedulable
(``spec.unschedulable``, unless the pod tolerates ``node.kubernetes.io/unschedulable:NoSchedule``),
TaintToleration (a NoSchedule/NoExecute taint no toleration tolerates) and NodeAffinity
(``nodeSelector``, required node affinity, the profile's ``addedAffinity``). All three reject as
UnschedulableAndUnresolvable. Given a :class:`~berth.core.state.ClusterState` that holds only
such facts (labels, taints, cordons: no capacity, no pods), :func:`node_level_rejections` says
for every node which of them rejects the pod first, in the profile's Filter order, as kube stops
at a node's first failing Filter; before them, nodes outside the names a required node affinity
pins (NodeAffinity's PreFilter result) get kube's ``didn't satisfy plugin(s)`` reason.

Used by a decision cell to count the nodes of the other cells in a pinned pod's message
(:mod:`berth.cells.foreign_nodes`). The matching is the core's own (:mod:`.taints`,
:mod:`.node_selectors`); pure and vectorised over the state's node slots.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from berth.core import messages
from berth.core.node_selectors import match_node_selector_terms, match_required_node_affinity
from berth.core.plugins.node_affinity import _pinned_node_names as pinned_node_names
from berth.core.state import ClusterState
from berth.core.taints import UNSCHEDULABLE_TAINT, tolerated_by_any, untolerated_hard_taints
from berth.schemas.cluster import NodeSelectorTerm, PodInfo

__all__ = ["NODE_LEVEL_FILTERS", "node_level_rejections"]

NODE_UNSCHEDULABLE = "NodeUnschedulable"
TAINT_TOLERATION = "TaintToleration"
NODE_AFFINITY = "NodeAffinity"

NODE_LEVEL_FILTERS = (NODE_UNSCHEDULABLE, TAINT_TOLERATION, NODE_AFFINITY)
"""The Filters decided by node-level facts alone, in kube's default order."""


class _Histogram:
    """Nodes leave at their first rejection; each counts once, under that rejection's reason."""

    def __init__(self, size: int) -> None:
        self.undecided = np.ones(size, dtype=bool)
        self.counts: dict[str, int] = {}

    def reject(self, failed: npt.NDArray[np.bool_], reason: str) -> None:
        hit = failed & self.undecided
        count = int(hit.sum())
        if count:
            self.counts[reason] = self.counts.get(reason, 0) + count
            self.undecided &= ~hit


def node_level_rejections(
    state: ClusterState,
    pod: PodInfo,
    filters: Sequence[str],
    *,
    pre_filters: Sequence[str] = (NODE_AFFINITY,),
    added_affinity: Sequence[NodeSelectorTerm] | None = None,
) -> tuple[dict[str, int], int]:
    """``(reason → nodes, nodes passing)`` over every node of ``state``: the first rejection by
    the node-level Filters among ``filters`` (the profile's Filter plugins, in its order; others
    are ignored), after NodeAffinity's PreFilter restriction when it is among ``pre_filters``.
    ``added_affinity``: the required terms of NodeAffinity's ``addedAffinity`` argument."""
    nodes = state.nodes.order()
    histogram = _Histogram(nodes.size)
    required = pod.affinity.node_affinity.required if pod.affinity and pod.affinity.node_affinity else None
    if NODE_AFFINITY in pre_filters and required:
        names = pinned_node_names(required)
        if names:  # an empty set is a PreFilter rejection of the pod itself, worded by its cell
            slots = [slot for slot in (state.nodes.slot_of(name) for name in sorted(names)) if slot is not None]
            inside = np.isin(nodes, np.array(slots, dtype=np.intp))
            histogram.reject(~inside, messages.plugins_not_satisfied([NODE_AFFINITY]))
    for name in filters:
        if name == NODE_UNSCHEDULABLE:
            if not tolerated_by_any(pod.tolerations, UNSCHEDULABLE_TAINT):
                histogram.reject(state.unschedulable[nodes], messages.NODE_UNSCHEDULABLE)
        elif name == TAINT_TOLERATION:
            histogram.reject(untolerated_hard_taints(state, pod.tolerations, nodes), messages.UNTOLERATED_TAINT)
        elif name == NODE_AFFINITY:
            if added_affinity is not None:
                histogram.reject(
                    ~match_node_selector_terms(state, added_affinity, nodes), messages.NODE_AFFINITY_ENFORCED_NOT_MATCH
                )
            if pod.node_selector or required is not None:
                histogram.reject(
                    ~match_required_node_affinity(state, pod.node_selector, required, nodes),
                    messages.NODE_AFFINITY_NOT_MATCH,
                )
    return histogram.counts, int(histogram.undecided.sum())
