"""Every Kafka topic Berth uses, in one place: name, key, partitions, and the events it carries.

Names follow ``berth.<domain>.<name>.v<N>``; an incompatible change of an event means a new
topic with the next major version, never a different shape on the same topic.

These are contract names. On the brokers, an installation's topics, consumer groups,
transactional ids and faust app ids carry its prefixes (so that several installations can share
one Kafka cluster): :class:`KafkaNames` is the one place that turns a contract name into the
name on the brokers, and every Kafka client of Berth goes through it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from ._base import FrozenModel
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
    def event_types(self) -> dict[str, type[FrozenModel]]:
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


KAFKA_NAME_CHARS = re.compile(r"[A-Za-z0-9._-]*")
"""What Kafka accepts in a topic name (and what Berth accepts in group and transactional ids)."""
PREFIX_MAX_LENGTH = 120
"""Longest prefix accepted: Kafka caps topic names at 249 characters, and Berth's longest derived
name (a faust table's changelog) is well under the 129 this leaves."""


def check_kafka_prefix(prefix: str, *, what: str) -> str:
    """``prefix`` if it may start Kafka topic and group names; ValueError saying why not otherwise.

    Empty is valid (today's names). ``what`` names the setting in the message."""
    if not KAFKA_NAME_CHARS.fullmatch(prefix):
        bad = sorted({char for char in prefix if not KAFKA_NAME_CHARS.fullmatch(char)})
        raise ValueError(
            f"{what} {prefix!r} has character(s) {''.join(bad)!r} Kafka does not allow in names; "
            "use letters, digits, '.', '_' and '-' only (e.g. 'team-a.')"
        )
    if len(prefix) > PREFIX_MAX_LENGTH:
        raise ValueError(
            f"{what} is {len(prefix)} characters long; at most {PREFIX_MAX_LENGTH} leave room for "
            "Berth's names within Kafka's 249-character limit"
        )
    if prefix in (".", ".."):
        raise ValueError(f"{what} {prefix!r} would make Kafka topic names it refuses; add letters or digits")
    return prefix


@dataclass(frozen=True)
class KafkaNames:
    """How one installation names its Kafka resources.

    ``topic_prefix`` starts every topic Berth reads, writes or creates, its services' internal
    ones (faust changelogs, re-keyed streams, the leader topic, cell snapshots) included;
    ``group_prefix`` starts every consumer group, transactional id and faust app id. Empty
    prefixes give the contract names unchanged. The prefix is taken as it is: include the
    separator you want (``team-a.``).
    """

    topic_prefix: str = ""
    group_prefix: str = ""

    def __post_init__(self) -> None:
        check_kafka_prefix(self.topic_prefix, what="topic prefix")
        check_kafka_prefix(self.group_prefix, what="group prefix")

    def topic(self, topic: Topic | str) -> str:
        """The name on the brokers of ``topic`` (a contract topic, or the contract-style name of
        a service's own topic)."""
        return self.topic_prefix + (topic if isinstance(topic, str) else topic.name)

    def group(self, name: str) -> str:
        """The name on the brokers of consumer group, transactional id or faust app id ``name``."""
        return self.group_prefix + name

    def contract_name(self, topic_name: str) -> str:
        """The contract name of a topic name on the brokers (the inverse of :meth:`topic`);
        KeyError when ``topic_name`` is not one of this installation's."""
        if not topic_name.startswith(self.topic_prefix):
            raise KeyError(f"topic {topic_name!r} does not start with this installation's prefix {self.topic_prefix!r}")
        return topic_name[len(self.topic_prefix) :]

    def contract_topic(self, name: str) -> Topic:
        """The contract topic ``name`` designates: a contract name, or its name on the brokers."""
        if name in TOPICS_BY_NAME:
            return TOPICS_BY_NAME[name]
        try:
            return topic_named(self.contract_name(name))
        except KeyError:
            return topic_named(name)  # its error lists the contract names


CONTRACT_NAMES = KafkaNames()
"""An installation without prefixes: every name on the brokers is the contract name."""
