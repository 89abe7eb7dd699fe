"""Every Kafka topic Berth uses, in one place: name, key, partitions, and the events it carries.

Names follow ``berth.<domain>.<name>.v<N>``; an incompatible change of an event means a new
topic with the next major version, never a different shape on the same topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from .cluster import NodeEvent, NodeObserved, NodeRemoved, PodDeleted, PodEvent, PodObserved
from .policy import PolicyEvent, PolicyObserved, PolicyRemoved
from .scheduler import (
    CellTick,
    Command,
    CommandResult,
    DeadLetterEvent,
    DecisionEvent,
    ForeignNodeObserved,
    ForeignNodeRemoved,
    HandOverEvent,
    PodRouted,
    ResultEvent,
)
from .signals import QueueEvent, SpotEvent, SpotInterruptionNotice, TelemetryEvent
from .state import InventoryEvent, LagStateEvent, PoolLagState

CellInput = Annotated[
    PodObserved
    | PodDeleted
    | PodRouted
    | NodeObserved
    | NodeRemoved
    | PolicyObserved
    | PolicyRemoved
    | CommandResult
    | PoolLagState
    | SpotInterruptionNotice
    | CellTick
    | ForeignNodeObserved
    | ForeignNodeRemoved,
    Field(discriminator="type"),
]
"""Everything a decision cell consumes, in one totally ordered log per cell."""


@dataclass(frozen=True)
class Topic:
    """A topic and its contract. ``event_union`` is the discriminated union of its events."""

    name: str
    key: str
    partitions: int
    event_union: Any
    compacted: bool = False
    description: str = ""

    @cached_property
    def adapter(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.event_union)

    @cached_property
    def event_types(self) -> dict[str, type]:
        """CloudEvents ``type`` → model class, for every event this topic may carry."""
        members = getattr(self.event_union, "__metadata__", None)
        union = self.event_union.__origin__ if members is not None else self.event_union
        classes = getattr(union, "__args__", (union,))
        return {cls.model_fields["type"].default: cls for cls in classes}


PODS = Topic(
    "berth.cluster.pods.v1",
    "pod UID",
    4,
    PodEvent,
    description="Pods observed or deleted (pending pods are what the scheduler places)",
)
NODES = Topic(
    "berth.cluster.nodes.v1", "node name", 4, NodeEvent, description="Nodes observed or removed, with their GPU devices"
)
POLICIES = Topic(
    "berth.cluster.policies.v1",
    "kind/namespace/name",
    1,
    PolicyEvent,
    description="PodGroups, PriorityClasses, ResourceQuotas, LimitRanges, PDBs",
)
GPU_TELEMETRY = Topic(
    "berth.gpu.telemetry.v1",
    "node name",
    4,
    TelemetryEvent,
    description="Per-device GPU utilisation, memory and health",
)
QUEUE_LAG = Topic(
    "berth.inference.queue.v1",
    "pool name",
    2,
    QueueEvent,
    description="Token-queue lag of inference pools, from gateways and model servers",
)
SPOT = Topic("berth.cloud.spot.v1", "node name", 1, SpotEvent, description="Spot interruption notices")
COMMANDS = Topic(
    "berth.scheduler.commands.v1",
    "pod UID / pool / node",
    4,
    Command,
    description="Placement, scale, cordon and evict commands for the binder",
)
RESULTS = Topic(
    "berth.scheduler.results.v1", "command id", 4, ResultEvent, description="What the binder did with each command"
)
HANDOVERS = Topic(
    "berth.scheduler.handovers.v1",
    "pod UID; partition = the pod's on the pod topic",
    4,
    HandOverEvent,
    description="Pods a cell could not place, for the inventory to route to the next cell "
    "(as many partitions as berth.cluster.pods.v1)",
)
DECISIONS = Topic(
    "berth.scheduler.decisions.v1",
    "cell",
    4,
    DecisionEvent,
    description="Every decision with its hashes, reasons and scores, for audit",
)
INVENTORY_STATE = Topic(
    "berth.inventory.state.v1",
    "node name",
    4,
    InventoryEvent,
    compacted=True,
    description="Per-node GPU inventory: devices, allocations, health, draining",
)
LAG_STATE = Topic(
    "berth.inference.lag-state.v1",
    "namespace/pool",
    2,
    LagStateEvent,
    compacted=True,
    description="Per-pool token lag: queue, smoothed rate, expected TTFT",
)
DECISION_INPUTS = Topic(
    "berth.scheduler.inputs.v1",
    "partition = cell (see cells.py)",
    2,
    CellInput,
    description="Each partition is one cell's ordered input log: replayable",
)
DEAD_LETTER = Topic(
    "berth.deadletter.v1",
    "source topic/partition",
    1,
    DeadLetterEvent,
    description="Records a consumer could not accept, with the reason",
)

ALL_TOPICS: tuple[Topic, ...] = (
    PODS,
    NODES,
    POLICIES,
    GPU_TELEMETRY,
    QUEUE_LAG,
    SPOT,
    INVENTORY_STATE,
    LAG_STATE,
    COMMANDS,
    RESULTS,
    DECISIONS,
    HANDOVERS,
    DECISION_INPUTS,
    DEAD_LETTER,
)
TOPICS_BY_NAME: dict[str, Topic] = {topic.name: topic for topic in ALL_TOPICS}


def topic_named(name: str) -> Topic:
    """Look a topic up by name; the error lists the known names."""
    try:
        return TOPICS_BY_NAME[name]
    except KeyError:
        known = ", ".join(sorted(TOPICS_BY_NAME))
        raise KeyError(f"unknown topic {name!r}; Berth's topics are: {known}") from None


def topic_for_event(event: Any) -> Topic:
    """The home topic of an event, from its ``type`` (the first topic that carries it; the
    decision-input topic re-carries events of other topics and is always named explicitly)."""
    for topic in ALL_TOPICS:
        if event.type in topic.event_types:
            return topic
    raise KeyError(f"no topic carries events of type {event.type!r}")
