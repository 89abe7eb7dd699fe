"""The census of the other cells' nodes: a pinned pod's unschedulable message counts every node of
the cluster, as kube-scheduler's does (berth.cells.foreign_nodes, berth.core.node_level).

The reference is the same cluster decided by one cell: kube-scheduler's view, one cache over every
node. The nodes go through the inventory's node stage, so the census is the one it sends."""

from __future__ import annotations

from typing import Any

import pytest
from berth.schemas import (
    Affinity,
    ForeignNodeObserved,
    HandOverPod,
    InputPosition,
    NodeAffinity,
    NodeInfo,
    NodeObserved,
    NodeRemoved,
    PodGroupInfo,
    PodInfo,
    PodObserved,
    PolicyObserved,
)
from berth.schemas.cells import CELL_LABEL, NODE_POOL_LABEL, stable_hash
from berth.schemas.samples import T0
from berth.services.inventory.fold import NodeInput, ToCell, fold_node_input, fold_pod_input, route_policy

from berth.cells import Cell, CellConfig
from berth.cells.foreign_nodes import ForeignNodes, observe, rejections
from berth.core import messages
from berth.core.config import default_document
from berth.core.engine import Engine
from berth.core.node_level import NODE_LEVEL_FILTERS, node_level_rejections
from tests.unit.core.builders import expr, node, pod, taint, term, toleration

POOL = {NODE_POOL_LABEL: "gpu"}


class Cluster:
    """The inventory's pod and node stages and ``cells`` cells, in process; every decision kept,
    hand-overs acted on at once."""

    def __init__(self, cells: int) -> None:
        self.count = cells
        self.cells = [Cell(c, CellConfig()) for c in range(cells)]
        self.offsets = [0] * cells
        self.routes: dict[str, Any] = {}
        self.node_states: dict[str, Any] = {}
        self.decisions: list[Any] = []

    def _cell(self, cell: int, event: Any) -> None:
        position = InputPosition(topic="berth.scheduler.inputs.v1", partition=cell, offset=self.offsets[cell])
        self.offsets[cell] += 1
        decisions = self.cells[cell].handle(event, position)
        self.decisions += decisions
        for command in (c for d in decisions for c in d.commands if isinstance(c, HandOverPod)):
            folded = fold_pod_input(self.routes.get(command.pod_uid), command, self.count)
            self.routes[command.pod_uid] = folded.state
            self._send(folded.outputs)

    def _send(self, outputs: Any) -> None:
        for output in outputs:
            if isinstance(output, ToCell):
                self._cell(output.cell, output.event)

    def node(self, info: NodeInfo, *, removed: bool = False) -> None:
        event = NodeRemoved(name=info.name, observed_at=T0) if removed else NodeObserved(node=info, observed_at=T0)
        folded = fold_node_input(self.node_states.get(info.name), NodeInput.of(event), self.count)
        self.node_states[info.name] = folded.state
        self._send(folded.outputs)

    def pod(self, info: PodInfo) -> None:
        folded = fold_pod_input(self.routes.get(info.uid), PodObserved(pod=info, observed_at=T0), self.count)
        self.routes[info.uid] = folded.state
        self._send(folded.outputs)

    def gang(self, name: str, min_member: int) -> None:
        self._send(
            route_policy(
                PolicyObserved(
                    kind="PodGroup",
                    observed_at=T0,
                    pod_group=PodGroupInfo(namespace="default", name=name, min_member=min_member),
                ),
                self.count,
            )
        )

    def message(self, subject: str) -> str:
        """The latest unschedulable message about ``subject``."""
        return [
            d.record.message
            for d in self.decisions
            if d.record.subject == subject and d.record.outcome == "unschedulable"
        ][-1]


def pool_cell(cells: int) -> int:
    return stable_hash("pool/gpu") % cells


def in_cell(cell: int) -> dict[str, str]:
    return {CELL_LABEL: str(cell)}


def build(cells: int, others: list[NodeInfo]) -> Cluster:
    cluster = Cluster(cells)
    for index in range(2):
        cluster.node(node(f"gpu-{index}", cpu=1000, labels=POOL))
    for info in others:
        cluster.node(info)
    return cluster


def spread(cells: int) -> list[NodeInfo]:
    """A plain, a tainted and a cordoned node, in the cells other than the pool's (round robin)."""
    elsewhere = [c for c in range(cells) if c != pool_cell(cells)]
    return [
        node("cpu-plain", labels=in_cell(elsewhere[0])),
        node("cpu-tainted", labels=in_cell(elsewhere[1 % len(elsewhere)]), taints=[taint("dedicated")]),
        node("cpu-cordoned", labels=in_cell(elsewhere[2 % len(elsewhere)]), unschedulable=True),
    ]


TOO_BIG_FOR_THE_POOL = (
    "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
    "1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, 2 Insufficient cpu. "
    "no new claims to deallocate, preemption: 0/5 nodes are available: "
    "5 Preemption is not helpful for scheduling."
)


