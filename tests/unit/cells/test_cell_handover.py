"""Hand-overs between cells: a pod that may go to any cell leaves a cell that has no room for it."""

from __future__ import annotations

from datetime import timedelta

from berth.schemas import CellTick, HandOverPod, PlacePods, PodDeleted, PodObserved, PodRouted
from berth.schemas.samples import T0

from berth.cells import Cell, CellConfig
from berth.cells.handovers import HANDOVER_RETRY_TICKS

from .fake_engine import FakeEngine
from .test_cell import Feed, node, placements, pod

CELLS = 2


def routed(event: PodObserved, *, tried=(0,), hop=0, started=T0, at=None) -> PodRouted:
    return PodRouted(
        pod=event.pod, tried=tried, cells=CELLS, hop=hop, round_started_at=started, observed_at=at or event.observed_at
    )


def hand_overs(decisions):
    return [c for d in decisions for c in d.commands if isinstance(c, HandOverPod)]


def test_a_pod_with_untried_cells_is_handed_over_and_its_echoes_are_ignored():
    engine = FakeEngine()
    feed = Feed(Cell(0, CellConfig(), engine=engine))
    feed(node("gpu-a", gpus=1))
    feed(routed(pod("first")))
    out = feed(routed(pod("second"), hop=3))
    [decision] = out
    assert decision.record.outcome == "handed-over" and "Insufficient" in decision.record.message
    [command] = decision.commands
    assert isinstance(command, HandOverPod)
    assert (command.cell, command.pod_uid, command.hop, command.decision_id) == (
        0,
        "uid-second",
        3,
        decision.record.decision_id,
    )
    assert feed.cell.pending_count == 1  # only "first", in flight; "second" is gone from here
    # An update the inventory routed here before it acted on the hand-over: not queued again.
    calls = len(engine.calls)
    assert feed(pod("second", seconds=1)) == [] and feed.cell.pending_count == 1
    # Taken away: nothing of it was here, so nothing is retried because of it.
    assert feed(PodDeleted(uid="uid-second", namespace="ml", name="second", observed_at=T0)) == []
    assert len(engine.calls) == calls


