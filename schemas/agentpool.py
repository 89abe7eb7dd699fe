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
          fallbackTrigger: {costExceeded: true, sloAtRisk: false}
          spotMaxInterruptions: 2      # per hour; or interruptionThreshold: {count: 3, window: 1h}
          spotStrategy:
            instanceTypes: [p4d.24xlarge, p3dn.24xlarge]
            onInterruption: migrate-to-on-demand
            maxSpotPercent: 80         # the same as costOptimization.maxSpotPercent
        carbonAware:
          maxCarbonIntensity: 200
          preferredRegions: [eu-north-1]
          timeShifting: {enabled: true, cleanEnergyHours: "09:00-17:00"}
        cacheAware:
          enabled: true
          cacheHitWeight: 0.3
          preloadStrategy:
            nodes: {labelSelector: {matchLabels: {node-pool: gpu-primary}}}
            minCachedReplicas: 2
        dataLocality: {vectorStoreAffinity: [weaviate-0], localityWeight: high}
        fastScheduling: {enabled: true, maxNodesToScore: 50}
      prewarmPercent: 10               # ready replicas beyond the need, in percent of it
      queueConfig: {autoscaleOnLag: true, maxLagThreshold: 100}

What each field does, and how the seed's fields map onto Berth's, is in ``docs/agentpool.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import time
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .cluster import GpuLocality, LabelSelectorRequirement

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


OnInterruption = Literal["migrate", "migrate-to-on-demand", "none"]
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"


class SpotStrategy(_Block):
    """How a pool uses spot nodes.

    - ``instanceTypes``: spot replicas go only to spot nodes of these instance types (the node
      label ``node.kubernetes.io/instance-type``), each new one to the listed type holding fewest
      of the pool's spot replicas (ties: list order), so one reclaim wave of one type takes few;
    - ``onInterruption``: what the pool does when one of its spot nodes gets a reclaim notice:
      ``migrate`` surges replacements on on-demand nodes first, then spot within the allowance;
      ``migrate-to-on-demand`` surges them on on-demand nodes only; ``none`` surges nothing (the
      replicas serve until the reclaim and the pool recreates them after);
    - ``maxSpotPercent``: the same cap as ``costOptimization.maxSpotPercent``."""

    instance_types: tuple[str, ...] = Field(default=(), alias="instanceTypes")
    on_interruption: OnInterruption = Field(default="migrate", alias="onInterruption")
    max_spot_percent: float | None = Field(default=None, ge=0, le=100, alias="maxSpotPercent")


class FallbackTrigger(_Block):
    """When ``fallbackModel`` takes load, after the seed's decision tree: with the SLO met Berth
    cuts cost (spot, then a smaller model when ``costExceeded``: the replicas ``maxCostPerHour``
    does not pay for go to the fallback model); with the SLO at risk (expected TTFT above the SLO
    less ``sloHeadroomMs``) it adds replicas, on-demand when spot is short, and then — when
    ``sloAtRisk`` — gives the replicas no node has room for to the fallback model."""

    cost_exceeded: bool = Field(default=True, alias="costExceeded")
    slo_at_risk: bool = Field(default=True, alias="sloAtRisk")


class CostOptimization(_Block):
    enabled: bool = True
    spot_enabled: bool = Field(default=False, alias="spotEnabled")
    max_spot_percent: float = Field(default=100, ge=0, le=100, alias="maxSpotPercent")
    """At most this share of the pool's replicas on spot nodes (``spotStrategy.maxSpotPercent``
    says the same; :attr:`spot_percent_cap` is the one in force)."""
    max_cost_per_hour: float | None = Field(default=None, gt=0, alias="maxCostPerHour")
    """Ceiling of the pool's node cost (each replica's share of its node's price per hour)."""
    slo_headroom_ms: float = Field(default=0, ge=0, alias="sloHeadroomMs")
    """Scale up when the expected TTFT comes within this much of the SLO."""
    fallback_model: str | None = Field(default=None, alias="fallbackModel")
    """When capacity or cost stops the pool short, scale the pool of this model (same
    namespace, matched by ``spec.model`` or by name) for the remainder."""
    interruption_threshold: InterruptionThreshold | None = Field(default=None, alias="interruptionThreshold")
    spot_max_interruptions: Annotated[int, Field(ge=1)] | None = Field(default=None, alias="spotMaxInterruptions")
    """Interruptions per hour after which the pool stops using spot: ``interruptionThreshold``
    ``{count: spotMaxInterruptions, window: 1h}`` (give one of the two)."""
    fallback_trigger: FallbackTrigger | None = Field(default=None, alias="fallbackTrigger")
    """None: every replica the pool is short of (budget or room) goes to ``fallbackModel``."""
    spot_strategy: SpotStrategy | None = Field(default=None, alias="spotStrategy")

    @model_validator(mode="after")
    def _one_way_each(self) -> CostOptimization:
        if self.spot_max_interruptions is not None and self.interruption_threshold is not None:
            raise ValueError(
                "give either spotMaxInterruptions (per hour) or interruptionThreshold {count, window}, not both"
            )
        strategy = self.spot_strategy
        if (
            strategy is not None
            and strategy.max_spot_percent is not None
            and "max_spot_percent" in self.model_fields_set
            and strategy.max_spot_percent != self.max_spot_percent
        ):
            raise ValueError(
                f"maxSpotPercent ({self.max_spot_percent:g}) and spotStrategy.maxSpotPercent "
                f"({strategy.max_spot_percent:g}) disagree; give one"
            )
        return self

    @property
    def interruption_limit(self) -> InterruptionThreshold | None:
        """The interruptions that suspend spot for the pool: ``interruptionThreshold``, or
        ``spotMaxInterruptions`` within an hour."""
        if self.spot_max_interruptions is not None:
            return InterruptionThreshold(count=self.spot_max_interruptions, window_seconds=3600)
        return self.interruption_threshold

    @property
    def spot_percent_cap(self) -> float:
        strategy = self.spot_strategy
        if strategy is not None and strategy.max_spot_percent is not None:
            return strategy.max_spot_percent
        return self.max_spot_percent

    @property
    def on_interruption(self) -> OnInterruption:
        return self.spot_strategy.on_interruption if self.spot_strategy is not None else "migrate"

    @property
    def spot_instance_types(self) -> tuple[str, ...]:
        return self.spot_strategy.instance_types if self.spot_strategy is not None else ()

    def falls_back_on_cost(self) -> bool:
        trigger = self.fallback_trigger
        return self.fallback_model is not None and (trigger is None or trigger.cost_exceeded)

    def falls_back_on_capacity(self, slo_at_risk: bool) -> bool:
        """Whether replicas no node has room for go to the fallback model: always without a
        ``fallbackTrigger``; with one, only when ``sloAtRisk`` and the SLO is at risk."""
        if self.fallback_model is None:
            return False
        trigger = self.fallback_trigger
        return trigger is None or (trigger.slo_at_risk and slo_at_risk)


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


