"""NodeUnschedulable: cordoned nodes (``spec.unschedulable``) take no new pods, unless the pod
tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint (kube-scheduler's plugin of
the same name)."""

from __future__ import annotations

from berth.core import messages
from berth.core.framework import CycleContext, FilterPlugin, FilterResult, NodeArray, Status
from berth.core.taints import UNSCHEDULABLE_TAINT, tolerated_by_any

__all__ = ["NAME", "NodeUnschedulable"]

NAME = "NodeUnschedulable"

_REJECT = Status.unresolvable(messages.NODE_UNSCHEDULABLE, plugin=NAME)


class NodeUnschedulable(FilterPlugin):
    NAME = NAME

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        state = cycle.state
        if state.unschedulable_nodes == 0:
            return FilterResult.all_pass()
        if tolerated_by_any(cycle.pod.tolerations, UNSCHEDULABLE_TAINT):
            return FilterResult.all_pass()
        return FilterResult.from_mask(~state.unschedulable[nodes], _REJECT)
