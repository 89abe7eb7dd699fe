"""The typed spec of Berth's ``AgentPool`` (berth.io/v1alpha1), after the NeuroNetes seed.

One model for every place a pool's policy is written: the CustomResourceDefinition
(``deploy/helm/berth/crds/agentpools.berth.io.yaml``), the pools file the token-lag and decision
services read, and the decision cell (which receives the cluster's AgentPools as
``PolicyObserved`` events whose ``spec`` is the object as written).

Keys are camelCase as in the CRD; the snake_case field names are accepted too (older pools
files). The top level ignores keys it does not know (the CRD preserves unknown fields, so a pool
written for a later version still validates), and so does ``scheduling`` (the seed puts more
blocks there than Berth acts on), but the typed blocks (``gpuRequirements``,
``scheduling.costOptimization``, ``carbonAware``, ``cacheAware``, ``dataLocality``) forbid unknown
keys: a typo there is a clear error, not a silently ignored policy.

Shape (every field optional; a pool is *scaled* only with ``tokensPerSecondPerReplica`` and
``ttftSloMs``)::

    spec:
      model: llama-70b
      replicas: 2                    # wanted now (the scale subresource)
      minReplicas: 1
      maxReplicas: 16
      ttftSloMs: 2000
      tokensPerSecondPerReplica: 2500
      modelLoadSeconds: 90           # or modelLoadTime: 90s
      cooldownSeconds: 300
      gpuRequirements: {count: 4, type: H100, topology: {locality: nvlink}}
      scheduling:
        priority: 100
        costOptimization:
          spotEnabled: true
          maxSpotPercent: 50
          maxCostPerHour: 120
          sloHeadroomMs: 500
          fallbackModel: llama-8b
          interruptionThreshold: {count: 3, window: 1h}
        carbonAware:
          maxCarbonIntensity: 200
          preferredRegions: [eu-north-1]
          timeShifting: {enabled: true, cleanEnergyHours: "09:00-17:00"}
        cacheAware: {enabled: true, cacheHitWeight: 0.3}
        dataLocality: {vectorStoreAffinity: [weaviate-0], localityWeight: high}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import time
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .cluster import GpuLocality

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_HOURS = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-4]):([0-5][0-9])$")


def duration_seconds(value: object) -> float:
    """``90``, ``"90s"``, ``"2m"``, ``"1h"``, ``"500ms"`` → seconds (a number means seconds)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; use e.g. 90s, 5m or 1h")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration; use e.g. 90s, 5m or 1h")
        seconds = float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
    return seconds  # the field's own bounds (ge/gt) say whether a negative one is wrong


class _Block(BaseModel):
    """A typed block of the spec: frozen, camelCase aliases, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class GpuTopology(_Block):
    locality: GpuLocality = "any"
    min_bandwidth: int | str | None = Field(default=None, alias="minBandwidth")


class GpuRequirements(_Block):
    """What one replica needs: ``count`` whole GPUs, or a ``fraction`` of one (with
    ``memoryMiB``), of product ``type`` (the ``nvidia.com/gpu.product`` label)."""

    count: Annotated[int, Field(ge=0)] | None = None
    type: str | None = None
    fraction: float | None = Field(default=None, gt=0, le=1)
    memory_mib: Annotated[int, Field(ge=0)] | None = Field(default=None, alias="memoryMiB")
    memory: str | None = None
    topology: GpuTopology | None = None

    @model_validator(mode="after")
    def _count_or_fraction(self) -> GpuRequirements:
        if self.count and self.fraction is not None:
            raise ValueError("give either count (whole GPUs) or fraction (a share of one GPU), not both")
        return self


class InterruptionThreshold(_Block):
    """Stop using spot for the pool once ``count`` interruptions hit it within ``window``; use
    spot again after a whole ``window`` without one."""

    count: Annotated[int, Field(ge=1)]
    window_seconds: float = Field(
        validation_alias=AliasChoices("window", "windowSeconds", "window_seconds"), serialization_alias="window", gt=0
    )
    action: Literal["disable-spot"] = "disable-spot"

    @field_validator("window_seconds", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        return duration_seconds(value)


class CostOptimization(_Block):
    enabled: bool = True
    spot_enabled: bool = Field(default=False, alias="spotEnabled")
    max_spot_percent: float = Field(default=100, ge=0, le=100, alias="maxSpotPercent")
    """At most this share of the pool's replicas on spot nodes."""
    max_cost_per_hour: float | None = Field(default=None, gt=0, alias="maxCostPerHour")
    """Ceiling of the pool's node cost (each replica's share of its node's price per hour)."""
    slo_headroom_ms: float = Field(default=0, ge=0, alias="sloHeadroomMs")
    """Scale up when the expected TTFT comes within this much of the SLO."""
    fallback_model: str | None = Field(default=None, alias="fallbackModel")
    """When capacity or cost stops the pool short, scale the pool of this model (same
    namespace, matched by ``spec.model`` or by name) for the remainder."""
    interruption_threshold: InterruptionThreshold | None = Field(default=None, alias="interruptionThreshold")


