"""NodeName: a pod that names its node (``spec.nodeName``) fits only there (kube-scheduler's
plugin of the same name). In Berth's contract a pod with ``node_name`` is normally already bound;
the plugin matters for what-if evaluation of such pods (e.g. ``berth simulate`` of manifests that
pin a node)."""

from __future__ import annotations

from berth.core import messages
from berth.core.framework import CycleContext, FilterPlugin, FilterResult, NodeArray, Status

__all__ = ["NAME", "NodeName"]

NAME = "NodeName"

_REJECT = Status.unresolvable(messages.NODE_NAME_NOT_MATCH, plugin=NAME)


class NodeName(FilterPlugin):
    NAME = NAME

    def filter(self, cycle: CycleContext, nodes: NodeArray) -> FilterResult:
        wanted = cycle.pod.node_name
        if not wanted:
            return FilterResult.all_pass()
        slot = cycle.state.nodes.slot_of(wanted)
        return FilterResult.from_mask(nodes == (-1 if slot is None else slot), _REJECT)