@pytest.mark.parametrize("cells", [2, 3])
def test_a_pool_pod_with_no_room_counts_every_node_of_the_cluster_as_one_cell_would(cells):
    big = pod("big", cpu=4000, node_selector=POOL)
    split, whole = build(cells, spread(cells)), build(1, spread(cells))
    split.pod(big)
    whole.pod(big)
    assert split.message("default/big") == whole.message("default/big") == TOO_BIG_FOR_THE_POOL
    # Each cell was told of the nodes of the others only.
    census = split.cells[pool_cell(cells)].ctx.foreign
    assert sorted(census.cell_of) == ["cpu-cordoned", "cpu-plain", "cpu-tainted"]
    assert all(not set(c.ctx.foreign.cell_of) & set(c.nodes.nodes) for c in split.cells)


def test_foreign_nodes_count_under_their_first_failing_node_level_filter_as_kube_orders_them():
    others = [
        node("cordoned-and-tainted", labels=in_cell(1 - pool_cell(2)), taints=[taint("dedicated")], unschedulable=True),
        node(
            "tainted-in-the-pool-label",
            labels={**in_cell(1 - pool_cell(2)), NODE_POOL_LABEL: "gpu"},
            taints=[taint("dedicated")],
        ),
    ]
    tolerant = pod("tolerant", cpu=4000, node_selector=POOL, tolerations=(toleration("dedicated", "Exists"),))
    split, whole = build(2, others), build(1, others)
    for cluster in (split, whole):
        cluster.pod(pod("big", cpu=4000, node_selector=POOL))
        cluster.pod(tolerant)
    assert (
        split.message("default/big")
        == whole.message("default/big")
        == (
            "0/4 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, "
            "2 Insufficient cpu. no new claims to deallocate, preemption: 0/4 nodes are available: "
            "4 Preemption is not helpful for scheduling."
        )
    )
    # Tolerating the taint, the pod meets the next filter on the cordoned node and none on the other
    # (it carries the pool's label though its cell label keeps it out of the pool's cell): kube would
    # have tried it there, Berth did not.
    assert split.message("default/tolerant") == (
        "0/4 nodes are available: 1 node(s) were in another scheduling cell, 1 node(s) were unschedulable, "
        "2 Insufficient cpu. no new claims to deallocate, preemption: 0/4 nodes are available: "
        "4 Preemption is not helpful for scheduling."
    )


def test_a_gang_member_pinned_by_its_group_counts_nodes_it_could_pass_in_berths_words():
    cluster = build(2, spread(2))
    group_cell = stable_hash("group/default/train") % 2
    cluster.gang("train", 2)
    for index in range(2):
        cluster.pod(pod(f"train-{index}", cpu=8000, pod_group="train"))
    message = cluster.message("default/train")
    assert message.startswith("0/5 nodes are available: ")
    counted = messages.parse_fit_error(message)
    assert counted is not None and sum(counted.reasons.values()) == 5
    # Every node the member would pass elsewhere (no selector: the plain node, the pool's nodes when
    # they are in the other cell) counts as in another cell; the tainted and cordoned keep kube's.
    foreign = cluster.cells[group_cell].ctx.foreign
    passing = {"cpu-plain", "gpu-0", "gpu-1"} & set(foreign.cell_of)
    assert counted.reasons.get(messages.IN_ANOTHER_CELL, 0) == len(passing)
    assert counted.postfilter_message.endswith("0/5 nodes are available: 5 Preemption is not helpful for scheduling.")


def test_the_census_follows_cordons_removals_and_nodes_moving_into_the_cell():
    cluster = build(2, spread(2))
    home = pool_cell(2)
    cluster.pod(pod("big", cpu=4000, node_selector=POOL))
    assert cluster.message("default/big") == TOO_BIG_FOR_THE_POOL
    census = cluster.cells[home].ctx.foreign
    # The plain node is cordoned: the census changes, and the pod's next try says so.
    cluster.node(node("cpu-plain", labels=in_cell(1 - home), unschedulable=True))
    assert census.state.nodes.get("cpu-plain").unschedulable
    cluster.node(node("gpu-2", cpu=1000, labels=POOL))  # a change of the pool's cell: the pod is tried again
    assert cluster.message("default/big") == (
        "0/6 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) were unschedulable, 3 Insufficient "
        "cpu. no new claims to deallocate, preemption: 0/6 nodes are available: 6 Preemption is not helpful for "
        "scheduling."
    )
    # The tainted node goes; the cordoned one moves into the pod's cell (counted once, as its own).
    cluster.node(node("cpu-tainted"), removed=True)
    cluster.node(node("cpu-cordoned", labels=in_cell(home), unschedulable=True))
    assert sorted(census.cell_of) == ["cpu-plain"]
    assert "cpu-cordoned" in cluster.cells[home].nodes.nodes
    assert "cpu-cordoned" in cluster.cells[1 - home].ctx.foreign.cell_of
    cluster.node(node("gpu-3", cpu=1000, labels=POOL))
    assert cluster.message("default/big").startswith(
        "0/6 nodes are available: 2 node(s) were unschedulable, 4 Insufficient cpu."
    )


