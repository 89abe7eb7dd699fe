"""Builders shared by the fold tests (``test_fold_*.py``): a real engine with small nodes, pods,
input positions and a cell context, each in one line.

The folds are called directly on their state dataclasses; nothing here goes through
:meth:`berth.cells.Cell.handle`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from berth.schemas import InputPosition, NodeInfo, OwnerReference, PodInfo, PodRouted
from berth.schemas.samples import T0

from berth.cells.context import CellContext
from berth.cells.nodes import NodeBook, observe_node
from berth.cells.queue import QueueState
from berth.cells.records import Recorder
from berth.core.config import default_document
from berth.core.engine import Engine
from tests.unit.core.builders import node, pod

__all__ = [
    "CONFIG_HASH",
    "SCHEDULER",
    "T0",
    "at",
    "context",
    "engine",
    "node",
    "pending",
    "pod",
    "position",
    "replica",
    "routed",
    "small_node",
]

SCHEDULER = "berth"
CONFIG_HASH = "c" * 64


def at(seconds: float) -> Any:
    """An event time ``seconds`` after the samples' epoch."""
    return T0 + timedelta(seconds=seconds)


def position(offset: int = 0) -> InputPosition:
    return InputPosition(topic="berth.scheduler.inputs.v1", partition=0, offset=offset)


def engine() -> Engine:
    """The real engine with the built-in profile (no nodes yet)."""
    return Engine(default_document())


def small_node(
    name: str, *, cpu: int = 4000, spot: bool = False, unschedulable: bool = False, price: float | None = None
) -> NodeInfo:
    """A CPU-only node; ``spot`` sets both the capacity type and Karpenter's label, which is what
    the pools' capacity classes select on."""
    info = node(
        name,
        cpu=cpu,
        unschedulable=unschedulable,
        labels={"karpenter.sh/capacity-type": "spot" if spot else "on-demand"},
    )
    return info.model_copy(update={"capacity_type": "spot" if spot else "on-demand", "price_per_hour": price})


def pending(name: str, *, cpu: int = 100, priority: int = 0, **fields: Any) -> PodInfo:
    """A pending pod of Berth's scheduler (``uid-default-<name>`` unless ``uid`` is given)."""
    return pod(name, cpu=cpu, priority=priority, **fields)


def replica(
    pool: str,
    index: int,
    *,
    namespace: str = "serving",
    node_name: str | None = None,
    cpu: int = 1000,
    seconds: float = 0,
) -> PodInfo:
    """A replica of AgentPool ``namespace/pool`` (owner reference), bound when ``node_name``."""
    return PodInfo(
        uid=f"uid-{pool}-{index}",
        namespace=namespace,
        name=f"{pool}-{index}",
        scheduler_name=SCHEDULER,
        requests={"cpu": cpu},
        owner=OwnerReference(api_version="berth.io/v1alpha1", kind="AgentPool", name=pool, controller=True),
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        creation_time=at(seconds + index),
    )


def routed(info: PodInfo, *, tried: tuple[int, ...] = (0,), cells: int = 2, hop: int = 0, **fields: Any) -> PodRouted:
    return PodRouted(pod=info, tried=tried, cells=cells, hop=hop, round_started_at=T0, observed_at=T0, **fields)


def context(*nodes: NodeInfo, cell: int = 0, over: Engine | None = None) -> CellContext:
    """A cell's shared parts over ``over`` (default a fresh real engine) that knows ``nodes``
    (observed in the node book)."""
    real = over if over is not None else engine()
    book = NodeBook()
    for info in nodes:
        observe_node(book, real, info)
    return CellContext(
        cell, real, Recorder(cell, real, CONFIG_HASH, CONFIG_HASH[:12]), book, QueueState(scheduler_name=SCHEDULER)
    )
