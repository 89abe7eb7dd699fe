"""The decision service's descheduling counters: a worker adds what its cell's rounds did since it
last counted, and what the cell folded before the worker took it over is not counted again."""

from __future__ import annotations

from datetime import timedelta

from berth.schemas import CellTick, InputPosition, NodeObserved, PodObserved, Taint
from berth.schemas.samples import T0
from berth.services.decision.service import CellWorker
from prometheus_client import REGISTRY

from berth.cells import Cell, CellConfig
from berth.cells.descheduling import DeschedulerSettings
from tests.unit.cells.fold_kit import replica, small_node

STRATEGY = "RemovePodsViolatingNodeTaints"
POLICY = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerPolicy",
    "profiles": [{"name": "taints", "plugins": {"deschedule": {"enabled": [STRATEGY]}}}],
}


def _evictions() -> float:
    return REGISTRY.get_sample_value("berth_descheduler_evictions_total", {"strategy": STRATEGY}) or 0.0


def _cell_that_evicted_once() -> Cell:
    cell = Cell(0, CellConfig(descheduler=DeschedulerSettings(POLICY, interval=timedelta(seconds=60))))
    tainted = small_node("bad").model_copy(update={"taints": (Taint(key="maintenance", effect="NoSchedule"),)})
    events = [
        NodeObserved(node=small_node("bad"), observed_at=T0),
        NodeObserved(node=small_node("good"), observed_at=T0),
        PodObserved(pod=replica("web", 0, node_name="bad"), observed_at=T0),
        NodeObserved(node=tainted, observed_at=T0),
        CellTick(issued_at=T0 + timedelta(seconds=1)),
    ]
    for offset, event in enumerate(events):
        cell.handle(event, InputPosition(topic="berth.scheduler.inputs.v1", partition=0, offset=offset))
    assert cell.descheduling.evictions == {STRATEGY: 1}
    return cell


def test_a_worker_counts_its_cells_evictions_once():
    before = _evictions()
    worker = CellWorker(0, _cell_that_evicted_once(), producer=None)  # type: ignore[arg-type]
    worker.count_descheduling()
    assert _evictions() == before + 1
    worker.count_descheduling()
    assert _evictions() == before + 1


def test_evictions_folded_before_the_take_over_are_not_counted_again():
    before = _evictions()
    cell = _cell_that_evicted_once()
    worker = CellWorker(0, cell, producer=None, evictions_counted=cell.descheduling.evictions.copy())  # type: ignore[arg-type]
    worker.count_descheduling()
    assert _evictions() == before
