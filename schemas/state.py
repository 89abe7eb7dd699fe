"""State published by the stream processors: per-node GPU inventory and per-pool token lag.

Both go to compacted topics keyed by node / pool, so a newcomer reads the latest value of each
key instead of the whole history.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ._base import DnsLabel, FrozenModel, Milli, NonNegativeInt, Quantities, UtcDatetime
from .cluster import NodeInfo


class PodAllocation(FrozenModel):
    """What one bound pod holds on a node."""

    pod_uid: str
    pod: str
    """``namespace/name``."""
    requests: Quantities = Field(default_factory=dict)
    gpu_devices: tuple[NonNegativeInt, ...] = ()
    gpu_milli: Milli | None = None
    """Share of its single device for a fractional pod; None for whole devices."""


class DeviceInventory(FrozenModel):
    index: NonNegativeInt
    free_milli: Milli
    healthy: bool = True
    utilization_pct: float | None = None
    memory_used_mib: NonNegativeInt | None = None


class NodeInventory(FrozenModel):
    """The inventory processor's view of one node: its facts plus who holds what on it."""

    type: Literal["io.berth.inventory.node-state.v1"] = "io.berth.inventory.node-state.v1"
    node: NodeInfo
    cell: NonNegativeInt
    allocations: tuple[PodAllocation, ...] = ()
    devices: tuple[DeviceInventory, ...] = ()
    requested: Quantities = Field(default_factory=dict)
    draining_until: UtcDatetime | None = None
    """Set when a spot interruption notice arrived: the node is reclaimed at this time."""
    removed: bool = False
    updated_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.node.name

    @property
    def subject(self) -> str:
        return self.node.name


class PoolLagState(FrozenModel):
    """The token-lag processor's view of one inference pool.

    ``expected_ttft_ms`` = tokens in queue / smoothed token rate (+ model load time when no
    replica is ready): how long a request arriving now waits for its first token.
    """

    type: Literal["io.berth.inference.lag-state.v1"] = "io.berth.inference.lag-state.v1"
    pool: DnsLabel
    namespace: DnsLabel = "default"
    tokens_in_queue: NonNegativeInt
    token_rate: Annotated[float, Field(ge=0)]
    """Raw rate of the latest observation, tokens/s."""
    smoothed_token_rate: Annotated[float, Field(ge=0)]
    expected_ttft_ms: Annotated[float, Field(ge=0)] | None = None
    """None when nothing is processing and nothing is queued (idle pool)."""
    active_sessions: NonNegativeInt = 0
    ready_replicas: NonNegativeInt | None = None
    observations: Annotated[int, Field(ge=1)] = 1
    updated_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return f"{self.namespace}/{self.pool}"

    @property
    def subject(self) -> str:
        return f"{self.namespace}/{self.pool}"


InventoryEvent = Annotated[NodeInventory, Field(discriminator="type")]
LagStateEvent = Annotated[PoolLagState, Field(discriminator="type")]
