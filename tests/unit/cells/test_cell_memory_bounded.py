"""A cell under a steady load keeps nothing per pod that has left: placed, confirmed, bound and
deleted pods leave its books and its engine's state as they found them."""

from __future__ import annotations

import gc
import tracemalloc
from collections import deque

from berth.schemas import CommandResult, InputPosition, NodeObserved, PlacePods, PodDeleted, PodInfo, PodObserved
from berth.schemas.samples import T0, h100_node

from berth.cells import Cell, CellConfig
from berth.core.plugins.gpu_extension import GpuDeviceExtension

NODES = 20
ALIVE = 40


class _SteadyLoad:
    """The soak's life cycle (bench/pipeline/soak.py) in one process: each pod is observed
    pending, placed, its command applied, observed bound, and deleted once ``ALIVE`` newer
    pods are bound."""

    def __init__(self) -> None:
        self.cell = Cell(0, CellConfig())
        self.offset = 0
        self.made = 0
        self.alive: deque[PodInfo] = deque()
        for index in range(NODES):
            self._feed(NodeObserved(node=h100_node(f"node-{index:03d}"), observed_at=T0))

    def _feed(self, event: object) -> list:
        self.offset += 1
        return self.cell.handle(event, InputPosition(topic="t", partition=0, offset=self.offset))

    def run(self, pods: int) -> None:
        for _ in range(pods):
            self._one_pod()

    def _one_pod(self) -> None:
        pod = PodInfo(
            uid=f"uid-{self.made:08d}",
            namespace="ml",
            name=f"pod-{self.made:08d}",
            scheduler_name="berth",
            requests={"cpu": 100, "memory": 2**20},
            creation_time=T0,
            tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
        )
        self.made += 1
        for decision in self._feed(PodObserved(pod=pod, resource_version="1", observed_at=T0)):
            for command in decision.commands:
                if not isinstance(command, PlacePods):
                    continue
                self._feed(CommandResult.of(command, "applied", T0))
                for placement in command.placements:
                    bound = pod.model_copy(update={"node_name": placement.node, "phase": "Running"})
                    self._feed(PodObserved(pod=bound, resource_version="2", observed_at=T0))
                    self.alive.append(bound)
        while len(self.alive) > ALIVE:
            gone = self.alive.popleft()
            self._feed(
                PodDeleted(uid=gone.uid, namespace="ml", name=gone.name, node_name=gone.node_name, observed_at=T0)
            )


def _traced_growth(load: _SteadyLoad, pods: int) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        load.run(pods)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_the_gpu_extension_forgets_the_devices_it_chose_for_pods_once_they_are_deleted():
    load = _SteadyLoad()
    load.run(300)
    extension = load.cell.engine.state.extension(GpuDeviceExtension.KEY)
    assert load.made == 300 and len(load.alive) == ALIVE
    assert set(extension._auto) <= {pod.uid for pod in load.alive}


def test_memory_after_warm_up_does_not_grow_with_the_pods_that_went_through():
    load = _SteadyLoad()
    load.run(200)
    first = _traced_growth(load, 400)
    second = _traced_growth(load, 800)
    assert load.made == 1400
    # What stays is per pod alive (the same number in both runs), not per pod seen: twice the
    # pods keep (almost) the same memory, where a book of every pod seen keeps twice as much.
    assert second - first < 16 * 400, (first, second)