def test_the_last_cell_of_a_round_reports_and_keeps_the_pod_then_starts_a_new_round():
    feed = Feed(Cell(1, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-b", gpus=1))
    feed(pod("holder"))
    [verdict] = feed(routed(pod("late"), tried=(0, 1), hop=1))
    assert verdict.record.outcome == "unschedulable" and not verdict.commands
    assert feed.cell.unschedulable_count == 1
    # A change in the cell soon after: tried again here, same verdict, not repeated.
    assert feed(node("gpu-b", gpus=1).model_copy(update={"observed_at": T0 + timedelta(seconds=5)})) == []
    # Resting through the ticks: capacity may be free elsewhere, so it goes round again.
    for tick in range(1, HANDOVER_RETRY_TICKS):
        assert feed(CellTick(issued_at=T0 + timedelta(seconds=30 * tick))) == []
    later = T0 + timedelta(seconds=30 * HANDOVER_RETRY_TICKS)
    out = feed(CellTick(issued_at=later))
    [command] = hand_overs(out)
    assert command.hop == 1 and command.issued_at == later and feed.cell.unschedulable_count == 0


def test_ticks_do_not_move_pinned_pods_or_pods_with_untried_cells():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-a", gpus=1))
    feed(pod("holder"))
    feed(pod("pinned"))  # a plain observation: pinned to this cell
    for tick in range(3 * HANDOVER_RETRY_TICKS):
        assert feed(CellTick(issued_at=T0 + timedelta(seconds=30 * tick))) == []
    assert feed.cell.unschedulable_count == 1


def test_a_pod_routed_back_in_a_later_round_is_tried_at_once():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-a", gpus=1))
    feed(routed(pod("first")))
    feed(routed(pod("second")))
    feed(PodDeleted(uid="uid-second", namespace="ml", name="second", observed_at=T0))
    feed(PodDeleted(uid="uid-first", namespace="ml", name="first", observed_at=T0))  # room again
    out = feed(routed(pod("second"), tried=(1, 0), hop=2, at=T0 + timedelta(seconds=9)))
    assert placements(out) == [("second", "gpu-a")]


def test_pinned_pods_are_never_handed_over():
    feed = Feed(Cell(0, CellConfig(), engine=FakeEngine()))
    feed(node("gpu-a", gpus=1))
    feed(pod("first"))
    [verdict] = feed(pod("second"))
    assert verdict.record.outcome == "unschedulable" and hand_overs([verdict]) == []


def _core_pod(name: str, gpus: int, priority: int) -> PodObserved:
    event = pod(name, gpus=gpus, priority=priority)
    tolerant = event.pod.model_validate(
        {**event.pod.model_dump(), "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    )
    return event.model_copy(update={"pod": tolerant})


def test_a_cell_with_untried_cells_hands_over_instead_of_preempting():
    """kube-scheduler preempts only when no node of the cluster fits; a cell cannot know that
    while other cells are untried, so only the last cell of a round may preempt."""
    from berth.schemas import NodeObserved, PolicyObserved, PriorityClassInfo
    from berth.schemas.samples import h100_node

    def cell_with_low_priority_pod():
        feed = Feed(Cell(0, CellConfig()))
        feed(NodeObserved(node=h100_node("gpu-a"), observed_at=T0))
        feed(
            PolicyObserved(
                kind="PriorityClass", observed_at=T0, priority_class=PriorityClassInfo(name="high", value=1000)
            )
        )
        [placed] = feed(_core_pod("low", 8, 0))
        [command] = placed.commands
        low = _core_pod("low", 8, 0).pod.model_copy(
            update={"node_name": "gpu-a", "gpu_devices": command.placements[0].gpu_devices}
        )
        feed(PodObserved(pod=low, observed_at=T0))
        return feed

    feed = cell_with_low_priority_pod()
    [handed] = feed(routed(_core_pod("high", 8, 1000), tried=(0,)))
    assert handed.record.outcome == "handed-over" and hand_overs([handed])
    feed = cell_with_low_priority_pod()
    [preempting] = feed(routed(_core_pod("high", 8, 1000), tried=(1, 0), hop=1))
    [command] = preempting.commands
    assert isinstance(command, PlacePods) and command.victims == ("ml/low",)


def test_the_last_cell_counts_the_nodes_of_every_cell_of_the_round_in_its_message():
    from berth.schemas import NodeObserved
    from berth.schemas.samples import h100_node

    def cell(number: int, nodes: int) -> Feed:
        feed = Feed(Cell(number, CellConfig()))
        for index in range(nodes):
            feed(NodeObserved(node=h100_node(f"gpu-{number}-{index}"), observed_at=T0))
        return feed

    first, last = cell(0, 2), cell(1, 3)
    too_big = _core_pod("too-big", 16, 0)
    [handed] = first(routed(too_big, tried=(0,)))
    [command] = hand_overs([handed])
    assert handed.record.message.startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    assert command.rejected.nodes == 2
    # What the inventory hands on (services.inventory.fold.fold_hand_over) reaches the last cell.
    arrived = routed(too_big, tried=(0, 1), hop=1).model_copy(update={"elsewhere": command.rejected})
    [verdict] = last(arrived)
    assert verdict.record.outcome == "unschedulable"
    # The first cell's preemption found nothing to free on its 2 nodes: they count there too.
    assert command.rejected.preemption == {"Preemption is not helpful for scheduling": 2}
    assert verdict.record.message == (
        "0/5 nodes are available: 5 Insufficient nvidia.com/gpu. no new claims to "
        "deallocate, preemption: 0/5 nodes are available: 5 Preemption is not helpful "
        "for scheduling."
    )
