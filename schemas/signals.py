"""Signals from outside the Kubernetes API: GPU telemetry, inference queue lag, spot notices."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ._base import DnsLabel, FrozenModel, NonNegativeInt, UtcDatetime


class GpuDeviceSample(FrozenModel):
    index: NonNegativeInt
    utilization_pct: Annotated[float, Field(ge=0, le=100)]
    memory_used_mib: NonNegativeInt
    healthy: bool = True
    xid_errors: NonNegativeInt = 0


class GpuTelemetry(FrozenModel):
    """One sample of a node's GPUs, as published by a GPU node agent (e.g. DCGM exporter)."""

    type: Literal["io.berth.gpu.telemetry.v1"] = "io.berth.gpu.telemetry.v1"
    node: DnsLabel
    devices: tuple[GpuDeviceSample, ...] = Field(min_length=1)
    sampled_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.node

    @property
    def subject(self) -> str:
        return self.node


class QueueLagObserved(FrozenModel):
    """Token-queue state of one inference pool, as a gateway or model server reports it.

    ``token_rate`` is the pool's current processing rate in tokens per second; the token-lag
    processor smooths it. ``observed_ttft_ms`` is what clients saw, if the producer knows it.
    """

    type: Literal["io.berth.inference.queue-lag.v1"] = "io.berth.inference.queue-lag.v1"
    pool: DnsLabel
    namespace: DnsLabel = "default"
    tokens_in_queue: NonNegativeInt
    token_rate: Annotated[float, Field(ge=0)]
    active_sessions: NonNegativeInt = 0
    mean_context_tokens: NonNegativeInt | None = None
    observed_ttft_ms: Annotated[float, Field(ge=0)] | None = None
    ready_replicas: NonNegativeInt | None = None
    observed_at: UtcDatetime

    @property
    def partition_key(self) -> str:
        return self.pool

    @property
    def subject(self) -> str:
        return f"{self.namespace}/{self.pool}"


class SpotInterruptionNotice(FrozenModel):
    """The cloud will reclaim a spot node at ``deadline`` (AWS gives 120 s, GCP 30 s)."""

    type: Literal["io.berth.cloud.spot-interruption.v1"] = "io.berth.cloud.spot-interruption.v1"
    node: DnsLabel
    deadline: UtcDatetime
    issued_at: UtcDatetime
    provider: Literal["aws", "gcp", "azure", "other"] = "other"

    @model_validator(mode="after")
    def _deadline_after_issue(self) -> SpotInterruptionNotice:
        if self.deadline <= self.issued_at:
            raise ValueError("deadline must be after issued_at")
        return self

    @property
    def notice_seconds(self) -> float:
        return (self.deadline - self.issued_at).total_seconds()

    @property
    def partition_key(self) -> str:
        return self.node

    @property
    def subject(self) -> str:
        return self.node


TelemetryEvent = Annotated[GpuTelemetry, Field(discriminator="type")]
QueueEvent = Annotated[QueueLagObserved, Field(discriminator="type")]
SpotEvent = Annotated[SpotInterruptionNotice, Field(discriminator="type")]
