"""What the folds of one cell share: the engine, the record maker, the node book, the queue and the
census of the other cells' nodes.

Each fold owns its own state; these are the parts more than one fold reads. Only the queue's
own functions and the scheduling round change the queue; other folds read it (e.g. a pool's
pending replicas)."""

from __future__ import annotations

from dataclasses import dataclass, field

from berth.core.engine import Engine
from berth.kube.capacity import SPOT_LABELS, SpotLabel

from .foreign_nodes import ForeignNodes
from .nodes import NodeBook
from .queue import QueueState
from .records import Recorder


@dataclass(frozen=True)
class CellContext:
    cell: int
    engine: Engine
    recorder: Recorder
    nodes: NodeBook
    queue: QueueState
    spot_labels: tuple[SpotLabel, ...] = SPOT_LABELS
    """The node labels that mark spot capacity (pool replicas' capacity classes)."""
    foreign: ForeignNodes = field(default_factory=ForeignNodes)
    """The other cells' nodes, to word a pinned pod's unschedulable message over the cluster."""