class TimeShifting(_Block):
    enabled: bool = False
    clean_energy_hours: str | None = Field(default=None, alias="cleanEnergyHours")
    """``HH:MM-HH:MM`` in UTC; outside these hours the grid counts as dirty."""

    @field_validator("clean_energy_hours")
    @classmethod
    def _hours(cls, value: str | None) -> str | None:
        if value is not None and not _HOURS.match(value):
            raise ValueError(f"{value!r} must be HH:MM-HH:MM (UTC), e.g. 09:00-17:00")
        return value

    def hours(self) -> tuple[time, time] | None:
        if self.clean_energy_hours is None:
            return None
        start, end = self.clean_energy_hours.split("-")
        return _clock(start), _clock(end)


def _clock(text: str) -> time:
    hours, minutes = (int(part) for part in text.split(":"))
    return time(23, 59, 59) if hours == 24 else time(hours, minutes)


class CarbonAware(_Block):
    enabled: bool = True
    max_carbon_intensity: float | None = Field(default=None, gt=0, alias="maxCarbonIntensity")
    """gCO2eq/kWh above which the grid counts as dirty (for time shifting)."""
    preferred_regions: tuple[str, ...] = Field(default=(), alias="preferredRegions")
    time_shifting: TimeShifting | None = Field(default=None, alias="timeShifting")


class CacheAware(_Block):
    enabled: bool = True
    cache_hit_weight: float = Field(default=0.3, ge=0, le=1, alias="cacheHitWeight")


class DataLocality(_Block):
    vector_store_affinity: tuple[str, ...] = Field(default=(), alias="vectorStoreAffinity")
    locality_weight: Literal["low", "medium", "high"] = Field(default="medium", alias="localityWeight")
    anti_affinity: tuple[str, ...] = Field(default=(), alias="antiAffinity")


