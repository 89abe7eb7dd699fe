"""Where the things a pod needs already are: model caches and data (Score plugins).

- :class:`ModelCache`: a pod names its model with the annotation ``berth.io/model``; a node lists
  the models it has cached in the label or annotation ``berth.io/cached-models`` (comma
  separated). Nodes with the model cached score 100, others 0. Pods without the annotation are
  not scored.
- :class:`DataLocality`: a pod names the pods holding its data (a vector store shard, a cache)
  with ``berth.io/data-locality: "ns/name,name"`` (a bare name means the pod's namespace). A node
  running one of them scores 100, a node in the same zone as one of them 50, others 0.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import numpy.typing as npt

from berth.core.framework import (
    MAX_NODE_SCORE,
    CycleContext,
    NodeArray,
    PreScorePlugin,
    ScorePlugin,
    StateExtension,
    Status,
)
from berth.schemas.cluster import NodeInfo

__all__ = [
    "ANNOTATION_CACHED_MODELS",
    "ANNOTATION_DATA_LOCALITY",
    "ANNOTATION_MODEL",
    "DataLocality",
    "ModelCache",
    "ModelCacheIndex",
]

ANNOTATION_MODEL = "berth.io/model"
ANNOTATION_CACHED_MODELS = "berth.io/cached-models"
ANNOTATION_DATA_LOCALITY = "berth.io/data-locality"
LABEL_ZONE = "topology.kubernetes.io/zone"


def _models(node: NodeInfo) -> frozenset[str]:
    text = node.labels.get(ANNOTATION_CACHED_MODELS) or node.annotations.get(ANNOTATION_CACHED_MODELS) or ""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


class ModelCacheIndex(StateExtension):
    """Per model, which node slots have it cached (kept as a boolean array per model)."""

    KEY = "ModelCache"

    def __init__(self) -> None:
        self.capacity = 0
        self.by_model: dict[str, npt.NDArray[np.bool_]] = {}
        self.of_slot: dict[int, frozenset[str]] = {}

    def grow(self, capacity: int) -> None:
        if capacity > self.capacity:
            for model, slots in self.by_model.items():
                grown = np.zeros(capacity, dtype=bool)
                grown[: len(slots)] = slots
                self.by_model[model] = grown
            self.capacity = capacity

    def node_upserted(self, slot: int, node: NodeInfo, previous: NodeInfo | None) -> None:
        self.grow(slot + 1)
        self.node_removed(slot, node)
        models = _models(node)
        self.of_slot[slot] = models
        for model in models:
            self.by_model.setdefault(model, np.zeros(self.capacity, dtype=bool))[slot] = True

    def node_removed(self, slot: int, node: NodeInfo) -> None:
        for model in self.of_slot.pop(slot, frozenset()):
            self.by_model[model][slot] = False


class ModelCache(PreScorePlugin, ScorePlugin):
    NAME: ClassVar[str] = "ModelCache"
    STATE_EXTENSIONS = (ModelCacheIndex,)

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        return Status.success() if cycle.pod.annotations.get(ANNOTATION_MODEL) else Status.skip()

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        index: ModelCacheIndex = cycle.state.ensure_extension(ModelCacheIndex)  # type: ignore[assignment]  # ensure_extension is typed by the extension base class
        cached = index.by_model.get(cycle.pod.annotations[ANNOTATION_MODEL].strip())
        if cached is None:
            return np.zeros(len(nodes), dtype=np.int64)
        return np.where(cached[nodes], MAX_NODE_SCORE, 0).astype(np.int64)


class DataLocality(PreScorePlugin, ScorePlugin):
    NAME: ClassVar[str] = "DataLocality"

    def _targets(self, cycle: CycleContext) -> set[tuple[str, str]]:
        text = cycle.pod.annotations.get(ANNOTATION_DATA_LOCALITY, "")
        out = set()
        for part in text.split(","):
            part = part.strip()
            if part:
                namespace, _, name = part.rpartition("/")
                out.add((namespace or cycle.pod.namespace, name))
        return out

    def pre_score(self, cycle: CycleContext, nodes: NodeArray) -> Status:
        return Status.success() if self._targets(cycle) else Status.skip()

    def score(self, cycle: CycleContext, nodes: NodeArray) -> npt.NDArray[np.int64]:
        state = cycle.state
        targets = self._targets(cycle)
        slots = set()
        for placed in state.pods:
            if (placed.pod.namespace, placed.pod.name) in targets:
                slot = state.nodes.slot_of(placed.node_name)
                if slot is not None:
                    slots.add(slot)
        if not slots:
            return np.zeros(len(nodes), dtype=np.int64)
        chosen = np.array(sorted(slots), dtype=np.intp)
        zones = state.labels.codes(LABEL_ZONE)
        target_zones = zones[chosen]
        same_zone = np.isin(zones[nodes], target_zones[target_zones != 0])
        on_node = np.isin(nodes, chosen)
        return np.where(on_node, MAX_NODE_SCORE, np.where(same_zone, MAX_NODE_SCORE // 2, 0)).astype(np.int64)