def test_a_status_only_change_of_a_foreign_node_sends_no_census():
    cluster = build(2, spread(2))
    before = list(cluster.offsets)
    home = pool_cell(2)
    plain = node("cpu-plain", labels=in_cell(1 - home)).model_copy(update={"allocatable": {"cpu": 1}})
    cluster.node(plain)
    assert cluster.offsets[home] == before[home]  # its own cell was told; the others not
    assert cluster.offsets[1 - home] == before[1 - home] + 1


def test_a_pod_that_never_preempts_keeps_its_preemption_wording():
    cluster = build(2, spread(2))
    cluster.pod(pod("never", cpu=4000, node_selector=POOL, preemption_policy="Never"))
    assert cluster.message("default/never") == (
        "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated "
        "taint(s), 1 node(s) were unschedulable, 2 Insufficient cpu. no new claims to deallocate, preemption: not "
        "eligible due to preemptionPolicy=Never."
    )


def test_a_cell_without_nodes_speaks_for_the_others():
    cluster = Cluster(2)
    home = pool_cell(2)
    for info in spread(2):
        cluster.node(info)
    cluster.pod(pod("lost", node_selector=POOL))
    assert not cluster.cells[home].nodes.nodes
    assert cluster.message("default/lost") == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated "
        "taint(s), 1 node(s) were unschedulable. no new claims to deallocate, preemption: 0/3 nodes are "
        "available: 3 Preemption is not helpful for scheduling."
    )


def test_a_pod_handed_from_cell_to_cell_is_counted_by_its_round_preemption_part_included():
    split, whole = build(2, spread(2)), build(1, spread(2))
    for cluster in (split, whole):
        cluster.pod(pod("free", cpu=64000))
    assert [d.record.outcome for d in split.decisions if d.record.subject == "default/free"] == [
        "handed-over",
        "unschedulable",
    ]
    # The first cell found no node to free: what its preemption said of its nodes is carried on
    # (RejectedNodes.preemption), and the last cell's preemption part counts them too.
    assert (
        split.message("default/free")
        == whole.message("default/free")
        == (
            "0/5 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, "
            "3 Insufficient cpu. no new claims to deallocate, preemption: 0/5 nodes are available: "
            "5 Preemption is not helpful for scheduling."
        )
    )


# --- the node-level filters alone --------------------------------------------------------------


def census_of(*infos: NodeInfo) -> ForeignNodes:
    census = ForeignNodes()
    for info in infos:
        observe(
            census,
            ForeignNodeObserved(
                name=info.name,
                cell=1,
                labels=info.labels,
                taints=info.taints,
                unschedulable=info.unschedulable,
                observed_at=T0,
            ),
        )
    return census


def test_node_level_rejections_follow_the_profiles_filter_order_and_name_pins():
    nodes = census_of(
        node("a", labels={"zone": "x"}, taints=[taint("t")], unschedulable=True),
        node("b", labels={"zone": "y"}, taints=[taint("t")]),
        node("c", labels={"zone": "y"}),
    )
    picky = pod("p", node_selector={"zone": "x"})
    assert node_level_rejections(nodes.state, picky, NODE_LEVEL_FILTERS) == (
        {messages.NODE_UNSCHEDULABLE: 1, messages.UNTOLERATED_TAINT: 1, messages.NODE_AFFINITY_NOT_MATCH: 1},
        0,
    )
    reordered = ("NodeAffinity", "TaintToleration", "NodeUnschedulable")
    assert node_level_rejections(nodes.state, picky, reordered) == (
        {messages.NODE_AFFINITY_NOT_MATCH: 2, messages.UNTOLERATED_TAINT: 1},
        0,
    )
    pinned = pod(
        "q",
        affinity=Affinity(
            node_affinity=NodeAffinity(required=(term(fields=[expr("metadata.name", "In", "c", "elsewhere")]),))
        ),
    )
    assert node_level_rejections(nodes.state, pinned, NODE_LEVEL_FILTERS) == (
        {messages.plugins_not_satisfied(["NodeAffinity"]): 2},
        1,
    )
    enforced = (term(expr("zone", "In", "y")),)
    assert node_level_rejections(nodes.state, pod("r"), ("NodeAffinity",), added_affinity=enforced) == (
        {messages.NODE_AFFINITY_ENFORCED_NOT_MATCH: 1},
        2,
    )


def test_the_census_histogram_is_memoised_per_pod_shape_until_the_census_changes():
    census = census_of(node("a", labels={"zone": "x"}))
    engine = Engine(default_document())
    first = rejections(census, engine, pod("p1", node_selector={"zone": "y"}))
    assert rejections(census, engine, pod("p2", node_selector={"zone": "y"})) is first
    assert rejections(census, engine, pod("p3")).reasons == {messages.IN_ANOTHER_CELL: 1}
    observe(census, ForeignNodeObserved(name="b", cell=1, observed_at=T0))
    assert rejections(census, engine, pod("p1", node_selector={"zone": "y"})).nodes == 2