class PoolScheduling(BaseModel):
    """``spec.scheduling``: keys it does not know are kept aside (the seed has more blocks than
    Berth acts on, e.g. ``fastScheduling``); the blocks it knows are strict."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    priority: int | None = None
    cost_optimization: CostOptimization | None = Field(default=None, alias="costOptimization")
    carbon_aware: CarbonAware | None = Field(default=None, alias="carbonAware")
    cache_aware: CacheAware | None = Field(default=None, alias="cacheAware")
    data_locality: DataLocality | None = Field(default=None, alias="dataLocality")
    gang_scheduling: dict[str, Any] | None = Field(default=None, alias="gangScheduling")
    preemption: dict[str, Any] | None = None


class AgentPoolSpec(BaseModel):
    """``AgentPool.spec``. See the module docstring for the shape; contracts:

    - ``minReplicas <= maxReplicas``; ``sloHeadroomMs < ttftSloMs``;
    - ``replicas`` is the count wanted now (the scale subresource); a pools file uses it as the
      count a pool starts with (``initial_replicas`` there, for older files);
    - ``modelLoadSeconds`` (or ``modelLoadTime`` as a duration) is how long a new replica takes
      to serve its first token: scale-ups lead by it.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    model: str | None = None
    replicas: Annotated[int, Field(ge=0)] | None = Field(
        default=None, validation_alias=AliasChoices("replicas", "initial_replicas", "initialReplicas")
    )
    min_replicas: int = Field(default=1, ge=0, alias="minReplicas")
    max_replicas: int = Field(default=10, ge=1, alias="maxReplicas")
    ttft_slo_ms: float | None = Field(default=None, gt=0, alias="ttftSloMs")
    tokens_per_second_per_replica: float | None = Field(default=None, gt=0, alias="tokensPerSecondPerReplica")
    model_load_seconds: float = Field(
        default=60,
        ge=0,
        validation_alias=AliasChoices("modelLoadSeconds", "modelLoadTime", "model_load_seconds"),
        serialization_alias="modelLoadSeconds",
    )
    cooldown_s: float = Field(
        default=300,
        ge=0,
        validation_alias=AliasChoices("cooldownSeconds", "cooldown_s", "cooldown_seconds"),
        serialization_alias="cooldownSeconds",
    )
    """Minimum time between a scale and the next scale-down."""
    mig_profile: str | None = Field(default=None, alias="migProfile", pattern=r"^[0-9]+g\.[0-9]+gb$")
    gpu_requirements: GpuRequirements | None = Field(default=None, alias="gpuRequirements")
    scheduling: PoolScheduling = Field(default_factory=PoolScheduling)
    template: dict[str, Any] | None = None
    """The replica pod template (a PodTemplateSpec), kept as written."""

    @field_validator("model_load_seconds", mode="before")
    @classmethod
    def _load_time(cls, value: object) -> float:
        return duration_seconds(value)

    @model_validator(mode="after")
    def _consistent(self) -> AgentPoolSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas ({self.min_replicas}) must not exceed maxReplicas ({self.max_replicas})")
        cost = self.scheduling.cost_optimization
        if cost is not None and self.ttft_slo_ms is not None and cost.slo_headroom_ms >= self.ttft_slo_ms:
            raise ValueError(
                f"scheduling.costOptimization.sloHeadroomMs ({cost.slo_headroom_ms:g}) must be "
                f"below ttftSloMs ({self.ttft_slo_ms:g})"
            )
        return self

    # -- derived --------------------------------------------------------------------------------

    @property
    def initial_replicas(self) -> int:
        """The count a pool starts with when nothing else is known."""
        return self.replicas if self.replicas is not None else max(self.min_replicas, 1)

    @property
    def scalable(self) -> bool:
        return self.ttft_slo_ms is not None and self.tokens_per_second_per_replica is not None

    @property
    def cost(self) -> CostOptimization | None:
        """The cost block when enabled."""
        block = self.scheduling.cost_optimization
        return block if block is not None and block.enabled else None

    @property
    def carbon(self) -> CarbonAware | None:
        """The carbon block when enabled."""
        block = self.scheduling.carbon_aware
        return block if block is not None and block.enabled else None


class AgentPoolSpecError(ValueError):
    """An AgentPool spec that does not validate; the message names every bad field."""


def error_text(exc: ValidationError, prefix: str = "spec") -> str:
    """``spec.scheduling.costOptimization.maxSpotPercent: Input should be less than or equal to
    100; ...`` — pydantic's errors with the camelCase path a user wrote."""
    problems = []
    for error in exc.errors(include_url=False):
        path = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "") or "spec"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; see the AgentPool CRD for the known keys)"
        problems.append(f"{path}: {message}")
    return "; ".join(problems)


def parse_agent_pool_spec(spec: Mapping[str, Any], *, where: str = "spec") -> AgentPoolSpec:
    """Validate an AgentPool's spec; raises :class:`AgentPoolSpecError` with every problem."""
    try:
        return AgentPoolSpec.model_validate(dict(spec))
    except ValidationError as exc:
        raise AgentPoolSpecError(error_text(exc, where)) from exc
