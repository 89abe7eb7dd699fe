"""Berth's event contract: the one schema package every service and producer shares.

Events are frozen pydantic models, one discriminated union per topic (see :mod:`.topics`),
carried as CloudEvents in Kafka binary mode (see :mod:`.envelope`).
"""

from ._base import event_time
from .agentpool import AgentPoolSpec, AgentPoolSpecError, parse_agent_pool_spec
from .cluster import (
    Affinity,
    GpuDevice,
    LabelSelector,
    LabelSelectorRequirement,
    MigSlice,
    NodeAffinity,
    NodeInfo,
    NodeObserved,
    NodeRemoved,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OwnerReference,
    PodAffinity,
    PodAffinityTerm,
    PodDeleted,
    PodInfo,
    PodObserved,
    PreferredSchedulingTerm,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from .policy import (
    LimitRangeInfo,
    LimitRangeItem,
    NamespaceInfo,
    PodDisruptionBudgetInfo,
    PodGroupInfo,
    PolicyObserved,
    PolicyRemoved,
    PriorityClassInfo,
    ResourceQuotaInfo,
)
from .scheduler import (
    CellTick,
    CommandResult,
    CordonNode,
    DeadLetter,
    DecisionRecord,
    EvictPod,
    ForeignNodeObserved,
    ForeignNodeRemoved,
    HandOverPod,
    InputPosition,
    NodeVerdict,
    PlacePods,
    PodPlacement,
    PodRouted,
    RejectedNodes,
    ScalePool,
    SchedulerConfigAnnounced,
)
from .signals import GpuDeviceSample, GpuTelemetry, QueueLagObserved, SpotInterruptionNotice
from .state import DeviceInventory, NodeInventory, PodAllocation, PoolLagState
from .topics import ALL_TOPICS, KafkaNames, Topic, topic_for_event, topic_named

__all__ = [name for name in dir() if not name.startswith("_")]