class NodeLabelSelector(_Block):
    """A label selector over nodes (metav1.LabelSelector's keys)."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[LabelSelectorRequirement, ...] = Field(default=(), alias="matchExpressions")


class PreloadNodes(_Block):
    label_selector: NodeLabelSelector = Field(default_factory=NodeLabelSelector, alias="labelSelector")


class PreloadStrategy(_Block):
    """Where the pool's model is preloaded, and how many replicas must run where it is cached.

    A node holds the pool's model when its label or annotation ``berth.io/cached-models`` lists
    it, or when it matches ``nodes.labelSelector`` (the pool preloads its model there). While
    fewer than ``minCachedReplicas`` of the pool's replicas run on such nodes, a new replica is
    placed on one of them if any has room."""

    nodes: PreloadNodes | None = None
    min_cached_replicas: Annotated[int, Field(ge=0)] = Field(default=0, alias="minCachedReplicas")


class CacheAware(_Block):
    enabled: bool = True
    cache_hit_weight: float = Field(default=0.3, ge=0, le=1, alias="cacheHitWeight")
    preload_strategy: PreloadStrategy | None = Field(default=None, alias="preloadStrategy")


class DataLocality(_Block):
    vector_store_affinity: tuple[str, ...] = Field(default=(), alias="vectorStoreAffinity")
    locality_weight: Literal["low", "medium", "high"] = Field(default="medium", alias="localityWeight")
    anti_affinity: tuple[str, ...] = Field(default=(), alias="antiAffinity")


class FastScheduling(_Block):
    """Placement of the pool's replicas stops filtering after ``maxNodesToScore`` feasible nodes
    (kube's ``percentageOfNodesToScore`` sampling, as a count, from a start derived from the pod
    UID: deterministic)."""

    enabled: bool = True
    max_nodes_to_score: Annotated[int, Field(ge=1)] | None = Field(default=None, alias="maxNodesToScore")


class QueueConfig(_Block):
    """Scaling on queue lag (the seed's ToolBinding ``queueConfig``). The lag is what the ready
    replicas cannot take within a second: ``tokens in queue - replicas x tokensPerSecondPerReplica``
    (Berth's queue events count tokens, so the threshold is in tokens). With ``autoscaleOnLag``,
    a lag above ``maxLagThreshold`` scales the pool up to the fewest replicas that bring it to the
    threshold."""

    autoscale_on_lag: bool = Field(default=False, alias="autoscaleOnLag")
    max_lag_threshold: Annotated[int, Field(ge=0)] | None = Field(default=None, alias="maxLagThreshold")

    @model_validator(mode="after")
    def _threshold_given(self) -> QueueConfig:
        if self.autoscale_on_lag and self.max_lag_threshold is None:
            raise ValueError("autoscaleOnLag needs maxLagThreshold")
        return self


class PoolScheduling(BaseModel):
    """``spec.scheduling``: keys it does not know are kept aside (the seed has more blocks than
    Berth acts on); the blocks it knows are strict."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    priority: int | None = None
    cost_optimization: CostOptimization | None = Field(default=None, alias="costOptimization")
    carbon_aware: CarbonAware | None = Field(default=None, alias="carbonAware")
    cache_aware: CacheAware | None = Field(default=None, alias="cacheAware")
    data_locality: DataLocality | None = Field(default=None, alias="dataLocality")
    fast_scheduling: FastScheduling | None = Field(default=None, alias="fastScheduling")
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
    prewarm_percent: float = Field(default=0, ge=0, le=100, alias="prewarmPercent")
    """A warm pool: ``ceil(need x prewarmPercent / 100)`` ready replicas beyond the need."""
    queue_config: QueueConfig | None = Field(default=None, alias="queueConfig")

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


class ToolBindingSpec(BaseModel):
    """``ToolBinding.spec`` (berth.io/v1alpha1), of which Berth reads the queue binding: its
    ``queueConfig`` is the ``queueConfig`` of the AgentPool named by ``agentPool`` (same
    namespace). Keys it does not know are ignored, as in the AgentPool; ``queueConfig`` is strict."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    agent_pool: str | None = Field(default=None, alias="agentPool")
    queue_config: QueueConfig | None = Field(default=None, alias="queueConfig")
