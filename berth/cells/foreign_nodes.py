"""The census of the other cells' nodes: a pinned pod's message counts every node of the cluster.

kube-scheduler's FitError (``0/N nodes are available: ...``) counts every node of the cluster. A
pod pinned to a cell (a node pool or ``berth.io/cell`` selector, a gang member, an AgentPool
replica) is decided against that cell's nodes only. The inventory therefore sends every cell the
node-level facts of the other cells' nodes (:class:`~berth.schemas.ForeignNodeObserved` /
:class:`~berth.schemas.ForeignNodeRemoved`: labels, taints, cordon); this fold keeps them in a
:class:`~berth.core.state.ClusterState` of their own, which the engine never sees.

When a pinned pod is unschedulable here, :func:`counting_foreign_nodes` restates its message over
the whole cluster: each foreign node counts under the first of kube's node-level Filters that
rejects the pod (NodeUnschedulable, TaintToleration, NodeAffinity, in the profile's order:
:func:`berth.core.node_level.node_level_rejections`); a foreign node none of them rejects (the
pod is pinned by Berth's rule, not by a label) counts as
:data:`~berth.core.messages.IN_ANOTHER_CELL`. All of these are UnschedulableAndUnresolvable, so
in the preemption part they count as ``Preemption is not helpful for scheduling``.

These inputs make no decision and change nothing the engine sees (no pod is retried for them);
the census only words the next unschedulable message.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from berth.core.engine import Engine, Outcome
from berth.core.messages import IN_ANOTHER_CELL, over_more_nodes, unresolvable_postfilter
from berth.core.node_level import NODE_LEVEL_FILTERS, node_level_rejections
from berth.core.state import ClusterState
from berth.schemas import ForeignNodeObserved, NodeInfo, PodInfo, RejectedNodes

from .queue import PendingPod

__all__ = ["MEMO_SIZE", "ForeignNodes", "counting_foreign_nodes", "forget", "observe", "rejections"]

MEMO_SIZE = 256
"""Pod shapes whose foreign-node histogram is kept for the current census."""


@dataclass
class ForeignNodes:
    state: ClusterState = field(default_factory=ClusterState)
    """The other cells' nodes, with their labels, taints and cordons only."""
    cell_of: dict[str, int] = field(default_factory=dict)
    """node → the cell it belongs to."""
    version: int = 0
    """Bumped on every change of the census."""
    memo: dict[str, RejectedNodes] = field(default_factory=dict)
    """pod shape → its histogram over the census at ``version``."""

    def __len__(self) -> int:
        return len(self.cell_of)


def observe(census: ForeignNodes, event: ForeignNodeObserved) -> None:
    census.state.upsert_node(
        NodeInfo(name=event.name, labels=event.labels, taints=event.taints, unschedulable=event.unschedulable)
    )
    census.cell_of[event.name] = event.cell
    _changed(census)


def forget(census: ForeignNodes, name: str) -> None:
    """``name`` is gone, or is this cell's own node now."""
    if census.cell_of.pop(name, None) is not None:
        census.state.remove_node(name)
        _changed(census)


def _changed(census: ForeignNodes) -> None:
    census.version += 1
    census.memo.clear()


def _shape(pod: PodInfo) -> str:
    """What the node-level filters read of a pod."""
    required = pod.affinity.node_affinity.required if pod.affinity and pod.affinity.node_affinity else None
    terms = ",".join(term.model_dump_json() for term in required) if required is not None else "-"
    return "|".join((pod.model_dump_json(include={"node_selector", "tolerations"}), terms))


def rejections(census: ForeignNodes, engine: Engine, pod: PodInfo) -> RejectedNodes:
    """Why each foreign node rejects ``pod`` (see the module docstring), memoised per pod shape
    until the census changes."""
    key = _shape(pod)
    known = census.memo.get(key)
    if known is not None:
        return known
    profile = engine.config.profile(engine.profile)
    filters = [name for name in profile.points.get("filter", ()) if name in NODE_LEVEL_FILTERS]
    added = getattr(profile.args.get("NodeAffinity"), "added_affinity", None)
    counts, passed = node_level_rejections(
        census.state,
        pod,
        filters,
        pre_filters=profile.points.get("preFilter", ()),
        added_affinity=added.required if added is not None else None,
    )
    if passed:
        counts[IN_ANOTHER_CELL] = counts.get(IN_ANOTHER_CELL, 0) + passed
    known = RejectedNodes(nodes=len(census), reasons=dict(sorted(counts.items())))
    if len(census.memo) >= MEMO_SIZE:
        census.memo.clear()
    census.memo[key] = known
    return known


def counting_foreign_nodes(census: ForeignNodes, engine: Engine, entry: PendingPod, outcome: Outcome) -> Outcome:
    """A pinned pod's unplaced outcome with its message over the cell's nodes and the census's
    (kube's FitError counts every node of the cluster); other outcomes as they are. A pod routed
    from cell to cell is not pinned: its last cell counts the cells tried instead
    (:func:`berth.cells.handovers.counting_cells_tried`)."""
    if entry.routed is not None or outcome.placed or not len(census):
        return outcome
    pod = entry.pod
    more = rejections(census, engine, pod)
    profile = engine.config.profile(engine.profile)
    empty = unresolvable_postfilter(
        profile.points.get("postFilter", ()), more.nodes, preemption_never=pod.preemption_policy == "Never"
    )
    message = over_more_nodes(outcome.message, more.nodes, more.reasons, postfilter_if_none=empty)
    if message == outcome.message:
        return outcome
    rejected = outcome.rejected.plus(more) if outcome.rejected is not None else None
    return replace(outcome, message=message, rejected=rejected)
